package spool

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
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
	// holdMax is how much of a stdout line's start is held back until it is
	// known whether the line is a control_response (dropped: it carries the
	// account's token). A line still undecided after this many bytes is
	// kept.
	holdMax = 4 << 10
)

// Heartbeat is how often the writer refreshes the modification time of its
// .open file while the child lives, however quiet the child is, so that a
// sidecar tells a live but idle wrapper (an SDK session between turns) from
// a dead one. A sidecar's --follow.idle-timeout must be well above it.
const Heartbeat = 10 * time.Second

// heartbeatEnv overrides Heartbeat, for tests only (a Go duration).
const heartbeatEnv = "CBC_OTEL_TEST_SPOOL_HEARTBEAT"

func heartbeatEvery() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(heartbeatEnv)); err == nil && d > 0 {
		return d
	}
	return Heartbeat
}

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
	// StdoutSkipped counts the stdout lines deliberately not written
	// (control_response: the answer to initialize carries credentials).
	StdoutSkipped atomic.Int64
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
	hold         []byte   // the start of a stdout line not written yet: is it a control_response?
	dropping     bool     // discarding stdout up to the next newline
	dropKeepNL   bool     // ... and writing that newline (the fragment after a gap)
	pending      [][]byte // stdin records waiting for a stdout line boundary
	at           int64    // Unix ns the chunk being written passed the tap
	heartbeat    time.Duration
	inLine       []byte // the stdin line being assembled
	inSkip       bool   // skipping the rest of a stdin line (too long, or after a gap)
	dec          *streamjson.Decoder
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
		dec: streamjson.NewDecoder(streamjson.DecodeOptions{}), heartbeat: heartbeatEvery()}
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
//
// When both taps hold data, the chunk that passed through the wrapper first
// is written first (ties: stdin first, a request precedes its effects), as
// ingest.Pipeline.Consume does: so an interrupt is written before the
// stopped notification it caused, whichever queue happened to be looked at
// first. While the taps are open the file's modification time is refreshed
// every Heartbeat: the wrapper is alive.
func (w *Writer) Consume(stdout, stdin *tap.Tap) error {
	taps := [2]*tap.Tap{stdout, stdin}
	_ = tap.Merge(context.Background(), stdout, stdin, tap.MergeOptions{
		Chunk: func(src tap.Source, c tap.Chunk) {
			w.at = c.At
			if c.Gap {
				w.gap(src, taps[src], c.GapAtLineEnd)
			}
			if src == tap.SourceStdout {
				w.stdout(c.Data)
			} else {
				w.stdin(c.Data)
			}
			taps[src].Release(c)
		},
		End: func(src tap.Source) {
			if src == tap.SourceStdout {
				w.endStdout(taps[src])
			} else {
				w.endStdin(taps[src])
			}
		},
		Tick:  w.touch,
		Every: w.heartbeat,
		Idle:  w.flush,
	})
	return w.finish()
}

// touch refreshes the .open file's modification time: the heartbeat that
// tells a sidecar the wrapper is alive while the child is quiet.
func (w *Writer) touch() {
	now := time.Now()
	if err := os.Chtimes(w.Path(), now, now); err != nil && !w.broken {
		w.log.Debug("spool: heartbeat failed", "file", w.Path(), "err", err)
	}
}

