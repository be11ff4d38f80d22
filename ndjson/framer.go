package ndjson

import "bytes"

// Line is one framed line, without its terminating "\n" (and "\r").
type Line struct {
	// Data is the line, or only its first MaxLine bytes when Truncated. It
	// is valid only during the callback that receives it.
	Data []byte
	// Len is the full length of the line in the stream, including its
	// terminator, whatever was kept of it.
	Len int64
	// Truncated reports that the line was longer than the framer's cap.
	Truncated bool
	// Cut reports a piece of a line that a gap (Gap, GapAtLineEnd) cut:
	// the part read before the gap (Data is its kept prefix) or the rest
	// read after it up to the next newline (Data is empty). Len is the
	// bytes read of it. It is no whole line: every byte the framer is
	// given comes out in the Len of exactly one Line, whole or cut.
	Cut bool
}

// Framer splits a byte stream into lines the way a tailer must: it carries a
// partial line across writes, strips a "\r" before the "\n", flushes an
// unterminated last line at EOF and caps what it buffers per line. Past the
// cap it keeps only the line's prefix and skips the rest, so memory stays
// bounded whatever the line length; the prefix still tells the decoder
// whether the line mattered.
type Framer struct {
	max       int
	limit     int // bytes of the current line to keep: max, or less once probed
	probe     int // after this many buffered bytes, ask keep
	keep      func(prefix []byte) bool
	probed    bool
	buf       []byte
	lineLen   int64 // bytes of the current partial line seen so far
	truncated bool
	skipping  bool  // after a gap: discard up to the next newline
	skipped   int64 // bytes discarded so far while skipping
	emit      func(Line)
	sq        Squeezer
	sqFrom    int  // buffered bytes of a line at which sq takes over
	squeezing bool // sq holds the current line
}

// A Squeezer rewrites a long line while it arrives into a shorter one that
// means the same to the line's reader (streamjson.Squeezer: the elements
// of a snapshot the decoder would skip unread), so that the framer need
// not hold the line whole.
type Squeezer interface {
	// Append appends to dst what is kept of src, the line's next bytes,
	// and returns the extended slice. dst may share src's array if it
	// ends at or before src's start: nothing kept of src may be longer
	// than what was read of it.
	Append(dst, src []byte) []byte
	// Reset starts the next line.
	Reset()
}

// NewFramer returns a framer that calls emit for every line and buffers at
// most max bytes of one line.
func NewFramer(max int, emit func(Line)) *Framer {
	if max < 1 {
		max = 1
	}
	return &Framer{max: max, limit: max, emit: emit}
}

// SetProbe makes the framer ask keep, once n bytes of a line that is still
// arriving are buffered, whether the rest is worth buffering. When keep
// says no, only those n bytes are kept and the line is delivered as
// Truncated: a multi-megabyte message nobody decodes costs no memory.
func (f *Framer) SetProbe(n int, keep func(prefix []byte) bool) {
	f.probe, f.keep = n, keep
}

// SetSqueezer makes the framer pass a line that is still arriving through
// s once from bytes of it are buffered, and buffer only what s keeps. A
// squeezed line is still judged by its length in the stream: past the
// framer's cap it is Truncated, Data what s kept of its first max bytes.
func (f *Framer) SetSqueezer(from int, s Squeezer) {
	f.sqFrom, f.sq = from, s
}

// Write frames p. Complete lines that lie wholly in p are passed to emit
// without copying.
func (f *Framer) Write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			f.partial(p)
			return
		}
		seg := p[:i]
		p = p[i+1:]
		if f.skipping {
			f.skipped += int64(len(seg)) + 1
			f.endSkip()
			continue
		}
		if f.lineLen == 0 {
			// Fast path: the whole line is in p.
			n := int64(len(seg)) + 1
			if len(seg) > f.max {
				f.emit(Line{Data: trimCR(seg[:f.max], false), Len: n, Truncated: true})
			} else {
				f.emit(Line{Data: trimCR(seg, true), Len: n})
			}
			continue
		}
		f.partial(seg)
		f.lineLen++ // the newline
		f.emit(Line{Data: trimCR(f.buf, !f.truncated), Len: f.lineLen, Truncated: f.truncated})
		f.reset()
	}
}

