package follow

import (
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

// stream is one followed file and its pipeline.
type stream struct {
	path string
	id   fileID
	kind spool.Kind
	f    *os.File
	pipe *ingest.Pipeline
	ckpt map[string]ingest.StreamCheckpointer

	rd    *spool.Reader // splits the file's bytes into the pipeline's lines
	fp    string
	fpLen int64

	lastGrowth int64 // epoch ms
	complete   bool  // a spool file renamed to its complete name
	gone       bool  // unlinked: read to the end, then finalize

	// onRecord reports records to the engine (version header, gaps).
	onRecord func(*stream, spool.Record)
}

// Write, Discard and Record make the stream the Handler of its Reader.

// Write feeds a line's bytes to the pipeline.
func (s *stream) Write(src tap.Source, b []byte) { s.pipe.Write(src, b) }

// Discard drops the pipeline's partial line of src; the next byte starts a
// line.
func (s *stream) Discard(src tap.Source) { s.pipe.GapAtLineEnd(src) }

// Record reports a header or gap record to the engine.
func (s *stream) Record(r spool.Record) {
	if s.onRecord != nil {
		s.onRecord(s, r)
	}
}

// offset is where the last complete line fed ends: what a checkpoint saves.
func (s *stream) offset() int64 { return s.rd.Offset() }

// readSome reads up to budget bytes from where the Reader is and feeds
// them. It reports how many bytes were read.
func (s *stream) readSome(buf []byte, budget int) (int, error) {
	total := 0
	for total < budget {
		n, err := s.f.ReadAt(buf[:min(len(buf), budget-total)], s.rd.Pos())
		if n > 0 {
			s.rd.Write(buf[:n])
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
	n := min(s.offset(), fpMax)
	if s.fpLen != n {
		if fp, ok := fingerprint(s.f, n); ok {
			s.fp, s.fpLen = fp, n
		}
	}
	return FileState{Path: s.path, Dev: s.id.dev, Ino: s.id.ino, FP: s.fp, FPLen: s.fpLen, Size: s.offset()}
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
