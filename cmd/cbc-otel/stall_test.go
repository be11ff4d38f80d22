package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplayStalls: in replay the stream's own clock (written_at) decides
// stalls: a run silent for 11 minutes of stream time while another runs
// is stalled once, in --summary.json and in the metrics file; --tracker.stall-after 0 and
// a longer --tracker.stall-after see none.
func TestReplayStalls(t *testing.T) {
	line := func(at, rest string) string {
		return `{"type":"system","written_at":"2026-12-03T10:` + at + `.000Z",` + rest + "}\n"
	}
	stream := line("00:00", `"subtype":"task_started","task_id":"w1","run_id":"r1","task_type":"local_workflow","workflow_name":"slow","session_id":"s"`) +
		line("00:01", `"subtype":"task_started","task_id":"w2","run_id":"r2","task_type":"local_workflow","workflow_name":"busy","session_id":"s"`) +
		line("11:00", `"subtype":"task_progress","task_id":"w2","run_id":"r2","usage":{"total_tokens":1,"tool_uses":0,"duration_ms":1}`) +
		line("12:00", `"subtype":"task_notification","task_id":"w1","run_id":"r1","status":"completed"`) +
		line("12:01", `"subtype":"task_notification","task_id":"w2","run_id":"r2","status":"completed"`)
	for _, tc := range []struct {
		flags        []string
		stalls, prom string
	}{
		{nil, `"stalls":1`, `cbc_workflow_stalls_total{workflow="slow"} 1`},
		{[]string{"--tracker.stall-after", "0"}, "", ""},
		{[]string{"--tracker.stall-after", "15m"}, "", ""},
	} {
		mfile := filepath.Join(t.TempDir(), "m.prom")
		var out, errb bytes.Buffer
		args := append(append([]string{"--summary.json", "--metrics.file", mfile}, tc.flags...), "-")
		if code := cmdReplay(context.Background(), args, stdio{in: strings.NewReader(stream), out: &out, err: &errb}); code != exitOK {
			t.Fatalf("replay %q: exit %d: %s", args, code, errb.String())
		}
		if got := strings.Contains(out.String(), `"stalls"`); got != (tc.stalls != "") || (tc.stalls != "" && !strings.Contains(out.String(), tc.stalls)) {
			t.Errorf("replay %q: --summary.json stalls: %s", args, out.String())
		}
		prom, err := os.ReadFile(mfile)
		if err != nil {
			t.Fatal(err)
		}
		// The stall series exist once a run stalled, the gauge back at 0 at
		// its end; without a stall there are none.
		stalled := strings.Contains(string(prom), `cbc_workflow_stalls_total{workflow="slow"}`)
		if tc.prom == "" && stalled || tc.prom != "" && (!strings.Contains(string(prom), tc.prom) ||
			!strings.Contains(string(prom), `cbc_workflow_runs_stalled{workflow="slow"} 0`)) {
			t.Errorf("replay %q: want %q (and the gauge back at 0), or no stall series:\n%s", args, tc.prom, prom)
		}
	}
}
