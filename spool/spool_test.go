package spool

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// spoolOf writes stdout and stdin writes through taps (each slice element
// one Write, alternating stdout[i] then stdin[i]) and returns the file.
func spoolOf(t *testing.T, stdout, stdin []string) (string, *Stats) {
	t.Helper()
	dir := t.TempDir()
	w, err := Create(dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(w.Path(), OpenSuffix) {
		t.Fatalf("path %s", w.Path())
	}
	out, in := tap.NewTap(1<<20), tap.NewTap(1<<20)
	for i := 0; i < max(len(stdout), len(stdin)); i++ {
		if i < len(stdout) {
			out.Write([]byte(stdout[i]))
		}
		if i < len(stdin) {
			in.Write([]byte(stdin[i]))
		}
	}
	out.Close()
	in.Close()
	// Consume picks between the taps at random: tests that care about
	// the interleaving drive the writer's methods directly.
	if err := w.Consume(out, in); err != nil {
		t.Fatal(err)
	}
	if KindOf(w.Path()) != Done {
		t.Fatalf("not renamed: %s", w.Path())
	}
	b, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	return string(b), w.Stats()
}

func records(t *testing.T, data string) (stdout, stdin []string) {
	t.Helper()
	br := bufio.NewReader(strings.NewReader(data))
	first := true
	for {
		l, err := br.ReadBytes('\n')
		if len(l) > 0 {
			r := Parse(l)
			switch {
			case first && (r.Kind != RecordHeader || r.Version != Version):
				t.Fatalf("first line is not the header: %q", l)
			case r.Kind == RecordLine && r.Source == tap.SourceStdout:
				stdout = append(stdout, string(r.Line))
			case r.Kind == RecordLine:
				stdin = append(stdin, string(r.Line))
			}
			first = false
		}
		if err != nil {
			return
		}
	}
}

func TestWriterStdoutVerbatimAndEscaped(t *testing.T) {
	data, st := spoolOf(t, []string{"{\"a\":1}\n{\"b\"", ":2}\n\x1enot json\n", "last without newline"}, nil)
	out, in := records(t, data)
	want := []string{"{\"a\":1}\n", "{\"b\":2}\n", "\x1enot json\n", "last without newline"}
	if strings.Join(out, "|") != strings.Join(want, "|") || len(in) != 0 {
		t.Fatalf("stdout records %q, stdin %q", out, in)
	}
	if st.BytesWritten.Load() != int64(len(data)) || st.Errors.Load() != 0 {
		t.Fatalf("stats written %d of %d, errors %d", st.BytesWritten.Load(), len(data), st.Errors.Load())
	}
}

func TestWriterKeepsOnlyInterruptsOnStdin(t *testing.T) {
	in := []string{
		`{"type":"user","message":{"role":"user","content":"secret prompt"}}` + "\n",
		`{"type":"control_request","request_id":"i","request":{"subtype":"initialize","token":"x"}}` + "\n",
		`{"type":"control_request","request_id":"s","request":{"subtype":"interrupt"}}` + "\r\n",
		`{"type":"control_request","request_id":"t","request":{"subtype":"stop_task","task_id":"w1"}}` + "\n",
		strings.Repeat("x", maxStdinLine+10) + `"control_request"` + "\n",
	}
	data, st := spoolOf(t, nil, in)
	if strings.Contains(data, "secret") || strings.Contains(data, "initialize") {
		t.Fatalf("stdin traffic leaked into the spool:\n%q", data)
	}
	_, got := records(t, data)
	if len(got) != 2 || !strings.Contains(got[0], "interrupt") || !strings.Contains(got[1], "stop_task") {
		t.Fatalf("stdin records %q", got)
	}
	if st.StdinRecords.Load() != 2 {
		t.Fatalf("StdinRecords %d", st.StdinRecords.Load())
	}
}

// A control request arriving while a stdout line is half written waits for
// the line's end.
func TestWriterStdinWaitsForLineEnd(t *testing.T) {
	w, err := Create(t.TempDir(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.stdout([]byte(`{"half":`))
	w.stdin([]byte(`{"type":"control_request","request_id":"s","request":{"subtype":"interrupt"}}` + "\n"))
	w.stdout([]byte("1}\n"))
	if err := w.finish(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(w.Path())
	out, in := records(t, string(b))
	if len(out) != 1 || out[0] != "{\"half\":1}\n" || len(in) != 1 {
		t.Fatalf("stdout %q stdin %q", out, in)
	}
}

func TestWriterGapRecord(t *testing.T) {
	w, err := Create(t.TempDir(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tp := tap.NewTap(512)
	tp.Write(bytes.Repeat([]byte("a"), 600)) // more than the queue: the tail is dropped
	_, lost, _ := tp.Stats()
	w.stdout([]byte(`{"type":"assistant","partial`))
	w.gap(tap.SourceStdout, tp, false)
	w.stdout([]byte("tail of a lost line\n{\"x\":1}\n"))
	// A line start still held (type unknown yet) when the gap comes is
	// never written at all; lost bytes that ended a line leave the next
	// line whole.
	w.stdout([]byte(`{"held`))
	w.gap(tap.SourceStdout, tp, true)
	w.stdout([]byte("{\"y\":2}\n"))
	if err := w.finish(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(w.Path())
	var gaps []Record
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		if r := Parse(l); r.Kind == RecordGap {
			gaps = append(gaps, r)
		}
	}
	if len(gaps) != 2 || gaps[0].Dropped != lost || lost == 0 || gaps[0].Source != tap.SourceStdout {
		t.Fatalf("gap records %+v in %q", gaps, b)
	}
	// The cut line ends with RS, the tail after the gap is not written (its
	// newline is), the next line is intact.
	want := "\x1ecbcspool 1\n{\"type\":\"assistant\",\"partial\x1e\n" + string(FormatGap(tap.SourceStdout, lost)) + "\n{\"x\":1}\n" +
		string(FormatGap(tap.SourceStdout, 0)) + "\n{\"y\":2}\n"
	if string(b) != want {
		t.Fatalf("spool file\n%q, want\n%q", b, want)
	}
}

// The answer to initialize (account token, e-mail) never reaches the disk,
// whatever its key order and however the bytes are chunked; every other
// line is written verbatim, and a line whose type is unknown after holdMax
// bytes is kept.
func TestWriterDropsControlResponse(t *testing.T) {
	const canary = "CANARY-eyJhbGciOi-token"
	long := `{"message":{"content":"` + strings.Repeat("z", holdMax+100) + `"},"type":"assistant"}` + "\n"
	lines := []string{
		`{"type":"system","subtype":"init","session_id":"s"}` + "\n",
		`{"type":"control_response","response":{"subtype":"success","request_id":"i","response":{"account":{"token":"` + canary + `","email":"` + canary + `@x"}}}}` + "\n",
		`{"type":"control_request","request_id":"p","request":{"subtype":"can_use_tool"}}` + "\n",
		`{"response":{"account":{"token":"` + canary + `"}},"type":"control_response"}` + "\n",
		" { \"type\" : \"control_response\", \"token\":\"" + canary + "\"}\r\n",
		"\x1enot json\n",
		"\n",
		long,
		`{"type":"assistant","message":"control_response"}` + "\n",
		`{"type":"control_response","response":{"token":"` + canary + `"}}`, // unterminated last line
	}
	kept := []string{lines[0], lines[2], lines[5], lines[6], lines[7], lines[8]}
	all := strings.Join(lines, "")
	for _, size := range []int{1, 2, 5, 17, 26, 27, 100, 4096, len(all)} {
		// Driven directly: thousands of tiny chunks would overflow a tap.
		w, err := Create(t.TempDir(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(all); i += size {
			w.stdout([]byte(all[i:min(i+size, len(all))]))
		}
		if err := w.finish(); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(w.Path())
		data, st := string(b), w.Stats()
		if strings.Contains(data, canary) {
			t.Fatalf("chunks of %d: the token reached the spool file:\n%q", size, data)
		}
		out, _ := records(t, data)
		if strings.Join(out, "") != strings.Join(kept, "") {
			t.Fatalf("chunks of %d: stdout lines\n%q\nwant\n%q", size, out, kept)
		}
		if st.StdoutSkipped.Load() != 4 {
			t.Fatalf("chunks of %d: StdoutSkipped %d, want 4", size, st.StdoutSkipped.Load())
		}
	}
}

// An interrupt that passed the wrapper before the stopped notification it
// caused is written first, even when both taps are full when the writer
// looks: the merge follows passage order, not the select's luck. The record
// carries its passage time.
func TestWriterMergesInPassageOrder(t *testing.T) {
	interrupt := `{"type":"control_request","request_id":"s","request":{"subtype":"interrupt"}}` + "\n"
	note := `{"type":"system","subtype":"task_notification","task_id":"w","status":"stopped"}` + "\n"
	for range 50 {
		w, err := Create(t.TempDir(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, in := tap.NewTap(1<<20), tap.NewTap(1<<20)
		before := time.Now().UnixNano()
		out.Write([]byte(`{"type":"assistant"}` + "\n"))
		for range 20 { // stdin backlog: a select would likely take the notification first
			in.Write([]byte(`{"type":"user","message":{"role":"user","content":"hi"}}` + "\n"))
		}
		in.Write([]byte(interrupt))
		out.Write([]byte(note))
		out.Close()
		in.Close()
		if err := w.Consume(out, in); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(w.Path())
		iRec := bytes.Index(b, []byte("\x1estdin "))
		iNote := bytes.Index(b, []byte("task_notification"))
		if iRec < 0 || iNote < 0 || iRec > iNote {
			t.Fatalf("the interrupt is not before the notification it caused:\n%q", b)
		}
		line, _, _ := bytes.Cut(b[iRec:], []byte("\n"))
		r := Parse(line)
		if r.Kind != RecordLine || r.Source != tap.SourceStdin || string(r.Line)+"\n" != interrupt || r.At < before-int64(time.Second) {
			t.Fatalf("stdin record %q parsed as %+v", line, r)
		}
	}
	// The older form without a time stamp still parses.
	if r := Parse([]byte("\x1estdin " + interrupt)); r.At != 0 || string(r.Line) != interrupt {
		t.Fatalf("old stdin record parsed as %+v", r)
	}
}

// While the taps are open the writer touches its .open file, so that a
// quiet child does not look like a dead wrapper.
func TestWriterHeartbeat(t *testing.T) {
	w, err := Create(t.TempDir(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.heartbeat = 20 * time.Millisecond
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(w.Path(), old, old); err != nil {
		t.Fatal(err)
	}
	out, in := tap.NewTap(1<<16), tap.NewTap(1<<16)
	done := make(chan error)
	go func() { done <- w.Consume(out, in) }()
	path := w.Path()
	deadline := time.Now().Add(5 * time.Second)
	for {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.ModTime().After(old.Add(30 * time.Minute)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mtime not refreshed: %v", fi.ModTime())
		}
		time.Sleep(10 * time.Millisecond)
	}
	out.Close()
	in.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestCreateMissingDirAndDrain(t *testing.T) {
	st := new(Stats)
	if _, err := Create(filepath.Join(t.TempDir(), "missing"), nil, st); err == nil {
		t.Fatal("Create in a missing directory succeeded")
	}
	if st.Errors.Load() != 1 {
		t.Fatalf("errors %d", st.Errors.Load())
	}
	out, in := tap.NewTap(1<<16), tap.NewTap(1<<16)
	out.Write([]byte("hello\n"))
	in.Write([]byte("x\n"))
	out.Close()
	in.Close()
	Drain(out, in, st)
	if st.BytesDropped.Load() != 6 {
		t.Fatalf("dropped %d", st.BytesDropped.Load())
	}
}

// A full disk: the writer counts, logs once, keeps draining and still marks
// the stream complete.
func TestWriterDiskFull(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("/dev/full:", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"+OpenSuffix), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	st := new(Stats)
	w := &Writer{dir: dir, name: "x", f: full, bw: bufio.NewWriterSize(full, 16), log: nil, stats: st,
		dec: streamjson.NewDecoder(streamjson.DecodeOptions{})}
	w.log = discard()
	w.stdout(bytes.Repeat([]byte("y\n"), 100))
	w.flush()
	if err := w.finish(); err == nil {
		t.Fatal("finish after a full disk reported no error")
	}
	if st.Errors.Load() == 0 || st.BytesDropped.Load() == 0 {
		t.Fatalf("errors %d dropped %d", st.Errors.Load(), st.BytesDropped.Load())
	}
	if _, err := os.Stat(filepath.Join(dir, "x"+DoneSuffix)); err != nil {
		t.Fatalf("not marked complete: %v", err)
	}
}

func TestKindAndStem(t *testing.T) {
	for name, want := range map[string]Kind{"a.cbcspool.open": Open, "a.cbcspool": Done, "a.ndjson": Plain} {
		if KindOf(name) != want {
			t.Errorf("KindOf(%q) = %v", name, KindOf(name))
		}
	}
	if Stem("1-2-ab.cbcspool.open") != Stem("1-2-ab.cbcspool") {
		t.Error("Stem differs between open and done")
	}
	if r := Parse([]byte("\x1efuture stuff\n")); r.Kind != RecordUnknown {
		t.Errorf("unknown tag parsed as %v", r.Kind)
	}
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A stdin gap whose lost bytes ended a line leaves the next request whole;
// otherwise the rest of the cut line is skipped.
func TestWriterStdinGapAtLineEnd(t *testing.T) {
	interrupt := `{"type":"control_request","request_id":"s","request":{"subtype":"interrupt"}}` + "\n"
	for _, atEOL := range []bool{true, false} {
		w, err := Create(t.TempDir(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		w.gap(tap.SourceStdin, tap.NewTap(512), atEOL)
		w.stdin([]byte(interrupt))
		if err := w.finish(); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(w.Path())
		if _, in := records(t, string(b)); (len(in) == 1) != atEOL {
			t.Fatalf("atEOL %v: stdin records %q", atEOL, in)
		}
	}
}