// partial appends p to the current line, keeping at most max bytes.
func (f *Framer) partial(p []byte) {
	if f.skipping {
		f.skipped += int64(len(p))
		return
	}
	seen := f.lineLen // of the line, before p
	f.lineLen += int64(len(p))
	if f.squeezing {
		if room := int64(f.max) - seen; room > 0 {
			if int64(len(p)) > room {
				p = p[:room]
				f.truncated = true
			}
			if need := len(f.buf) + len(p); need > cap(f.buf) {
				// Doubling, not straight to the limit as grow does: what
				// is kept of a squeezed line is usually far less than it
				// (and append's 1.25x steps left a trail of garbage).
				nb := make([]byte, len(f.buf), min(max(need, 2*cap(f.buf)), f.max))
				copy(nb, f.buf)
				f.buf = nb
			}
			f.buf = f.sq.Append(f.buf, p)
		} else if len(p) > 0 {
			f.truncated = true
		}
		return
	}
	if room := f.limit - len(f.buf); room > 0 {
		if len(p) > room {
			p = p[:room]
			f.truncated = true
		}
		if need := len(f.buf) + len(p); need > cap(f.buf) {
			// Double, up to the limit: append's 1.25x steps for a long line
			// held old and new buffer together a dozen times (a 4 MiB line
			// peaked at 7.6 MiB of buffers), doubling a few times.
			nb := make([]byte, len(f.buf), f.grow(need))
			copy(nb, f.buf)
			f.buf = nb
		}
		f.buf = append(f.buf, p...)
	} else if len(p) > 0 {
		f.truncated = true
	}
	if f.keep != nil && !f.probed && len(f.buf) >= f.probe && f.probe > 0 {
		f.probed = true
		if !f.keep(f.buf) {
			f.limit = len(f.buf)
			f.truncated = true
		}
	}
	if f.sq != nil && !f.truncated && f.limit == f.max && len(f.buf) >= f.sqFrom && (f.keep == nil || f.probed) {
		// What is buffered is the whole line so far: the squeezer reads
		// it from the start, in place, then every byte as it comes.
		f.squeezing = true
		f.sq.Reset()
		f.buf = f.sq.Append(f.buf[:0], f.buf)
	}
}

// grow is the capacity for a line buffer that must hold need bytes: double,
// but past bigLine go straight to the limit. Doubling to 4 MiB held the 2 MiB
// and the 4 MiB buffers together (6 MiB) while copying; a line that long is a
// snapshot of thousands of agents and is then decoded beside its buffer, and
// that moment was the peak resident set of `run` under the state attack of
// docs/reliability.md (anon memory 17.5 MiB, 15 MiB with this).
func (f *Framer) grow(need int) int {
	c := max(need, 2*cap(f.buf), 4<<10)
	if c > bigLine {
		c = f.limit
	}
	return min(c, f.limit)
}

// Gap tells the framer that bytes are missing from the stream (the tap
// dropped them): the partial line is discarded and so is everything up to
// the next newline, because neither is a whole line.
func (f *Framer) Gap() {
	f.cut()
	f.skipping = true
}

// GapAtLineEnd tells the framer that bytes are missing from the stream and
// that the missing bytes ended with a newline: the partial line is
// discarded, but the next byte starts a whole line, which is kept.
func (f *Framer) GapAtLineEnd() {
	f.cut()
	f.skipping = false
}

// cut emits what was read of the lines a gap cuts (the partial line, or
// what was skipped after an earlier gap) as Cut lines, and resets.
func (f *Framer) cut() {
	if f.lineLen > 0 { // never while skipping: partial keeps nothing then
		f.emit(Line{Data: f.buf, Len: f.lineLen, Truncated: f.truncated, Cut: true})
	}
	f.endSkip() // resets
}

// endSkip ends skipping: what it discarded comes out as a Cut line.
func (f *Framer) endSkip() {
	if f.skipping && f.skipped > 0 {
		f.emit(Line{Len: f.skipped, Cut: true})
	}
	f.skipping, f.skipped = false, 0
	f.reset()
}

// Flush ends the stream: an unterminated last line is emitted as a line
// (what is left of one cut by a gap, as a Cut line).
func (f *Framer) Flush() {
	if f.skipping {
		f.endSkip()
	}
	if f.lineLen > 0 {
		f.emit(Line{Data: f.buf, Len: f.lineLen, Truncated: f.truncated})
	}
	f.reset()
}

// Held returns the capacity of the buffer of the line being read: what a
// long line costs in memory while it arrives.
func (f *Framer) Held() int { return cap(f.buf) }

// Pending returns how many bytes of an unterminated line are held.
func (f *Framer) Pending() int64 { return f.lineLen }

func (f *Framer) reset() {
	// Keep a modest buffer for reuse; drop a huge one so one long line does
	// not pin its memory for the rest of the stream.
	if cap(f.buf) > 1<<20 {
		f.buf = nil
	} else {
		f.buf = f.buf[:0]
	}
	f.lineLen = 0
	f.truncated = false
	f.limit = f.max
	f.probed = false
	f.squeezing = false
}

// trimCR removes one trailing "\r" of a complete line (CRLF framing).
func trimCR(b []byte, complete bool) []byte {
	if complete && len(b) > 0 && b[len(b)-1] == '\r' {
		return b[:len(b)-1]
	}
	return b
}

// DefaultMaxLine is the per-line cap of the framer. Lines of interest
// (task_* events) are small; a workflow with a thousand agents makes
// snapshots of about a megabyte. Longer lines are passed through by the
// wrapper untouched but only their prefix is looked at here.
const DefaultMaxLine = 4 << 20

// bigLine is the buffer size past which a line's buffer grows to the limit
// in one step (see grow).
const bigLine = 512 << 10
