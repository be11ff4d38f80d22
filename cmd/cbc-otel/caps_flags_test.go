package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
)

// capFlagNames are the flags of the Tracker's caps.
var capFlagNames = []string{"tracker.max-runs", "tracker.max-tasks", "tracker.max-agents", "tracker.max-phases", "tracker.max-grace-runs"}

// TestCapFlagsEverySubcommand: every subcommand that builds a Tracker takes
// the cap flags and refuses a negative one as a usage error.
func TestCapFlagsEverySubcommand(t *testing.T) {
	subs := map[string]func(context.Context, []string, stdio) int{
		"run":    cmdRun,
		"replay": cmdReplay,
		"demo":   cmdDemo,
		"serve":  cmdServe,
	}
	for sub, cmd := range subs {
		var errb bytes.Buffer
		if code := cmd(context.Background(), []string{"-h"}, stdio{in: strings.NewReader(""), out: io.Discard, err: &errb}); code != exitOK {
			t.Errorf("%s -h: exit %d", sub, code)
		}
		for _, name := range capFlagNames {
			if !strings.Contains(errb.String(), "  -"+name+" int\n") {
				t.Errorf("%s -h does not list -%s", sub, name)
			}
		}
		args := map[string][]string{
			"run":    {"--web.listen-address=", "--tracker.max-agents", "-5", "--", "true"},
			"replay": {"--tracker.max-agents", "-5", "-"},
			"demo":   {"--web.listen-address=", "--tracker.max-agents", "-5"},
			"serve":  {"--web.listen-address=", "--spool.dir", t.TempDir(), "--tracker.max-agents", "-5"},
		}[sub]
		errb.Reset()
		if code := cmd(context.Background(), args, stdio{in: strings.NewReader(""), out: io.Discard, err: &errb}); code != exitUsage {
			t.Errorf("%s %q: exit %d, want %d (stderr %q)", sub, args, code, exitUsage, errb.String())
		}
		if !strings.Contains(errb.String(), "--tracker.max-agents -5: must not be negative") {
			t.Errorf("%s %q: stderr %q does not name the flag", sub, args, errb.String())
		}
	}
}

// TestReplayMaxRuns: --tracker.max-runs reaches the Tracker. Three workflow runs
// that never finish under --tracker.max-runs 2: starting the third gives up the
// oldest (abandoned, finalized first, one over_capacity); the stream's end
// abandons the other two. Without the flag nothing is over capacity.
func TestReplayMaxRuns(t *testing.T) {
	var stream strings.Builder
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(&stream, `{"type":"system","subtype":"task_started","task_id":"t%d","run_id":"r%d","task_type":"local_workflow","workflow_name":"wf%d","session_id":"s1"}`+"\n", i, i, i)
	}
	replay := func(flags ...string) (runs []map[string]any, stats map[string]any) {
		t.Helper()
		var out, errb bytes.Buffer
		args := append(append([]string{"--summary.json"}, flags...), "-")
		if code := cmdReplay(context.Background(), args, stdio{in: strings.NewReader(stream.String()), out: &out, err: &errb}); code != exitOK {
			t.Fatalf("replay %q: exit %d, stderr %q", args, code, errb.String())
		}
		for _, l := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
			var v map[string]any
			if err := json.Unmarshal(l, &v); err != nil {
				t.Fatalf("replay %q: %v: %s", args, err, l)
			}
			if v["kind"] == "stats" {
				stats = v
			} else {
				runs = append(runs, v)
			}
		}
		if stats == nil {
			t.Fatalf("replay %q: no stats line in\n%s", args, out.String())
		}
		return runs, stats
	}
	violations := func(stats map[string]any) map[string]any {
		v, _ := stats["violations"].(map[string]any)
		return v
	}

	runs, stats := replay("--tracker.max-runs", "2")
	if got := violations(stats)["over_capacity"]; got != float64(1) {
		t.Errorf("--tracker.max-runs 2: violations %v, want over_capacity 1", stats["violations"])
	}
	if len(runs) != 3 {
		t.Fatalf("--tracker.max-runs 2: %d runs, want 3: %v", len(runs), runs)
	}
	if runs[0]["workflow"] != "wf1" || runs[0]["status"] != "abandoned" {
		t.Errorf("--tracker.max-runs 2: first run finalized %v %v, want wf1 abandoned (the oldest, given up)", runs[0]["workflow"], runs[0]["status"])
	}
	for _, r := range runs {
		if r["status"] != "abandoned" {
			t.Errorf("run %v: status %v, want abandoned", r["workflow"], r["status"])
		}
	}

	_, stats = replay()
	if got, ok := violations(stats)["over_capacity"]; ok && got != float64(0) {
		t.Errorf("default caps: violations %v, want no over_capacity", stats["violations"])
	}
}
