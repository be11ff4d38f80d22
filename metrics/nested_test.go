package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/tap"
)

// TestNestedRunsCountedOnce: the simulator's nested scenario (both
// dialects): a top-level run with a workflow() child inside it, a fork's
// workflow, sub-agents three deep, a sub-agent's shell and its resume, and
// a remote task. Every workflow run is counted once under its own label,
// with its own agents (the inline child's among its parent's) and its own
// tokens, so the sums over workflows equal the sums over runs; every task
// run (a resume is a run of its own) once under its type.
func TestNestedRunsCountedOnce(t *testing.T) {
	own := map[string]struct{ agents, tokens float64 }{
		"sim-nested": {2, 1480}, "sim-nested-forked": {2, 790},
	}
	// Sub-agents: the chain's 3, the shell's owner and the fork, and with
	// Claude Code the owner's resumed run.
	agentTasks := map[string]struct {
		typ string
		n   float64
	}{"../testdata/simulate/nested-claude.ndjson": {"local_agent", 6}, "../testdata/simulate/nested-cbc.ndjson": {"Agent", 5}}
	for _, file := range []string{"../testdata/simulate/nested-claude.ndjson", "../testdata/simulate/nested-cbc.ndjson"} {
		t.Run(file, func(t *testing.T) {
			m := newTest(t, Options{})
			p := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{m}, Grace: ingest.DefaultGrace}})
			for _, l := range lines(t, file) {
				p.Write(tap.SourceStdout, l)
			}
			p.Close()
			var sumTokens float64
			for wf, w := range own {
				if got := testutil.ToFloat64(m.runsTotal.WithLabelValues(wf, "completed")); got != 1 {
					t.Errorf("%s: %v completed runs, want 1", wf, got)
				}
				if got := testutil.ToFloat64(m.agentsTotal.WithLabelValues(wf, "done")); got != w.agents {
					t.Errorf("%s: %v agents done, want its own %v", wf, got, w.agents)
				}
				got := testutil.ToFloat64(m.tokens.WithLabelValues(wf))
				if got != w.tokens {
					t.Errorf("%s: %v tokens, want its own %v", wf, got, w.tokens)
				}
				sumTokens += got
			}
			if sumTokens != 1480+790 {
				t.Errorf("tokens summed over workflows %v, want each run once (2270)", sumTokens)
			}
			if at := agentTasks[file]; testutil.ToFloat64(m.tasks.WithLabelValues(at.typ, "completed")) != at.n {
				t.Errorf("%s tasks completed %v, want %v", at.typ, testutil.ToFloat64(m.tasks.WithLabelValues(at.typ, "completed")), at.n)
			}
			for wf := range own {
				var runs float64
				for _, st := range ingest.TerminalStatuses() {
					runs += testutil.ToFloat64(m.runsTotal.WithLabelValues(wf, st.String()))
				}
				if runs != 1 {
					t.Errorf("%s: %v runs in all, want 1", wf, runs)
				}
			}
			if got := testutil.ToFloat64(m.tasks.WithLabelValues("remote_agent", "completed")); got != 1 {
				t.Errorf("remote_agent tasks completed %v, want 1", got)
			}
			if v := testutil.ToFloat64(m.violations[ingest.ViolationUnknownStatus]); v != 0 {
				t.Errorf("unknown_status violations %v: remote_launched is a known status", v)
			}
		})
	}
}
