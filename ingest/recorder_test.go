package ingest

// Recorder copies the events the in-package tests need; the full recorder,
// for every other test, is internal/ingesttest (which imports this
// package, so these tests cannot use it).
type Recorder struct{ Events []recorded }

type recorded struct {
	Kind      LifecycleKind
	Run       Run
	Agent     Agent
	Violation Violation
	LatencyMs int64
}

// Observe records a copy of l.
func (r *Recorder) Observe(l Lifecycle) {
	e := recorded{Kind: l.Kind, Violation: l.Violation, LatencyMs: l.LatencyMs}
	if l.Run != nil {
		e.Run = l.Run.Clone()
	}
	if l.Agent != nil {
		e.Agent = *l.Agent
	}
	r.Events = append(r.Events, e)
}

// Kinds returns the kinds recorded, in order.
func (r *Recorder) Kinds() []LifecycleKind {
	out := make([]LifecycleKind, len(r.Events))
	for i, e := range r.Events {
		out[i] = e.Kind
	}
	return out
}
