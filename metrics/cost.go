package metrics

import (
	"math"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
)

// Cost and tokens: from result lines (TurnEnded: the session's cumulative
// cost turned into per-turn deltas by the Tracker) and from the CLI's own
// telemetry (ModelCallSeen: one model call, attributed to the main
// conversation, a workflow, or neither).

// DefaultMaxModels bounds the distinct model label values: a session uses
// one to three models, a fleet a handful more.
const DefaultMaxModels = 20

// TurnSubtypes are the result subtypes that are label values of
// cbc_turns_total (the Agent SDK's SDKResultMessage); any other is "other".
func TurnSubtypes() []string {
	return []string{"success", "error_max_turns", "error_during_execution", "error_max_budget_usd", "error_max_structured_output_retries"}
}

// turnBuckets are the classic buckets of cbc_turn_duration_seconds: a turn
// takes from a second (a short answer) to an hour (a long workflow).
var turnBuckets = []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600}

// runCostBuckets are the classic buckets of cbc_workflow_run_cost_usd: a
// 1-2-5 progression from $0.001 (one short call of a small model) to $100
// (a runaway run), 16 bounds. Not ExponentialBucketsRange: its bounds
// ($0.0316, $0.316) are not amounts anyone budgets in, while every 1-2-5
// bound is one a query can name (le="1": runs under a dollar), and two
// neighbours differ by at most 2.5×, which bounds histogram_quantile's
// interpolation error the same at every scale. Natively (nativeToo:
// factor 1.1, schema 3) $0.001…$100 spans 8·log2(10^5) ≈ 133 buckets,
// under the cap of 160, so the native histogram keeps its resolution over
// the whole range and is bounded beyond it.
var runCostBuckets = []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100}

// RunCostBuckets returns the classic buckets of cbc_workflow_run_cost_usd.
func RunCostBuckets() []float64 { return append([]float64(nil), runCostBuckets...) }

// costMetrics are the cost families and the model label cap.
type costMetrics struct {
	cost          *prometheus.CounterVec // {model}
	tokens        *prometheus.CounterVec // {model, type}
	turns         *prometheus.CounterVec // {subtype}
	turnDuration  prometheus.Histogram
	wfCost        *prometheus.CounterVec   // {workflow}
	wfTokens      *prometheus.CounterVec   // {workflow, model, type}
	cliCost       *prometheus.CounterVec   // {scope}
	runCost       *prometheus.HistogramVec // {workflow}
	runCostNone   *prometheus.CounterVec   // {workflow}
	modelOverflow prometheus.Counter
	models        labelCap // the model label values admitted
	collectors    []prometheus.Collector
}

func newCostMetrics(maxModels int) *costMetrics {
	c := &costMetrics{models: newLabelCap(maxModels)}
	c.cost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cbc_cost_usd_total",
		Help: "Cost in USD of the sessions' turns, by model: the growth of each result line's cumulative modelUsage costUSD (sub-agents included; CodeBuddy reports 0).",
	}, []string{"model"})
	c.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cbc_model_tokens_total",
		Help: "Tokens of the sessions' turns by model and type (input, output, cache_read, cache_creation): the growth of each result line's cumulative modelUsage.",
	}, []string{"model", "type"})
	c.turns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cbc_turns_total",
		Help: "Turns ended (result lines) by subtype; subtypes outside the known set are \"other\".",
	}, []string{"subtype"})
	c.turnDuration = prometheus.NewHistogram(nativeToo(prometheus.HistogramOpts{
		Name:    "cbc_turn_duration_seconds",
		Help:    "Duration of turns (result duration_ms), in seconds.",
		Buckets: turnBuckets,
	}))
	c.wfCost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cbc_workflow_cost_usd_total",
		Help: "Cost in USD of the model calls of workflow sub-agents, by workflow (the CLI's own telemetry).",
	}, []string{"workflow"})
	c.wfTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cbc_workflow_model_tokens_total",
		Help: "Tokens of the model calls of workflow sub-agents, by workflow, model and type (the CLI's own telemetry).",
	}, []string{"workflow", "model", "type"})
	c.cliCost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cbc_cli_cost_usd_total",
		Help: "Cost in USD of the model calls the CLI's own telemetry reported, by scope: main (the conversation), workflow (a workflow's sub-agents), unmatched (other agents).",
	}, []string{"scope"})
	c.runCost = prometheus.NewHistogramVec(nativeToo(prometheus.HistogramOpts{
		Name:    "cbc_workflow_run_cost_usd",
		Help:    "Cost in USD of each finalized workflow run whose cost is known (the CLI's own telemetry, joined), observed once per run; the exemplar is the run's trace.",
		Buckets: runCostBuckets,
	}), []string{"workflow"})
	c.runCostNone = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cbc_workflow_runs_cost_unknown_total",
		Help: "Finalized workflow runs whose cost is not known (no model call of the CLI's telemetry joined to them, or only calls that reported no cost), so not in cbc_workflow_run_cost_usd.",
	}, []string{"workflow"})
	c.modelOverflow = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cbc_otel_model_labels_overflow_total",
		Help: "Model usages whose model label was replaced by \"other\" because the label cap was reached.",
	})
	// Closed sets are pre-created: increase() sees the first one.
	for _, s := range append(TurnSubtypes(), LabelOther) {
		c.turns.WithLabelValues(s)
	}
	for _, s := range ingest.CallScopes() {
		c.cliCost.WithLabelValues(s.String())
	}
	c.collectors = []prometheus.Collector{c.cost, c.tokens, c.turns, c.turnDuration, c.wfCost, c.wfTokens, c.cliCost, c.runCost, c.runCostNone, c.modelOverflow}
	return c
}

