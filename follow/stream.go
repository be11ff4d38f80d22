package follow

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/spool"
	"github.com/cbc-otel/cbc-otel/tap"
)

// fpMax is how many leading bytes identify a file besides its inode.
const fpMax = 1024

// maxTag bounds a spool record tag; maxRecord a header or gap record.
const (
	maxTag    = 32
	maxRecord = 256
)

// fileID is a file's device and inode.
type fileID struct{ dev, ino uint64 }

func idOf(fi os.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, true //nolint:unconvert // Dev is not uint64 everywhere
}

func nlink(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink) //nolint:unconvert
	}
	return 1
}

// fingerprint hashes the first n bytes of f (n ≤ fpMax); ok is false when
// the file is shorter.
func fingerprint(f *os.File, n int64) (string, bool) {
	if n <= 0 {
		return "", true
	}
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, 0); err != nil {
		return "", false
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:]), true
}

// splitter modes.
const (
	modeStart  = iota // at the start of a line
	modeTag           // after RS, reading the tag
	modeStream        // forwarding the line to the pipeline as src
	modeRecord        // buffering a small record (header, gap)
	modeSkip          // discarding up to the end of the line
	modeStamp         // after "\x1estdin ": reading an optional time stamp
)

// maxStamp bounds the digits of a stdin record's time stamp.
const maxStamp = 20

// stream is one followed file and its pipeline.
type stream struct {
	path string
	id   fileID
	kind spool.Kind
	f    *os.File
	pipe *ingest.Pipeline
	ckpt map[string]ingest.StreamCheckpointer

	offset  int64 // consumed up to the end of the last complete line
	readPos int64 // read so far (offset + the partial line fed)
	fp      string
	fpLen   int64

	lastGrowth int64 // epoch ms
	complete   bool  // a spool file renamed to its complete name
	gone       bool  // unlinked: read to the end, then finalize

	mode   int
	src    tap.Source
	buf    []byte // tag, stamp or record being assembled
	heldRS bool   // a stream line's last byte so far is RS, not yet fed: a cut line if the newline follows
	// onRecord reports records to the engine (version header, gaps).
	onRecord func(*stream, spool.Record)
}

// reset discards the partial line: after a truncation the bytes before it
// belong to nothing.
func (s *stream) reset() {
	s.pipe.Gap(tap.SourceStdout)
	s.pipe.Gap(tap.SourceStdin)
	s.mode, s.buf, s.heldRS = modeStart, s.buf[:0], false
}

