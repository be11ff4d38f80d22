package spool

import (
	"bytes"

	"github.com/cbc-otel/cbc-otel/tap"
)

// Bounds of the Reader. A tag, a header or gap record and a stdin time
// stamp are short by format; longer ones are skipped (or, for a stamp,
// taken as the line's), never buffered without bound.
const (
	maxTag    = 32
	maxRecord = 256
	maxStamp  = 20
)

// Handler receives what a Reader reads.
type Handler interface {
	// Write is the next bytes of a line of src (a stdout line, or a
	// control request seen on stdin), as they come: a line may arrive in
	// several pieces, and the piece that ends it ends with its newline.
	Write(src tap.Source, b []byte)
	// Discard says that the bytes of src written since its last newline
	// are not a line (it was cut by a gap, or the file was truncated): drop
	// them; the next Write of src starts a new line.
	Discard(src tap.Source)
	// Record is a header (RecordHeader) or gap (RecordGap) record. The
	// Reader itself drops what a gap leaves behind (see the package doc).
	Record(r Record)
}

// Reader modes.
const (
	modeStart  = iota // at the start of a line
	modeTag           // after RS, reading the tag
	modeStamp         // after "\x1estdin ": reading an optional time stamp
	modeStream        // passing the line on to the Handler as src
	modeRecord        // buffering a small record (header, gap)
	modeSkip          // discarding up to the end of the line
)

// Reader splits the bytes of a followed file, a spool file or a plain one
// (the CLI's stdout written by tee), into the lines of each source for a
// Handler, in any pieces the bytes come in: feeding them in one Write or
// split anywhere gives the Handler the same lines. Line contents are passed
// on as they come, so a long line is never held here (the Handler caps
// it). It keeps the offset of the end of the last complete line, where a
// follower resumes after a restart. A Reader is used from one goroutine.
type Reader struct {
	h     Handler
	spool bool

	pos, off int64 // bytes consumed; the end of the last complete line

	mode       int
	src        tap.Source
	buf        []byte  // tag, stamp or record being assembled
	heldRS     bool    // a stream line's last byte so far is RS, not passed on: a cut line if the newline follows
	partial    [2]bool // bytes of an unfinished line of a source were written
	skipStdout bool    // after a stdout gap: the next stdout line is the tail of a lost one
}

// NewReader returns a Reader of a file of kind k (by its name, see KindOf)
// at offset 0: every line of a Plain file is stdout, verbatim; a spool
// file's records are split as the package doc says.
func NewReader(k Kind, h Handler) *Reader {
	return &Reader{h: h, spool: k != Plain}
}

// Offset is where the last complete line read ends: every byte before it
// was passed on, and the bytes after it belong to a line not complete yet.
func (r *Reader) Offset() int64 { return r.off }

// Pos is how many bytes were read: Offset plus the unfinished line.
func (r *Reader) Pos() int64 { return r.pos }

// Reset makes the Reader read from offset at, at the start of a line (a
// restored offset, or 0 after a truncation): the unfinished line, if any,
// is discarded.
func (r *Reader) Reset(at int64) {
	for src, p := range r.partial {
		if p {
			r.h.Discard(tap.Source(src))
		}
	}
	r.partial = [2]bool{}
	r.mode, r.buf, r.heldRS, r.skipStdout = modeStart, r.buf[:0], false, false
	r.pos, r.off = at, at
}

// Write reads p, the bytes that follow those read so far. It implements
// io.Writer and never fails.
func (r *Reader) Write(p []byte) (int, error) {
	data := p
	for len(data) > 0 {
		switch r.mode {
		case modeStart:
			if r.spool && data[0] == RS {
				r.mode, r.buf = modeTag, r.buf[:0]
				data = r.advance(data, 1)
				continue
			}
			r.stdoutLine()
		case modeTag:
			data = r.tag(data)
		case modeStamp:
			data = r.stamp(data)
		case modeStream:
			data = r.stream(data)
		case modeRecord, modeSkip:
			data = r.record(data)
		}
	}
	return len(p), nil
}

// stdoutLine starts a stdout line: passed on, unless it is the tail left by
// a gap.
func (r *Reader) stdoutLine() {
	r.src, r.mode = tap.SourceStdout, modeStream
	if r.skipStdout {
		r.skipStdout, r.mode = false, modeSkip
	}
}