// modelLabel maps a model name to its label value under the cap,
// pre-creating the series of a newly admitted one.
func (c *costMetrics) modelLabel(name string) string {
	label, added, folded := c.models.resolve(name)
	if folded != notFolded {
		c.modelOverflow.Inc()
	}
	if added {
		c.cost.WithLabelValues(label)
		for _, k := range cost.TokenTypes() {
			c.tokens.WithLabelValues(label, k.String())
		}
	}
	return label
}

// add adds v to a counter when it is a positive finite amount: a counter
// panics on a negative one, and NaN would poison it for good.
func add(c prometheus.Counter, v float64) {
	if v > 0 && !math.IsInf(v, 0) {
		c.Add(v)
	}
}

// turnEnded counts a turn and what it cost. Called with m.mu held.
func (m *Metrics) turnEnded(t *ingest.Turn) {
	c := m.cost
	sub := LabelOther
	if slices.Contains(TurnSubtypes(), t.Subtype) {
		sub = t.Subtype
	}
	c.turns.WithLabelValues(sub).Inc()
	if t.DurationMs > 0 {
		c.turnDuration.Observe(float64(t.DurationMs) / 1000)
	}
	for _, d := range t.Delta {
		model := c.modelLabel(d.Model)
		add(c.cost.WithLabelValues(model), d.CostUSD)
		for _, k := range cost.TokenTypes() {
			add(c.tokens.WithLabelValues(model, k.String()), float64(d.Tokens[k]))
		}
	}
}

// modelCall counts a model call of the CLI's own telemetry by scope and,
// for a workflow's, by workflow. Called with m.mu held.
func (m *Metrics) modelCall(l ingest.Lifecycle) {
	c, call := m.cost, l.Call
	if int(call.Scope) >= len(ingest.CallScopes()) {
		return
	}
	add(c.cliCost.WithLabelValues(call.Scope.String()), call.Cost.CostUSD)
	if call.Scope != ingest.CallWorkflow {
		return
	}
	// The run's label when it is known, so that its cost and its runs
	// are under the same one; else the name through the same cap.
	var wf string
	if st, ok := m.runs[l.Run]; ok && l.Run != nil {
		wf = st.label
	} else {
		wf = m.workflowLabel(call.Workflow)
	}
	add(c.wfCost.WithLabelValues(wf), call.Cost.CostUSD)
	model := c.modelLabel(call.Cost.Model)
	for _, k := range cost.TokenTypes() {
		add(c.wfTokens.WithLabelValues(wf, model, k.String()), float64(call.Cost.Tokens[k]))
	}
}

// runCosted observes a finalized workflow run's cost, once: in
// cbc_workflow_run_cost_usd when it is known, with the run's trace as
// exemplar, else in cbc_workflow_runs_cost_unknown_total. Only runs counted
// in cbc_workflow_runs_total are, so that per workflow the two add up to
// it. Called with m.mu held, at RunFinalized: calls attributed in the grace
// window are in (those later count in cbc_workflow_cost_usd_total only, as
// they miss the run's spans too).
func (m *Metrics) runCosted(r *ingest.Run, st *runState) {
	if !r.Workflow || !st.finished || st.costed {
		return
	}
	st.costed = true
	if usd, ok := runCost(&r.Cost); ok {
		observeWithExemplar(m.cost.runCost.WithLabelValues(st.label), usd, m.runExemplar(r, st))
		return
	}
	m.cost.runCostNone.WithLabelValues(st.label).Inc()
}

// runCost returns what a run cost and whether that is known: at least one
// model call joined and a positive, finite sum. A run whose calls all
// reported $0 (a CLI that prices nothing) is unknown, not free: a real
// model call never costs nothing, and a 0 would drag the quantiles down.
func runCost(c *cost.Sum) (float64, bool) {
	v := c.CostUSD
	return v, c.Calls > 0 && v > 0 && !math.IsInf(v, 0)
}

// modelLabels returns the model label values admitted, sorted, for the
// checkpoint. Called with m.mu held.
func (c *costMetrics) modelLabels() []string {
	var out []string
	for l := range c.models.seen {
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}
