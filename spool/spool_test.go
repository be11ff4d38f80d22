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

	"github.com/cbc-otel/cbc-otel/ingest"
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
	out, in := ingest.NewTap(1<<20), ingest.NewTap(1<<20)
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
			case r.Kind == RecordLine && r.Source == ingest.SourceStdout:
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
	tap := ingest.NewTap(512)
	tap.Write(bytes.Repeat([]byte("a"), 600)) // more than the queue: the tail is dropped
	_, lost, _ := tap.Stats()
	w.stdout([]byte(`{"partial`))
	w.gap(ingest.SourceStdout, tap)
	w.stdout([]byte("{\"x\":1}\n"))
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
	if len(gaps) != 1 || gaps[0].Dropped != lost || lost == 0 || gaps[0].Source != ingest.SourceStdout {
		t.Fatalf("gap records %+v in %q", gaps, b)
	}
	if !bytes.Contains(b, []byte("{\"partial\n"+string(FormatGap(ingest.SourceStdout, lost))+"{\"x\":1}\n")) {
		t.Fatalf("partial line not ended before the gap: %q", b)
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
	out, in := ingest.NewTap(1<<16), ingest.NewTap(1<<16)
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
		dec: ingest.NewDecoder(ingest.DecodeOptions{})}
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
