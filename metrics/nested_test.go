package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/tap"
)

// TestNestedRunsCountedOnce: three nested workflow runs and a remote task
// (the simulator's nested scenario, both dialects): every run is counted
// once under its own workflow label, with its own agents and its own
// tokens, so the sums over workflows equal the sums over runs; the remote
// task is a plain task of its type.
func TestNestedRunsCountedOnce(t *testing.T) {
	own := map[string]struct{ agents, tokens float64 }{
		"sim-nested": {2, 1480}, "sim-nested-child": {2, 1180}, "sim-nested-grandchild": {2, 790},
	}
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
			if sumTokens != 1480+1180+790 {
				t.Errorf("tokens summed over workflows %v, want each run once (3450)", sumTokens)
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
