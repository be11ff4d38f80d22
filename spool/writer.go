package spool

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// Bounds of the writer. Control requests are a few hundred bytes; these
// only matter for a stream that misbehaves.
const (
	// maxStdinLine is the longest stdin line looked at; longer lines (user
	// messages with large content) are skipped without being buffered.
	maxStdinLine = 64 << 10
	// maxPending bounds the stdin records waiting for a stdout line to end.
	maxPending = 256
	// bufSize is the write buffer; it is flushed whenever both taps are
	// momentarily empty, so a follower sees each event promptly.
	bufSize = 64 << 10
)

// Stats counts what a Writer did. Every field is safe to read from any
// goroutine while the Writer runs.
type Stats struct {
	// BytesWritten is the bytes accepted for the file, records included.
	BytesWritten atomic.Int64
	// BytesDropped is the tapped bytes that never reached the file: dropped
	// by a tap under pressure, or discarded after a write error or because
	// the file could not be created.
	BytesDropped atomic.Int64
	// Errors counts failures: the file not created, a write, the sync, the
	// rename.
	Errors atomic.Int64
	// StdinRecords counts the control requests written; StdinDropped those
	// lost because a stdout line did not end in time.
	StdinRecords, StdinDropped atomic.Int64
}

// Writer writes one spool file from the taps of a wrapped child. It is the
// taps' only consumer: it releases every chunk as soon as it is written, and
// a slow or failing disk costs the spool (the taps drop and count), never
// the child. Consume runs on one goroutine.
type Writer struct {
	dir, name string // name without the suffix
	f         *os.File
	bw        *bufio.Writer
	log       *slog.Logger
	stats     *Stats
	broken    bool

	midLine      bool     // the last stdout byte written was not a newline
	pending      [][]byte // stdin records waiting for a stdout line boundary
	inLine       []byte   // the stdin line being assembled
	inSkip       bool     // skipping the rest of a stdin line (too long, or after a gap)
	dec          *ingest.Decoder
	reported     [2]int64 // tap drops already written as gap records
	finishedPath string
}

// Create makes a new spool file in dir. The name is unique across processes
// and hosts sharing the directory: creation time, pid and 64 random bits,
// created with O_EXCL. stats may be nil.
func Create(dir string, log *slog.Logger, stats *Stats) (*Writer, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if stats == nil {
		stats = new(Stats)
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("spool: random name: %w", err)
	}
	name := fmt.Sprintf("%d-%d-%s", time.Now().UnixNano(), os.Getpid(), hex.EncodeToString(rnd[:]))
	// 0640: the stream holds prompts and model output. A sidecar reads it
	// through a shared group (fsGroup of the pod's volume).
	f, err := os.OpenFile(filepath.Join(dir, name+OpenSuffix), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		stats.Errors.Add(1)
		return nil, fmt.Errorf("spool: creating file in %s: %w", dir, err)
	}
	w := &Writer{dir: dir, name: name, f: f, bw: bufio.NewWriterSize(f, bufSize), log: log, stats: stats,
		dec: ingest.NewDecoder(ingest.DecodeOptions{})}
	w.write([]byte(fmt.Sprintf("%c%s %d\n", RS, tagHeader, Version)))
	w.flush()
	return w, nil
}

// Path is where the file is now: the .open name until Consume finishes,
// then the complete one.
func (w *Writer) Path() string {
	if w.finishedPath != "" {
		return w.finishedPath
	}
	return filepath.Join(w.dir, w.name+OpenSuffix)
}

// Stats returns the writer's counters.
func (w *Writer) Stats() *Stats { return w.stats }