// feed processes bytes read at readPos. Plain files are stdout verbatim;
// spool files are split into records (see package spool). Line contents are
// streamed into the pipeline as they come, so a long line is never held
// here: the pipeline's framer caps it.
func (s *stream) feed(data []byte) {
	spoolFmt := s.kind != spool.Plain
	for len(data) > 0 {
		switch s.mode {
		case modeStart:
			if spoolFmt && data[0] == spool.RS {
				s.mode, s.buf = modeTag, s.buf[:0]
				data = s.advance(data, 1)
				continue
			}
			s.mode, s.src = modeStream, tap.SourceStdout
		case modeTag:
			i := bytes.IndexAny(data, " \n")
			if i < 0 {
				s.buf = append(s.buf, data...)
				if len(s.buf) > maxTag {
					s.mode = modeSkip
				}
				data = s.advance(data, len(data))
				continue
			}
			s.buf = append(s.buf, data[:i]...)
			nl := data[i] == '\n'
			data = s.advance(data, i+1)
			switch string(s.buf) {
			case "stdout", "stdin":
				s.mode, s.src = modeStream, tap.SourceStdout
				if string(s.buf) == "stdin" {
					s.mode, s.src, s.buf = modeStamp, tap.SourceStdin, s.buf[:0]
				}
				if nl {
					s.pipe.Write(s.src, []byte{'\n'})
				}
			case "gap", "cbcspool":
				s.buf = append(append([]byte{spool.RS}, s.buf...), ' ')
				s.mode = modeRecord
				if nl {
					s.record()
				}
			default:
				s.mode = modeSkip
			}
			if nl {
				s.lineEnd()
			}
		case modeStamp:
			// "\x1estdin <ns> <json>", or the older "\x1estdin <json>".
			j := 0
			for j < len(data) && data[j] >= '0' && data[j] <= '9' {
				j++
			}
			s.buf = append(s.buf, data[:j]...)
			data = s.advance(data, j)
			switch {
			case len(s.buf) > maxStamp || (len(data) > 0 && (data[0] != ' ' || len(s.buf) == 0)):
				s.pipe.Write(s.src, s.buf) // no stamp: the digits are the line's
				s.mode = modeStream
			case len(data) > 0:
				data = s.advance(data, 1) // the space after the stamp
				s.mode = modeStream
			}
		case modeStream:
			i := bytes.IndexByte(data, '\n')
			seg := data
			if i >= 0 {
				seg = data[:i]
			}
			if s.heldRS && len(seg) > 0 {
				s.pipe.Write(s.src, []byte{spool.RS})
				s.heldRS = false
			}
			// A spool line ending with RS was cut by a gap (see package
			// spool): hold a trailing RS until the next byte tells.
			cut := spoolFmt && len(seg) > 0 && seg[len(seg)-1] == spool.RS
			if i < 0 {
				if cut {
					seg = seg[:len(seg)-1]
					s.heldRS = true
				}
				s.pipe.Write(s.src, seg)
				data = s.advance(data, len(data))
				continue
			}
			if cut || s.heldRS {
				if cut {
					s.pipe.Write(s.src, seg[:len(seg)-1])
				}
				s.heldRS = false
				s.pipe.Gap(s.src)                 // discard the cut line...
				s.pipe.Write(s.src, []byte{'\n'}) // ...up to its newline
			} else {
				s.pipe.Write(s.src, data[:i+1])
			}
			data = s.advance(data, i+1)
			s.lineEnd()
		case modeRecord, modeSkip:
			i := bytes.IndexByte(data, '\n')
			end := len(data)
			if i >= 0 {
				end = i
			}
			if s.mode == modeRecord {
				s.buf = append(s.buf, data[:end]...)
				if len(s.buf) > maxRecord {
					s.mode = modeSkip
				}
			}
			if i < 0 {
				data = s.advance(data, len(data))
				continue
			}
			data = s.advance(data, i+1)
			if s.mode == modeRecord {
				s.record()
			}
			s.lineEnd()
		}
	}
}

func (s *stream) advance(data []byte, n int) []byte {
	s.readPos += int64(n)
	return data[n:]
}

func (s *stream) lineEnd() {
	s.mode = modeStart
	s.offset = s.readPos
}

func (s *stream) record() {
	if s.onRecord != nil {
		s.onRecord(s, spool.Parse(s.buf))
	}
}

// readSome reads up to budget bytes from readPos and feeds them. It
// reports how many bytes were read.
func (s *stream) readSome(buf []byte, budget int) (int, error) {
	total := 0
	for total < budget {
		n, err := s.f.ReadAt(buf[:min(len(buf), budget-total)], s.readPos)
		if n > 0 {
			s.feed(buf[:n])
			total += n
		}
		if errors.Is(err, io.EOF) || n == 0 {
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("reading %s: %w", s.path, err)
		}
	}
	return total, nil
}

// identity returns the file's identity at the current offset.
func (s *stream) identity() FileState {
	n := min(s.offset, fpMax)
	if s.fpLen != n {
		if fp, ok := fingerprint(s.f, n); ok {
			s.fp, s.fpLen = fp, n
		}
	}
	return FileState{Path: s.path, Dev: s.id.dev, Ino: s.id.ino, FP: s.fp, FPLen: s.fpLen, Size: s.offset}
}

// matches reports whether the open file f (of identity id, at path) is
// the file fs describes.
func matches(f *os.File, path string, id fileID, fs FileState) bool {
	if id.dev != fs.Dev || id.ino != fs.Ino {
		return false
	}
	// Spool names are unique and survive the completion rename: a reused
	// inode under another spool name is another stream.
	if spool.KindOf(fs.Path) != spool.Plain && spool.Stem(filepath.Base(fs.Path)) != spool.Stem(filepath.Base(path)) {
		return false
	}
	fp, ok := fingerprint(f, fs.FPLen)
	return ok && fp == fs.FP
}
