package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/internal/realtool"
)

// TestPrometheusScrapesWrapper runs `cbc-otel run` around the simulator,
// drives six workflows through its stdin (3 completed, 2 failed, 1 stopped
// by an interrupt), lets a real Prometheus scrape the wrapper every second,
// and checks through the query API that the scraped totals equal the
// simulator's own ground truth (--expect): runs by status, agents by state,
// tokens and tool uses, and that a histogram_quantile over the duration
// histogram is a number.
func TestPrometheusScrapesWrapper(t *testing.T) {
	promBin := requirePrometheus(t)
	bin := promBuildCLI(t)
	dir := t.TempDir()
	expectPath := dir + "/expect.ndjson"
	target := fmt.Sprintf("127.0.0.1:%d", realtool.FreePorts(t, 1)[0])

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	w := startScrapedWrapper(t, ctx, bin, target, "--dialect", "cbc", "--speed", "0.2", "--noise", "512", "--expect", expectPath)
	stdin, out, stderr, exited := w.stdin, w.out, w.stderr, w.exited
	prom := startPrometheus(t, promBin, target)
	w.waitScraped(t, prom)

	// Drive the simulator the way an SDK would, one turn at a time.
	send := func(v any) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stdin.Write(append(b, '\n')); err != nil {
			t.Fatalf("writing to the wrapper's stdin: %v", err)
		}
	}
	type obj = map[string]any
	send(obj{"type": "control_request", "request_id": "init", "request": obj{"subtype": "initialize"}})
	scenarios := []string{"completed", "failed", "stopped", "completed", "failed", "completed"}
	session := ""
	for i, sc := range scenarios {
		send(obj{"type": "user", "message": obj{"role": "user", "content": fmt.Sprintf("[[SCENARIO:%s]] e2e turn %d", sc, i+1)}})
		deadline := time.Now().Add(time.Minute)
		workflow, interrupted := "", false
		for done := false; !done; {
			var m struct {
				Type      string `json:"type"`
				Subtype   string `json:"subtype"`
				SessionID string `json:"session_id"`
				TaskID    string `json:"task_id"`
				TaskType  string `json:"task_type"`
			}
			if json.Unmarshal(out.next(t, deadline, stderr), &m) != nil {
				continue
			}
			switch {
			case m.Type == "result":
				done = true
			case m.Type == "system" && m.Subtype == "init":
				session = m.SessionID
			case m.Type == "system" && m.Subtype == "task_started" && m.TaskType == "local_workflow":
				workflow = m.TaskID
			case m.Type == "system" && m.Subtype == "task_progress" && sc == "stopped" && !interrupted && m.TaskID == workflow:
				interrupted = true
				send(obj{"type": "control_request", "request_id": fmt.Sprintf("stop-%d", i), "request": obj{"subtype": "interrupt", "session_id": session}})
			}
		}
		if sc == "stopped" && !interrupted {
			t.Fatalf("turn %d: no task_progress to interrupt", i+1)
		}
	}
	out.drain()

	want := promReadExpect(t, expectPath, len(scenarios))
	t.Logf("ground truth: runs %v, agents %v, tokens %v, tool uses %v", want.runs, want.agents, want.tokens, want.toolUses)
	if want.runs["completed"] != 3 || want.runs["failed"] != 2 || want.runs["stopped"] != 1 {
		t.Fatalf("simulator ground truth has runs %v, want 3 completed, 2 failed, 1 stopped", want.runs)
	}

	// The wrapper is still running (stdin open), so Prometheus keeps
	// scraping; late agent flips and grace windows settle on the live clock.
	promPoll(t, 60*time.Second, "scraped totals equal the ground truth", func() (bool, string) {
		var diffs []string
		check := func(what string, got, exp map[string]float64) {
			for _, k := range promKeys(got, exp) {
				if got[k] != exp[k] {
					diffs = append(diffs, fmt.Sprintf("%s[%s] = %v, want %v", what, k, got[k], exp[k]))
				}
			}
		}
		runs, err := prom.byLabel(`sum by (status) (cbc_workflow_runs_total)`, "status")
		if err != nil {
			return false, err.Error()
		}
		check("runs", promNonZero(runs), want.runs)
		agents, err := prom.byLabel(`sum by (state) (cbc_workflow_agents_total)`, "state")
		if err != nil {
			return false, err.Error()
		}
		check("agents", promNonZero(agents), want.agents)
		for q, exp := range map[string]float64{
			`sum(cbc_workflow_tokens_total)`:           want.tokens,
			`sum(cbc_workflow_tool_uses_total)`:        want.toolUses,
			`sum(cbc_workflow_runs_started_total)`:     float64(len(scenarios)),
			`sum(cbc_workflow_runs_active)`:            0,
			`sum(cbc_workflow_duration_seconds_count)`: float64(len(scenarios)), // live runs always have both ends
		} {
			got, err := prom.scalar(q)
			if err != nil {
				return false, err.Error()
			}
			if got != exp {
				diffs = append(diffs, fmt.Sprintf("%s = %v, want %v", q, got, exp))
			}
		}
		return len(diffs) == 0, strings.Join(diffs, "; ")
	})

	q, err := prom.scalar(`histogram_quantile(0.9, sum by (le) (cbc_workflow_duration_seconds_bucket))`)
	if err != nil || math.IsNaN(q) || math.IsInf(q, 0) || q <= 0 {
		t.Errorf("histogram_quantile over cbc_workflow_duration_seconds_bucket = %v (%v), want a positive number", q, err)
	}
	for _, c := range []struct {
		q   string
		min float64
	}{
		{`sum(cbc_interrupts_total)`, 1},
		{`sum(cbc_otel_lines_total{source="stdout"})`, 1},
		{`sum(cbc_otel_lines_total{source="stdin"})`, float64(len(scenarios) + 2)},
		{`cbc_otel_build_info`, 1},
	} {
		if v, err := prom.scalar(c.q); err != nil || v < c.min {
			t.Errorf("%s = %v (%v), want at least %v", c.q, v, err, c.min)
		}
	}
	if v, err := prom.scalar(`sum(cbc_otel_lines_rejected_total)`); err != nil || v != 0 {
		t.Errorf("rejected lines = %v (%v), want 0", v, err)
	}
	if v, err := prom.scalar(`sum(cbc_protocol_violations_total)`); err != nil || v != 0 {
		t.Errorf("protocol violations = %v (%v), want 0", v, err)
	}

	// Closing stdin ends the session: the simulator exits 0 and so must the
	// wrapper.
	stdin.Close()
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Errorf("cbc-otel run exited with %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("cbc-otel run did not exit after stdin closed")
	}
}