// Consume drains both taps until they are closed, writing records as it
// goes, then syncs the file and renames it to its complete name. Either tap
// may be nil. It returns the first error of the file (also logged once);
// the taps are drained whatever happens.
func (w *Writer) Consume(stdout, stdin *ingest.Tap) error {
	var outC, inC <-chan ingest.Chunk
	if stdout != nil {
		outC = stdout.Chunks()
	}
	if stdin != nil {
		inC = stdin.Chunks()
	}
	for outC != nil || inC != nil {
		select {
		case c, ok := <-outC:
			if !ok {
				outC = nil
				w.endStdout(stdout)
				continue
			}
			if c.Gap {
				w.gap(ingest.SourceStdout, stdout)
			}
			w.stdout(c.Data)
			stdout.Release(c)
		case c, ok := <-inC:
			if !ok {
				inC = nil
				w.endStdin(stdin)
				continue
			}
			if c.Gap {
				w.gap(ingest.SourceStdin, stdin)
			}
			w.stdin(c.Data)
			stdin.Release(c)
		}
		if (outC == nil || len(outC) == 0) && (inC == nil || len(inC) == 0) {
			w.flush()
		}
	}
	return w.finish()
}

// Drain consumes both taps without writing anything, counting their bytes
// as dropped: the consumer when the spool file could not be created, so that
// the taps still never fill up and the passthrough goes on.
func Drain(stdout, stdin *ingest.Tap, stats *Stats) {
	var outC, inC <-chan ingest.Chunk
	if stdout != nil {
		outC = stdout.Chunks()
	}
	if stdin != nil {
		inC = stdin.Chunks()
	}
	for outC != nil || inC != nil {
		select {
		case c, ok := <-outC:
			if !ok {
				outC = nil
				continue
			}
			stats.BytesDropped.Add(int64(len(c.Data)))
			stdout.Release(c)
		case c, ok := <-inC:
			if !ok {
				inC = nil
				continue
			}
			stdin.Release(c)
		}
	}
	if stdout != nil {
		_, d, _ := stdout.Stats()
		stats.BytesDropped.Add(d)
	}
}

// write appends p to the file, or counts it as dropped once the file failed.
func (w *Writer) write(p []byte) {
	if w.broken {
		w.stats.BytesDropped.Add(int64(len(p)))
		return
	}
	if _, err := w.bw.Write(p); err != nil {
		w.fail("writing", err)
		w.stats.BytesDropped.Add(int64(len(p)))
		return
	}
	w.stats.BytesWritten.Add(int64(len(p)))
}

func (w *Writer) flush() {
	if w.broken {
		return
	}
	if err := w.bw.Flush(); err != nil {
		w.fail("writing", err)
	}
}

// fail marks the file broken: a full disk or a vanished directory is
// logged once and counted, and the rest of the stream is only counted.
func (w *Writer) fail(what string, err error) {
	w.stats.Errors.Add(1)
	if !w.broken {
		w.log.Error("spool: "+what+" failed; the rest of this stream is not spooled (the passthrough goes on)", "file", w.Path(), "err", err)
	}
	w.broken = true
}

// stdout writes tapped stdout bytes, escaping a line that starts with RS
// and writing waiting stdin records at each line end.
func (w *Writer) stdout(data []byte) {
	for len(data) > 0 {
		if !w.midLine {
			if data[0] == RS {
				w.write([]byte{RS})
				w.write([]byte(tagStdout + " "))
			}
			w.midLine = true
		}
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			w.write(data)
			return
		}
		w.write(data[:i+1])
		data = data[i+1:]
		w.midLine = false
		w.writePending()
	}
}

// boundary ends a partial stdout line so that a record can follow.
func (w *Writer) boundary() {
	if w.midLine {
		w.write([]byte{'\n'})
		w.midLine = false
	}
}

func (w *Writer) writePending() {
	for _, r := range w.pending {
		w.write(r)
	}
	clear(w.pending)
	w.pending = w.pending[:0]
}

// gap records lost bytes of src. A partial stdout line is ended first (it
// becomes a line the decoder rejects, counted, rather than being glued to
// what follows the gap).
func (w *Writer) gap(src ingest.Source, tap *ingest.Tap) {
	_, dropped, _ := tap.Stats()
	n := dropped - w.reported[src]
	w.reported[src] = dropped
	w.stats.BytesDropped.Add(n)
	rec := []byte(fmt.Sprintf("%c%s %s %d\n", RS, tagGap, src, n))
	if src == ingest.SourceStdin {
		w.inLine, w.inSkip = w.inLine[:0], true
		w.queue(rec)
		return
	}
	w.boundary()
	w.write(rec)
	w.writePending()
}

