package metrics

import (
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// TestStalls: the gauge follows stalls and resumes (never below zero, never
// counted twice), the counter counts each silence.
func TestStalls(t *testing.T) {
	m := newTest(t, Options{})
	r := &ingest.Run{Workflow: true, Name: "review"}
	obs := func(k ingest.LifecycleKind) { m.Observe(ingest.Lifecycle{Kind: k, Run: r}) }
	gauge := func() float64 { return testutil.ToFloat64(m.stalls.stalled.WithLabelValues("review")) }
	count := func() float64 { return testutil.ToFloat64(m.stalls.stalls.WithLabelValues("review")) }
	obs(ingest.RunStarted)
	if gauge() != 0 || count() != 0 {
		t.Fatalf("a new workflow: stalled %v, stalls %v", gauge(), count())
	}
	for i, step := range []struct {
		kind         ingest.LifecycleKind
		gauge, count float64
	}{
		{ingest.RunStalled, 1, 1},
		{ingest.RunStalled, 1, 1}, // a repeat changes nothing
		{ingest.RunResumed, 0, 1},
		{ingest.RunResumed, 0, 1},
		{ingest.RunStalled, 1, 2},
		{ingest.RunResumed, 0, 2},
	} {
		obs(step.kind)
		if gauge() != step.gauge || count() != step.count {
			t.Errorf("step %d (%v): stalled %v, stalls %v; want %v, %v", i, step.kind, gauge(), count(), step.gauge, step.count)
		}
	}
}

// TestAgentStalls: the agent gauge counts the stalled agents of a
// workflow (a repeat counts once, a resume never goes below zero, a run
// finalized with agents still counted leaks nothing), the counter each
// silence; the series are bounded like every workflow series (the cap and
// the allow list fold into "other"), not pre-created, and carry the demo's
// const label.
func TestAgentStalls(t *testing.T) {
	m := newTest(t, Options{MaxWorkflows: 1, WorkflowAllow: regexp.MustCompile(`review|build`), ConstLabels: prometheus.Labels{"demo": "true"}})
	review := &ingest.Run{Workflow: true, Name: "review"}
	a1, a2 := &ingest.Agent{Index: 1}, &ingest.Agent{Index: 2}
	obs := func(r *ingest.Run, k ingest.LifecycleKind, a *ingest.Agent) {
		m.Observe(ingest.Lifecycle{Kind: k, Run: r, Agent: a})
	}
	gauge := func(w string) float64 { return testutil.ToFloat64(m.stalls.agentsStalled.WithLabelValues(w)) }
	count := func(w string) float64 { return testutil.ToFloat64(m.stalls.agentStalls.WithLabelValues(w)) }
	obs(review, ingest.RunStarted, nil)
	if n := testutil.CollectAndCount(m.stalls.agentsStalled) + testutil.CollectAndCount(m.stalls.agentStalls); n != 0 {
		t.Fatalf("%d agent stall series before any stall: not pre-created", n)
	}
	for i, step := range []struct {
		kind         ingest.LifecycleKind
		agent        *ingest.Agent
		gauge, count float64
	}{
		{ingest.AgentStalled, a1, 1, 1},
		{ingest.AgentStalled, a1, 1, 1}, // a repeat changes nothing
		{ingest.AgentStalled, a2, 2, 2},
		{ingest.AgentResumed, a1, 1, 2},
		{ingest.AgentResumed, a1, 1, 2},
		{ingest.AgentStalled, a1, 2, 3},
		{ingest.AgentResumed, a2, 1, 3},
	} {
		obs(review, step.kind, step.agent)
		if g, c := gauge("review"), count("review"); g != step.gauge || c != step.count {
			t.Errorf("step %d (%v agent %d): stalled %v, stalls %v; want %v, %v", i, step.kind, step.agent.Index, g, c, step.gauge, step.count)
		}
	}
	// Finalized with agent 1 still counted (a Tracker never does that):
	// the gauge does not leak.
	obs(review, ingest.RunFinalized, nil)
	if g := gauge("review"); g != 0 {
		t.Errorf("after the run's finalization: stalled %v, want 0", g)
	}
	// Over the cap (build) and outside the allow list (secret): "other".
	for _, name := range []string{"build", "secret"} {
		r := &ingest.Run{Workflow: true, Name: name}
		obs(r, ingest.RunStarted, nil)
		obs(r, ingest.AgentStalled, a1)
	}
	if g, c := gauge("other"), count("other"); g != 2 || c != 2 {
		t.Errorf(`"other": stalled %v, stalls %v; want 2, 2`, g, c)
	}
	err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP cbc_workflow_agent_stalls_total Times a live agent of a workflow run showed no progress for --tracker.stall-after (once per silence).
# TYPE cbc_workflow_agent_stalls_total counter
cbc_workflow_agent_stalls_total{demo="true",workflow="other"} 2
cbc_workflow_agent_stalls_total{demo="true",workflow="review"} 3
`), "cbc_workflow_agent_stalls_total")
	if err != nil {
		t.Error(err)
	}
}
