// Package runcost judges a workflow run's cost against its own workflow's
// earlier runs: per workflow, the p95 (and median) of the known costs of
// the last Window finalized runs this process saw. The runs page and the
// reports (waterfall, step summary) each keep one, fed the same runs in
// the same order, so they show the same figures; neither knows the other.
//
// It is cbc_workflow_run_cost_usd's p95 in small and in process: the same
// runs count (a workflow run with at least one model call joined and a
// positive, finite cost: Cost), without a Prometheus to ask, so that a
// run's line can say "$0.41 (p95 $0.12: over)" where people look.
//
// Bounded: at most MaxWorkflows workflows (the least recently finalized
// is forgotten first) of at most Window costs each, 8 bytes a cost:
// 200 × 100 × 8 B = 160 KiB at most with the defaults.
package runcost

import (
	"math"
	"slices"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
)

const (
	// Window is how many of a workflow's most recent known costs its
	// baseline holds: enough that the p95 is the 95th of 100 costs
	// (not the maximum of a handful), few enough that a workflow whose
	// prompt or model changed has a new baseline after a hundred runs.
	Window = 100
	// MaxWorkflows bounds the workflows with a baseline; it is the
	// metrics' default cap of distinct workflow labels
	// (metrics.DefaultMaxWorkflows), so that every workflow /metrics
	// names has one.
	MaxWorkflows = 200
	// MinRuns is how many known costs a workflow needs before its p95 is
	// known: with fewer the "p95" is the dearest of three or four runs,
	// and half the runs of a new workflow would be marked over it. Five
	// runs come within a day for a workflow run in CI, and within a
	// minute in `demo --live`.
	MinRuns = 5
)

// Baseline holds the workflows' recent costs. Its zero value is ready to
// use. It is not safe for concurrent use: its owner serializes (the runs
// page holds its lock).
type Baseline struct {
	wf   map[string]*ring
	tick uint64 // finalizations seen: the workflows' recency
}

// ring is one workflow's last Window costs.
type ring struct {
	costs []float64 // len ≤ Window; costs[next] is the oldest once full
	next  int
	used  uint64 // Baseline.tick when last added to
}

// Known is a workflow's baseline: the p95 and the median of the costs of
// its last Runs runs.
type Known struct {
	P95, Median float64
	Runs        int
}

// Verdict is a run's cost beside its workflow's baseline before the run.
type Verdict struct {
	// CostUSD is the run's cost when CostKnown (Cost).
	CostUSD   float64
	CostKnown bool
	// Base is the workflow's baseline of its earlier runs when BaseKnown
	// (at least MinRuns of them).
	Base      Known
	BaseKnown bool
}

// Over reports whether the run cost more than its workflow's p95.
func (v Verdict) Over() bool { return v.CostKnown && v.BaseKnown && v.CostUSD > v.Base.P95 }

// Cost is a run's cost and whether it is known, as
// cbc_workflow_run_cost_usd observes it: at least one model call joined
// and a positive, finite sum. A run whose calls all reported $0 (a CLI that
// prices nothing) is unknown, not free.
func Cost(c *cost.Sum) (float64, bool) {
	v := c.CostUSD
	return v, c.Calls > 0 && v > 0 && !math.IsInf(v, 0)
}

// Of returns workflow's baseline; false with fewer than MinRuns known costs.
func (b *Baseline) Of(workflow string) (Known, bool) {
	r := b.wf[workflow]
	if r == nil || len(r.costs) < MinRuns {
		return Known{}, false
	}
	s := slices.Clone(r.costs)
	slices.Sort(s)
	return Known{P95: quantile(s, 0.95), Median: quantile(s, 0.5), Runs: len(s)}, true
}

// Run judges a finalized workflow run: its cost beside the baseline of
// its workflow's earlier runs, then adds its cost (when known). A
// non-workflow run is the zero Verdict and changes nothing.
func (b *Baseline) Run(r *ingest.Run) Verdict {
	v := b.Peek(r)
	if v.CostKnown {
		b.add(r.Name, v.CostUSD)
	}
	return v
}

// Peek is Run's verdict without adding the run: an open run's cost so far
// beside its workflow's baseline.
func (b *Baseline) Peek(r *ingest.Run) Verdict {
	if !r.Workflow {
		return Verdict{}
	}
	var v Verdict
	v.CostUSD, v.CostKnown = Cost(&r.Cost)
	v.Base, v.BaseKnown = b.Of(r.Name)
	return v
}

// add records one known cost of workflow.
func (b *Baseline) add(workflow string, usd float64) {
	b.tick++
	r := b.wf[workflow]
	if r == nil {
		if b.wf == nil {
			b.wf = make(map[string]*ring)
		}
		if len(b.wf) >= MaxWorkflows {
			b.forgetOldest()
		}
		r = &ring{costs: make([]float64, 0, MinRuns)}
		b.wf[workflow] = r
	}
	r.used = b.tick
	if len(r.costs) < Window {
		r.costs = append(r.costs, usd)
		return
	}
	r.costs[r.next] = usd
	r.next = (r.next + 1) % Window
}

// forgetOldest drops the workflow least recently added to. A linear scan:
// it runs once per new workflow past MaxWorkflows, over 200 entries.
func (b *Baseline) forgetOldest() {
	var oldest string
	var at uint64 = math.MaxUint64
	for k, r := range b.wf {
		if r.used < at {
			oldest, at = k, r.used
		}
	}
	delete(b.wf, oldest)
}

// Size is how many workflows and costs b holds (for the bound's tests).
func (b *Baseline) Size() (workflows, costs int) {
	for _, r := range b.wf {
		costs += len(r.costs)
	}
	return len(b.wf), costs
}

// Verdicts judges runs, in order of finalization, against a fresh
// Baseline: what the reports show of a list of finalized runs (the
// verdict of a non-workflow run is the zero Verdict).
func Verdicts(runs []ingest.Run) []Verdict {
	var b Baseline
	out := make([]Verdict, len(runs))
	for i := range runs {
		out[i] = b.Run(&runs[i])
	}
	return out
}

// quantile is the q-quantile of sorted s, interpolated between the two
// nearest ranks (Hyndman and Fan's type 7, numpy's default): monotone in
// q, so the p95 is never below the median.
func quantile(s []float64, q float64) float64 {
	pos := q * float64(len(s)-1)
	i := int(pos)
	if i >= len(s)-1 {
		return s[len(s)-1]
	}
	// Clamped: rounding must not carry it past the next rank.
	return min(s[i]+(pos-float64(i))*(s[i+1]-s[i]), s[i+1])
}
