package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplayAgentStalls: in replay the stream's clock decides an agent's
// stall too: agent 1's lastProgressAt stays for 12 minutes of stream time
// while agent 2's advances every minute (so the run never falls silent);
// agent 1 is stalled once, in --summary.json and in the metrics file, the gauge
// back at 0 once it moves; --tracker.stall-after 0 and 15m see none.
func TestReplayAgentStalls(t *testing.T) {
	const t0 = 1796292000000 // 2026-12-03T10:00:00Z: startedAt, the first written_at
	stamp := func(m int) string {
		return fmt.Sprintf(`"written_at":"2026-12-03T10:%02d:00.000Z"`, m)
	}
	row := func(i, lp int, state string) string {
		return fmt.Sprintf(`{"type":"workflow_agent","index":%d,"agentId":"a%d","state":"%s","startedAt":%d,"lastProgressAt":%d}`, i, i, state, t0, t0+int64(lp)*60_000)
	}
	var b strings.Builder
	b.WriteString(`{"type":"system",` + stamp(0) + `,"subtype":"task_started","task_id":"w1","run_id":"r1","task_type":"local_workflow","workflow_name":"wf","session_id":"s"}` + "\n")
	for m := 0; m <= 13; m++ {
		one := 0
		if m == 13 {
			one = 13 // agent 1 moves at last
		}
		fmt.Fprintf(&b, `{"type":"system",%s,"subtype":"task_progress","task_id":"w1","run_id":"r1","workflow_progress":[%s,%s]}`+"\n",
			stamp(m), row(1, one, "start"), row(2, m, "progress"))
	}
	fmt.Fprintf(&b, `{"type":"system",%s,"subtype":"task_notification","task_id":"w1","run_id":"r1","status":"completed","workflow_progress":[%s,%s]}`+"\n",
		stamp(14), row(1, 14, "done"), row(2, 14, "done"))
	for _, tc := range []struct {
		flags   []string
		stalled bool
	}{
		{nil, true},
		{[]string{"--tracker.stall-after", "0"}, false},
		{[]string{"--tracker.stall-after", "15m"}, false},
	} {
		mfile := filepath.Join(t.TempDir(), "m.prom")
		var out, errb bytes.Buffer
		args := append(append([]string{"--summary.json", "--metrics.file", mfile}, tc.flags...), "-")
		if code := cmdReplay(context.Background(), args, stdio{in: strings.NewReader(b.String()), out: &out, err: &errb}); code != exitOK {
			t.Fatalf("replay %q: exit %d: %s", args, code, errb.String())
		}
		js := out.String()
		if n := strings.Count(js, `"stalls":`); tc.stalled != (n == 1 && strings.Contains(js, `"error":"","stalls":1`)) || !tc.stalled && n != 0 {
			t.Errorf("replay %q: want agent 1's \"stalls\":1 alone (the run never stalls): %v\n%s", args, tc.stalled, js)
		}
		prom, err := os.ReadFile(mfile)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Contains(string(prom), `cbc_workflow_agent_stalls_total{workflow="wf"} 1`) &&
			strings.Contains(string(prom), `cbc_workflow_agents_stalled{workflow="wf"} 0`)
		if got != tc.stalled || !tc.stalled && (strings.Contains(string(prom), "cbc_workflow_agent_stalls") || strings.Contains(string(prom), "cbc_workflow_agents_stalled")) ||
			strings.Contains(string(prom), "cbc_workflow_stalls_total") {
			t.Errorf("replay %q: agent stall series %v, want %v (and no run stall):\n%s", args, got, tc.stalled, prom)
		}
	}
}