func (w *Writer) endStdout(tap *ingest.Tap) {
	if _, dropped, _ := tap.Stats(); tap.GapPending() || dropped > w.reported[ingest.SourceStdout] {
		w.gap(ingest.SourceStdout, tap)
	}
}

func (w *Writer) endStdin(tap *ingest.Tap) {
	if _, dropped, _ := tap.Stats(); dropped > w.reported[ingest.SourceStdin] {
		w.gap(ingest.SourceStdin, tap)
	}
	// An unterminated last stdin line was never a request the CLI acted on
	// as a line; drop it.
	w.inLine = w.inLine[:0]
}

// stdin frames stdin lines and keeps the control requests the Tracker uses.
func (w *Writer) stdin(data []byte) {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		part := data
		if i >= 0 {
			part = data[:i]
			data = data[i+1:]
		} else {
			data = nil
		}
		if !w.inSkip {
			if len(w.inLine)+len(part) > maxStdinLine {
				w.inSkip = true
				w.inLine = w.inLine[:0]
			} else {
				w.inLine = append(w.inLine, part...)
			}
		}
		if i < 0 {
			return
		}
		if !w.inSkip {
			w.stdinLine(bytes.TrimRight(w.inLine, "\r"))
		}
		w.inLine, w.inSkip = w.inLine[:0], false
	}
}

func (w *Writer) stdinLine(line []byte) {
	if !bytes.Contains(line, []byte(`"control_request"`)) {
		return // user messages: not needed, not kept
	}
	ev, _ := w.dec.Decode(ingest.SourceStdin, line)
	if ev == nil || ev.Kind != ingest.KindControlRequest || (ev.RequestSubtype != "interrupt" && ev.RequestSubtype != "stop_task") {
		return
	}
	rec := make([]byte, 0, len(line)+len(tagStdin)+3)
	rec = append(rec, RS)
	rec = append(rec, tagStdin+" "...)
	rec = append(rec, line...)
	rec = append(rec, '\n')
	w.queue(rec)
	w.stats.StdinRecords.Add(1)
}

// queue writes a stdin-side record now if stdout is at a line boundary,
// else when the current stdout line ends.
func (w *Writer) queue(rec []byte) {
	if !w.midLine {
		w.write(rec)
		return
	}
	if len(w.pending) >= maxPending {
		w.stats.StdinDropped.Add(1)
		return
	}
	w.pending = append(w.pending, rec)
}

// finish writes what is still pending, syncs and renames the file to its
// complete name: only then may a follower take the stream as ended.
func (w *Writer) finish() error {
	if len(w.pending) > 0 {
		w.boundary()
		w.writePending()
	}
	w.flush()
	var errs []error
	if !w.broken {
		if err := w.f.Sync(); err != nil {
			w.fail("syncing", err)
			errs = append(errs, fmt.Errorf("spool: sync %s: %w", w.Path(), err))
		}
	}
	if err := w.f.Close(); err != nil && !w.broken {
		w.fail("closing", err)
		errs = append(errs, fmt.Errorf("spool: close %s: %w", w.Path(), err))
	}
	// Renamed even after a failure: the follower then finalizes what was
	// written instead of waiting for its idle timeout.
	done := filepath.Join(w.dir, w.name+DoneSuffix)
	if err := os.Rename(w.Path(), done); err != nil {
		w.stats.Errors.Add(1)
		w.log.Error("spool: marking the stream complete failed", "file", w.Path(), "err", err)
		errs = append(errs, fmt.Errorf("spool: rename: %w", err))
	} else {
		w.finishedPath = done
		if d, err := os.Open(w.dir); err == nil {
			_ = d.Sync() // the rename is the completion mark: make it durable
			d.Close()
		}
	}
	if w.broken && len(errs) == 0 {
		errs = append(errs, errors.New("spool: the stream was not spooled completely"))
	}
	return errors.Join(errs...)
}

// FormatGap returns a gap record, for tests and tools writing spool files.
func FormatGap(src ingest.Source, n int64) []byte {
	return []byte(string(rune(RS)) + tagGap + " " + src.String() + " " + strconv.FormatInt(n, 10) + "\n")
}
