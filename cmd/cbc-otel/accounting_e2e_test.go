package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 29.3, through the binary: `run` over a stream with two 20 MB lines
// (one a line of interest) and a tap queue of 64 KiB, so that the telemetry
// falls behind. Per source, the metrics file's framed + incomplete +
// dropped bytes are all the child wrote, and every output says what was
// missed: the --summary.waterfall, the --summary.file stats line and the
// step summary.
func TestE2EEveryByteAccounted(t *testing.T) {
	rec, err := os.ReadFile(exportRecording)
	if err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	in.Write(rec[:len(rec)/2+bytes.IndexByte(rec[len(rec)/2:], '\n')+1])
	in.WriteString(`{"type":"assistant","message":{"content":"` + strings.Repeat("x", 20<<20) + "\"}}\n")
	in.WriteString(`{"type":"system","subtype":"task_progress","task_id":"big","pad":"` + strings.Repeat("y", 20<<20) + "\"}\n")
	in.Write(rec[len(rec)/2+bytes.IndexByte(rec[len(rec)/2:], '\n')+1:])
	dir := t.TempDir()
	metrics, summary, step := filepath.Join(dir, "m.prom"), filepath.Join(dir, "s.ndjson"), filepath.Join(dir, "step.md")
	cmd := exec.Command(wrapperBin, "run", "--web.listen-address=", "--tap.queue-bytes=65536", "--summary.waterfall", "--summary.file", summary,
		"--summary.step-file", step, "--metrics.file", metrics, "--", "cat")
	cmd.Stdin = bytes.NewReader(in.Bytes())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || !bytes.Equal(out.Bytes(), in.Bytes()) {
		t.Fatalf("run: %v, %d of %d bytes out; stderr:\n%s", err, out.Len(), in.Len(), errb.String())
	}
	m := promValues(t, metrics)
	for _, src := range []string{"stdout", "stdin"} {
		framed, incomplete, dropped := m[`cbc_otel_bytes_total{source="`+src+`"}`], m[`cbc_otel_incomplete_bytes_total{source="`+src+`"}`], m[`cbc_otel_tap_dropped_bytes_total{source="`+src+`"}`]
		if framed+incomplete+dropped != float64(in.Len()) {
			t.Errorf("%s: framed %v + incomplete %v + dropped %v bytes, %d passed", src, framed, incomplete, dropped, in.Len())
		}
		t.Logf("%s: framed %v, incomplete %v, dropped %v", src, framed, incomplete, dropped)
	}
	lost := m[`cbc_otel_tap_dropped_bytes_total{source="stdout"}`]+m[`cbc_otel_incomplete_bytes_total{source="stdout"}`] > 0
	if !lost {
		t.Log("the telemetry kept up with 40 MB this time: nothing to say about losses")
	}
	sf, err := os.ReadFile(summary)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile(step)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		text string
		want string
	}{
		"--summary.waterfall": {errb.String(), "telemetry incomplete: "},
		"--summary.file":      {string(sf), `"dropped_bytes":`},
		"step summary":        {string(st), "> **Warning:** telemetry incomplete: "},
	} {
		if strings.Contains(c.text, c.want) != lost {
			t.Errorf("%s says %q: %v, want %v:\n%s", name, c.want, !lost, lost, c.text)
		}
	}
}