// tag reads a record's tag, up to the space (consumed) or the newline (left
// for the next mode, which ends the line).
func (r *Reader) tag(data []byte) []byte {
	i := bytes.IndexAny(data, " \n")
	if i < 0 {
		r.buf = append(r.buf, data...)
		if len(r.buf) > maxTag {
			r.mode = modeSkip
		}
		return r.advance(data, len(data))
	}
	r.buf = append(r.buf, data[:i]...)
	if data[i] == ' ' {
		i++
	}
	data = r.advance(data, i)
	switch string(r.buf) {
	case tagStdout:
		r.stdoutLine()
	case tagStdin:
		r.mode, r.src, r.buf = modeStamp, tap.SourceStdin, r.buf[:0]
	case tagGap, tagHeader:
		r.buf = append(append([]byte{RS}, r.buf...), ' ')
		r.mode = modeRecord
	default:
		r.mode = modeSkip // a later version's record, or garbage
	}
	return data
}

// stamp reads the optional time stamp of a stdin record:
// "\x1estdin <ns> <json>", or the older "\x1estdin <json>".
func (r *Reader) stamp(data []byte) []byte {
	j := 0
	for j < len(data) && data[j] >= '0' && data[j] <= '9' {
		j++
	}
	r.buf = append(r.buf, data[:j]...)
	data = r.advance(data, j)
	switch {
	case len(r.buf) > maxStamp || (len(data) > 0 && (data[0] != ' ' || len(r.buf) == 0)):
		r.write(r.buf) // no stamp: the digits are the line's
		r.mode = modeStream
	case len(data) > 0:
		data = r.advance(data, 1) // the space after the stamp
		r.mode = modeStream
	}
	return data
}

// stream passes a line's bytes on. A spool line ending with RS was cut by
// a gap (see the package doc): a trailing RS is held until the next byte
// tells.
func (r *Reader) stream(data []byte) []byte {
	i := bytes.IndexByte(data, '\n')
	seg := data
	if i >= 0 {
		seg = data[:i]
	}
	if r.heldRS && len(seg) > 0 {
		r.write([]byte{RS})
		r.heldRS = false
	}
	cut := r.spool && len(seg) > 0 && seg[len(seg)-1] == RS
	if i < 0 {
		if cut {
			seg = seg[:len(seg)-1]
			r.heldRS = true
		}
		r.write(seg)
		return r.advance(data, len(data))
	}
	if cut || r.heldRS {
		r.heldRS = false
		r.discard() // the cut line, up to its newline, is not a line
	} else {
		r.write(data[:i+1])
	}
	data = r.advance(data, i+1)
	r.lineEnd()
	return data
}

// record buffers a header or gap record (modeRecord), or skips a line
// (modeSkip), to the end of the line.
func (r *Reader) record(data []byte) []byte {
	i := bytes.IndexByte(data, '\n')
	end := len(data)
	if i >= 0 {
		end = i
	}
	if r.mode == modeRecord {
		r.buf = append(r.buf, data[:end]...)
		if len(r.buf) > maxRecord {
			r.mode = modeSkip
		}
	}
	if i < 0 {
		return r.advance(data, len(data))
	}
	data = r.advance(data, i+1)
	if r.mode == modeRecord {
		rec := Parse(r.buf)
		r.h.Record(rec)
		if rec.Kind == RecordGap && rec.Source == tap.SourceStdout {
			// What follows a stdout gap up to the next newline is the tail
			// of a line whose head was lost: not a line. (stdin records
			// are whole lines: the writer drops a cut stdin line itself.)
			r.skipStdout = true
		}
	}
	r.lineEnd()
	return data
}

func (r *Reader) write(b []byte) {
	if len(b) == 0 {
		return
	}
	r.h.Write(r.src, b)
	r.partial[r.src] = b[len(b)-1] != '\n'
}

func (r *Reader) discard() {
	if r.partial[r.src] {
		r.h.Discard(r.src)
		r.partial[r.src] = false
	}
}

func (r *Reader) advance(data []byte, n int) []byte {
	r.pos += int64(n)
	return data[n:]
}

func (r *Reader) lineEnd() {
	r.mode = modeStart
	r.off = r.pos
}