// promTruth is the simulator's ground truth summed over a session.
type promTruth struct {
	runs, agents     map[string]float64
	tokens, toolUses float64
}

// promReadExpect reads the --expect file once it holds n workflow runs (it is
// written per turn, before the turn's result line).
func promReadExpect(t *testing.T, path string, n int) promTruth {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("expect file: %v", err)
	}
	defer f.Close()
	tr := promTruth{runs: map[string]float64{}, agents: map[string]float64{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	workflows := 0
	for sc.Scan() {
		var r struct {
			Kind     string `json:"kind"`
			Status   string `json:"status"`
			Tokens   int64  `json:"tokens"`
			ToolUses int64  `json:"tool_uses"`
			Agents   []struct {
				State string `json:"state"`
			} `json:"agents"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("expect line: %v", err)
		}
		if r.Kind != "workflow" {
			continue
		}
		workflows++
		tr.runs[r.Status]++
		tr.tokens += float64(r.Tokens)
		tr.toolUses += float64(r.ToolUses)
		for _, a := range r.Agents {
			tr.agents[a.State]++
		}
	}
	if err := sc.Err(); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if workflows != n {
		t.Fatalf("expect file holds %d workflow runs, want %d", workflows, n)
	}
	return tr
}

func promNonZero(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

func promKeys(ms ...map[string]float64) []string {
	set := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			set[k] = true
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
