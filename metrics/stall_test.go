package metrics

import (
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
