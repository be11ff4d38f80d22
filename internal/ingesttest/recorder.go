// Package ingesttest holds test support for the users of package ingest:
// a Sink that records every lifecycle event, and runs restored through
// ingest's text boundary.
package ingesttest

import (
	"slices"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// Recorder is an ingest.Sink that keeps a copy of every event, for tests.
// Runs are deep-copied so that the records stay valid.
type Recorder struct {
	Events []Recorded
}

// Recorded is a copied ingest.Lifecycle.
type Recorded struct {
	Kind      ingest.LifecycleKind
	At        int64
	Run       ingest.Run
	Agent     ingest.Agent
	Violation ingest.Violation
	LatencyMs int64
	Call      ingest.ModelCall // ModelCallSeen
	Turn      ingest.Turn      // TurnEnded
}

// Observe records l.
func (r *Recorder) Observe(l ingest.Lifecycle) {
	rec := Recorded{Kind: l.Kind, At: l.At, Violation: l.Violation, LatencyMs: l.LatencyMs}
	if l.Call != nil {
		rec.Call = *l.Call
	}
	if l.Turn != nil {
		rec.Turn = *l.Turn
		rec.Turn.Delta = slices.Clone(l.Turn.Delta)
	}
	if l.Run != nil {
		rec.Run = l.Run.Clone()
	}
	if l.Agent != nil {
		rec.Agent = *l.Agent
		rec.Agent.Cost.Models = slices.Clone(l.Agent.Cost.Models)
	}
	r.Events = append(r.Events, rec)
}

// Kinds returns the kinds recorded, in order.
func (r *Recorder) Kinds() []ingest.LifecycleKind {
	out := make([]ingest.LifecycleKind, len(r.Events))
	for i, e := range r.Events {
		out[i] = e.Kind
	}
	return out
}