// Drain consumes both taps without writing anything, counting their bytes
// as dropped: the consumer when the spool file could not be created, so that
// the taps still never fill up and the passthrough goes on.
func Drain(stdout, stdin *tap.Tap, stats *Stats) {
	var outC, inC <-chan *tap.Chunk
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
			stdout.Release(*c)
		case c, ok := <-inC:
			if !ok {
				inC = nil
				continue
			}
			stdin.Release(*c)
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

// stdout writes tapped stdout bytes, escaping a line that starts with RS,
// dropping control_response lines, and writing waiting stdin records at
// each line end. A line's first bytes are held (at most holdMax) until its
// type is known; the rest of a kept line is streamed.
func (w *Writer) stdout(data []byte) {
	for len(data) > 0 {
		if w.dropping {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				return
			}
			data = data[i+1:]
			if w.dropKeepNL {
				w.write([]byte{'\n'})
			}
			w.dropping, w.dropKeepNL = false, false
			w.writePending()
			continue
		}
		if !w.midLine {
			i := bytes.IndexByte(data, '\n')
			seg := data
			if i >= 0 {
				seg = data[:i]
			}
			var prefix []byte
			var n int // bytes of data taken into prefix
			if len(w.hold) == 0 {
				n = min(len(seg), holdMax)
				prefix = seg[:n]
			} else {
				n = min(len(seg), holdMax-len(w.hold))
				w.hold = append(w.hold, seg[:n]...)
				prefix = w.hold
			}
			ended := i >= 0 && n == len(seg) // the whole line is in prefix
			drop, decided := dropLine(prefix, ended)
			if !decided && !ended && len(prefix) < holdMax {
				if len(w.hold) == 0 {
					w.hold = append(w.hold, prefix...)
				}
				return // n == len(data): wait for more of the line
			}
			data = data[n:]
			if drop {
				w.hold = w.hold[:0]
				w.dropping = true
				w.stats.StdoutSkipped.Add(1)
				continue
			}
			if len(prefix) > 0 && prefix[0] == RS {
				w.write([]byte{RS})
				w.write([]byte(tagStdout + " "))
			}
			w.write(prefix)
			w.hold = w.hold[:0]
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

// controlResponse is how both CLIs start the line answering a control
// request (initialize's answer holds the account's token and e-mail).
var controlResponse = []byte(`{"type":"control_response"`)

// dropLine decides from the start of a stdout line whether it is a
// control_response, which the sidecar never needs and which must not be
// stored. decided is false while more bytes could tell; ended says prefix
// is the whole line. An undecidable line is kept.
func dropLine(prefix []byte, ended bool) (drop, decided bool) {
	if len(prefix) >= len(controlResponse) && bytes.HasPrefix(prefix, controlResponse) {
		return true, true
	}
	if len(prefix) < len(controlResponse) && bytes.HasPrefix(controlResponse, prefix) && !ended {
		return false, false
	}
	if bytes.HasPrefix(prefix, []byte(`{"type":"`)) {
		return false, true // another type, first: the usual case
	}
	b := bytes.TrimLeft(prefix, " \t\r")
	if len(b) == 0 {
		return false, ended
	}
	if b[0] != '{' {
		return false, true
	}
	typ, known := topLevelType(prefix)
	if !known {
		return false, ended
	}
	return typ == "control_response", true
}

// topLevelType reads the top-level "type" of a JSON object, or of its
// prefix, skipping other members; known is false when the prefix ends (or
// is not JSON) before it is read.
func topLevelType(prefix []byte) (typ string, known bool) {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return "", false
		}
		if k == "type" {
			v, err := dec.Token()
			if err != nil {
				return "", false
			}
			s, _ := v.(string)
			return s, true
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	if _, err := dec.Token(); err == nil {
		return "", true // closed without a type
	}
	return "", false
}

// boundary ends a partial stdout line so that a record can follow. A held
// line start is decided as it is (the line ends here).
func (w *Writer) boundary() {
	if len(w.hold) > 0 {
		if drop, _ := dropLine(w.hold, true); drop {
			w.stats.StdoutSkipped.Add(1)
		} else {
			if w.hold[0] == RS {
				w.write([]byte{RS})
				w.write([]byte(tagStdout + " "))
			}
			w.write(w.hold)
			w.midLine = true
		}
		w.hold = w.hold[:0]
	}
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

// gap records lost bytes of src; atEOL says the lost bytes ended with a
// newline. A stdout line cut by the gap is ended with RS before its newline
// (a follower discards it: it is not a line). The gap record is always
// followed by one stdout line that a follower discards too: the tail of the
// line whose head was lost is not written, only its newline, so that line
// is empty (and when the lost bytes ended a line, an empty line is written
// right away and the next line is kept whole).
func (w *Writer) gap(src tap.Source, t *tap.Tap, atEOL bool) {
	_, dropped, _ := t.Stats()
	n := dropped - w.reported[src]
	w.reported[src] = dropped
	w.stats.BytesDropped.Add(n)
	rec := []byte(fmt.Sprintf("%c%s %s %d\n", RS, tagGap, src, n))
	if src == tap.SourceStdin {
		w.inLine, w.inSkip = w.inLine[:0], !atEOL
		w.queue(rec)
		return
	}
	w.hold = w.hold[:0] // never written: nothing to cut
	if w.midLine {
		w.write([]byte{RS, '\n'})
		w.midLine = false
	}
	w.write(rec)
	w.dropping, w.dropKeepNL = !atEOL, !atEOL
	if atEOL {
		w.write([]byte{'\n'})
	}
	w.writePending()
}

func (w *Writer) endStdout(t *tap.Tap) {
	if _, dropped, _ := t.Stats(); t.GapPending() || dropped > w.reported[tap.SourceStdout] {
		w.gap(tap.SourceStdout, t, t.GapPendingAtLineEnd())
	}
}

func (w *Writer) endStdin(t *tap.Tap) {
	if _, dropped, _ := t.Stats(); dropped > w.reported[tap.SourceStdin] {
		w.gap(tap.SourceStdin, t, t.GapPendingAtLineEnd())
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
	ev, _ := w.dec.Decode(tap.SourceStdin, line)
	if ev == nil || ev.Kind != streamjson.KindControlRequest || (ev.RequestSubtype != "interrupt" && ev.RequestSubtype != "stop_task") {
		return
	}
	rec := make([]byte, 0, len(line)+len(tagStdin)+24)
	rec = append(rec, RS)
	rec = append(rec, tagStdin+" "...)
	if w.at > 0 {
		rec = strconv.AppendInt(rec, w.at, 10)
		rec = append(rec, ' ')
	}
	rec = append(rec, line...)
	rec = append(rec, '\n')
	w.queue(rec)
	w.stats.StdinRecords.Add(1)
}

// queue writes a stdin-side record now if stdout is at a line boundary,
// else when the current stdout line ends.
func (w *Writer) queue(rec []byte) {
	if !w.midLine && len(w.hold) == 0 && !w.dropping {
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
	if len(w.hold) > 0 && len(w.pending) == 0 {
		// An unterminated last line, kept unterminated unless dropped.
		if drop, _ := dropLine(w.hold, true); drop {
			w.stats.StdoutSkipped.Add(1)
		} else {
			if w.hold[0] == RS {
				w.write([]byte{RS})
				w.write([]byte(tagStdout + " "))
			}
			w.write(w.hold)
		}
		w.hold = w.hold[:0]
	}
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
func FormatGap(src tap.Source, n int64) []byte {
	return []byte(string(rune(RS)) + tagGap + " " + src.String() + " " + strconv.FormatInt(n, 10) + "\n")
}
