package metrics

import (
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/safetext"
)

// Defaults of Options.
const (
	// DefaultMaxWorkflows bounds the distinct workflow label values.
	DefaultMaxWorkflows = 200
	// DefaultMaxTaskTypes bounds the distinct task_type label values. The
	// CLIs know a handful of task types (local_bash, local_agent, ...); the
	// cap only matters for a hostile or buggy stream.
	DefaultMaxTaskTypes = 32
	// maxLabelLen bounds a workflow or task_type label value in bytes.
	maxLabelLen = 128
)

// Label values that are not names.
const (
	// LabelUnknown is the workflow (or task_type) of a run that has none,
	// e.g. a run adopted mid-stream.
	LabelUnknown = "unknown"
	// LabelOther is where names beyond the cap go.
	LabelOther = "other"
)

// Buckets of the classic histograms (see the package documentation).
var (
	workflowBuckets  = []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200}
	agentBuckets     = []float64{0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 102.4, 204.8, 409.6}
	interruptBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60}
)

// WorkflowBuckets returns the classic buckets of cbc_workflow_duration_seconds.
func WorkflowBuckets() []float64 { return append([]float64(nil), workflowBuckets...) }

// AgentBuckets returns the classic buckets of cbc_workflow_agent_duration_seconds.
func AgentBuckets() []float64 { return append([]float64(nil), agentBuckets...) }

// Options configures a Metrics.
type Options struct {
	// Stats is the pipeline's counters, read at scrape time for the
	// cbc_otel_lines/bytes/rejected/tap_dropped families. nil exposes zeros
	// (the families exist either way, so queries and alerts never see them
	// vanish).
	Stats *ingest.Stats
	// Version is the value of cbc_otel_build_info's version label.
	Version string
	// MaxWorkflows caps the distinct workflow label values; 0 means
	// DefaultMaxWorkflows. Names beyond it become "other".
	MaxWorkflows int
	// WorkflowAllow, when non-nil, admits only the workflow label values
	// it matches (use CompileWorkflowAllow: anchored, a full match); the
	// others become "other" and are counted in
	// cbc_otel_workflow_labels_disallowed_total. It applies before the
	// MaxWorkflows cap: only allowed names take a place under it.
	WorkflowAllow *regexp.Regexp
	// MaxTaskTypes caps the distinct task_type label values; 0 means
	// DefaultMaxTaskTypes.
	MaxTaskTypes int
	// MaxModels caps the distinct model label values; 0 means
	// DefaultMaxModels. Names beyond it become "other".
	MaxModels int
	// Exemplar, when non-nil, gives the trace and span id of a run's
	// workflow span; cbc_workflow_runs_total and
	// cbc_workflow_duration_seconds then carry {trace_id, span_id}
	// exemplars. It is called synchronously from Observe and must not
	// block. The traces package supplies it without importing this one.
	Exemplar func(*ingest.Run) (traceID, spanID string)
	// SpansDropped and ExportErrors read the traces exporter's counters at
	// scrape time (nil reads 0). They are funcs so that the traces package
	// needs no dependency on this one; SetExportCounters sets them later.
	SpansDropped func() float64
	ExportErrors func() float64
	// NoRuntimeCollectors leaves out the go_* and process_* collectors
	// (for a metrics file of a replay, where they describe the replaying
	// process and not the recording).
	NoRuntimeCollectors bool
	// ConstLabels are added to every series. `cbc-otel demo` sets
	// demo="true" (DemoLabel), which the shipped alert rules exclude, so
	// that a demo scraped by a shared Prometheus pages nobody.
	ConstLabels prometheus.Labels
}

// DemoLabel is the label, with the value "true", on every series of
// `cbc-otel demo`.
const DemoLabel = "demo"

// Metrics is an ingest.Sink that maintains the cbc_* metrics in its own
// registry. Observe may be called from several pipelines' goroutines at
// once; scrapes may run concurrently with it.
type Metrics struct {
	reg *prometheus.Registry

	runsStarted   *prometheus.CounterVec
	runsTotal     *prometheus.CounterVec
	runsActive    *prometheus.GaugeVec
	duration      *prometheus.HistogramVec
	agentsTotal   *prometheus.CounterVec
	agentDuration *prometheus.HistogramVec
	tokens        *prometheus.CounterVec
	toolUses      *prometheus.CounterVec
	tasks         *prometheus.CounterVec
	interrupts    prometheus.Counter
	interruptStop prometheus.Histogram
	violations    map[ingest.Violation]prometheus.Counter
	wfOverflow    prometheus.Counter
	wfDisallowed  prometheus.Counter
	typeOverflow  prometheus.Counter
	cost          *costMetrics  // cost.go
	stalls        *stallMetrics // stall.go

	exemplar func(*ingest.Run) (string, string)
	export   *exportFuncs

	mu   sync.Mutex
	runs map[*ingest.Run]*runState
	// agentSeries caches each workflow label's agent children:
	// WithLabelValues hashes and checks the label values on every call,
	// once per agent the largest part of this sink's CPU in replay.
	agentSeries map[string]*agentSeries
	workflows   labelCap
	taskTypes   labelCap
}

// runState is what Metrics remembers of a run between its first and its
// RunFinalized event. Runs are keyed by the Tracker's pointer, which stays
// the same for the run's whole life (and cannot be reused while the map
// holds it).
type runState struct {
	label    string // workflow or task_type label, fixed at first sight
	active   bool   // counted in cbc_workflow_runs_active
	finished bool   // counted in runs_total / tasks_total
	timed    bool   // its duration observed
	costed   bool   // its cost observed (or counted unknown)
	stalled  bool   // counted in cbc_workflow_runs_stalled
	// stalledAgents are the indices of its agents counted in
	// cbc_workflow_agents_stalled; nil while none is.
	stalledAgents map[int]bool
	agents        map[int]struct{}
	series        *agentSeries // of label, for a workflow run; nil until an agent ends
	// ex is the run's exemplar labels once made (exDone) while the run's
	// chain had root exRoot: the runs total, the duration and the cost of
	// a run share them.
	ex     prometheus.Labels
	exDone bool
	exRoot [2]string
}

// agentSeries is one workflow label's agent counters and histograms by
// final state, each looked up on first use: the histograms are not
// pre-created (a series per state that never occurs would only cost).
type agentSeries struct {
	total    [numAgentStates]prometheus.Counter
	duration [numAgentStates]prometheus.Observer
}

// numAgentStates bounds the states an agentSeries holds.
const numAgentStates = ingest.AgentNotStarted + 1

// New builds a Metrics and registers every collector in a fresh registry.
func New(opts Options) (*Metrics, error) {
	if opts.MaxWorkflows < 0 || opts.MaxTaskTypes < 0 || opts.MaxModels < 0 {
		return nil, errors.New("metrics: MaxWorkflows, MaxTaskTypes and MaxModels must not be negative")
	}
	if opts.MaxModels == 0 {
		opts.MaxModels = DefaultMaxModels
	}
	if opts.MaxWorkflows == 0 {
		opts.MaxWorkflows = DefaultMaxWorkflows
	}
	if opts.MaxTaskTypes == 0 {
		opts.MaxTaskTypes = DefaultMaxTaskTypes
	}
	if opts.Stats == nil {
		opts.Stats = new(ingest.Stats)
	}
	if opts.Version == "" {
		opts.Version = "unknown"
	}
	m := &Metrics{
		reg:         prometheus.NewRegistry(),
		exemplar:    opts.Exemplar,
		export:      &exportFuncs{},
		runs:        make(map[*ingest.Run]*runState),
		agentSeries: make(map[string]*agentSeries),
		workflows:   labelCap{max: opts.MaxWorkflows, seen: make(map[string]struct{}), allow: opts.WorkflowAllow},
		taskTypes:   newLabelCap(opts.MaxTaskTypes),
		cost:        newCostMetrics(opts.MaxModels),
		stalls:      newStallMetrics(),
	}
	m.SetExportCounters(opts.SpansDropped, opts.ExportErrors)

	m.runsStarted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cbc_workflow_runs_started_total",
		Help: "Workflow runs announced (task_started, or adopted from a snapshot mid-stream).",
	}, []string{"workflow"})
	m.runsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: workflowRunsFamily,
		Help: "Workflow runs that reached a terminal status (completed, failed, stopped, abandoned), counted once per run.",
	}, []string{"workflow", "status"})
	m.runsActive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cbc_workflow_runs_active",
		Help: "Workflow runs started and not yet terminal.",
	}, []string{"workflow"})
	m.duration = prometheus.NewHistogramVec(nativeToo(prometheus.HistogramOpts{
		Name:    "cbc_workflow_duration_seconds",
		Help:    "Duration of terminal workflow runs (end - start), in seconds.",
		Buckets: workflowBuckets,
	}), []string{"workflow", "status"})
	m.agentsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cbc_workflow_agents_total",
		Help: "Workflow sub-agents by final state (done, error, cached, abandoned, not_started), counted once per agent.",
	}, []string{"workflow", "state"})
	m.agentDuration = prometheus.NewHistogramVec(nativeToo(prometheus.HistogramOpts{
		Name:    "cbc_workflow_agent_duration_seconds",
		Help:    "Duration of workflow sub-agents (end - start) by final state, in seconds, when both are known.",
		Buckets: agentBuckets,
	}), []string{"workflow", "state"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cbc_workflow_tokens_total",
		Help: "Tokens used by terminal workflow runs (final usage.total_tokens).",
	}, []string{"workflow"})
	m.toolUses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cbc_workflow_tool_uses_total",
		Help: "Tool uses of terminal workflow runs (final usage.tool_uses).",
	}, []string{"workflow"})
	m.tasks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cbc_tasks_total",
		Help: "Non-workflow background tasks by terminal status.",
	}, []string{"task_type", "status"})
	m.interrupts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cbc_interrupts_total",
		Help: "Interrupt and stop_task requests seen on the CLI's stdin.",
	})
	m.interruptStop = prometheus.NewHistogram(nativeToo(prometheus.HistogramOpts{
		Name:    "cbc_interrupt_stop_seconds",
		Help:    "Time from an interrupt request to the stopped notification of the run it stopped, in seconds.",
		Buckets: interruptBuckets,
	}))
	violations := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cbc_protocol_violations_total",
		Help: "Protocol violations seen in the stream, by kind.",
	}, []string{"kind"})
	m.violations = make(map[ingest.Violation]prometheus.Counter)
	for _, v := range ingest.Violations() {
		// Pre-created: a zero series lets increase() see the first one.
		m.violations[v] = violations.WithLabelValues(v.String())
	}
	m.wfOverflow = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cbc_otel_workflow_labels_overflow_total",
		Help: "Workflow runs whose workflow label was replaced by \"other\" because the label cap was reached.",
	})
	m.wfDisallowed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cbc_otel_workflow_labels_disallowed_total",
		Help: "Workflow runs whose workflow label was replaced by \"other\" because the name is not in the allow-list (--metrics.workflow-allow).",
	})
	m.typeOverflow = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cbc_otel_task_type_labels_overflow_total",
		Help: "Tasks whose task_type label was replaced by \"other\" because the label cap was reached.",
	})
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cbc_otel_build_info",
		Help: "Always 1; the labels say which cbc-otel build is running.",
	}, []string{"version", "goversion"})
	buildInfo.WithLabelValues(safetext.Cut(opts.Version, maxLabelLen), runtime.Version()).Set(1)

	cs := []prometheus.Collector{
		m.runsStarted, m.runsTotal, m.runsActive, m.duration, m.agentsTotal, m.agentDuration,
		m.tokens, m.toolUses, m.tasks, m.interrupts, m.interruptStop, violations,
		m.wfOverflow, m.wfDisallowed, m.typeOverflow, buildInfo,
		newStatsCollector(opts.Stats, m.export),
	}
	cs = append(cs, m.cost.collectors...)
	cs = append(cs, m.stalls.collectors()...)
	if !opts.NoRuntimeCollectors {
		cs = append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	// The process's other collectors (the spool's, the join's) get the
	// same labels from the telemetry package, which registers them.
	var regr prometheus.Registerer = m.reg
	if len(opts.ConstLabels) > 0 {
		regr = prometheus.WrapRegistererWith(opts.ConstLabels, m.reg)
	}
	for _, c := range cs {
		if err := regr.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: registering collector: %w", err)
		}
	}
	return m, nil
}

// nativeToo adds the native-histogram settings shared by every histogram.
// MinResetDuration stays zero: past the bucket limit the resolution drops
// instead of the histogram resetting, because a reset would look like
// counters going down.
func nativeToo(o prometheus.HistogramOpts) prometheus.HistogramOpts {
	o.NativeHistogramBucketFactor = 1.1
	o.NativeHistogramMaxBucketNumber = 160
	return o
}

// Registry returns the registry holding every metric of m.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// SetExportCounters sets the funcs read for cbc_otel_spans_dropped_total and
// cbc_otel_export_errors_total; nil reads 0. It exists because the traces
// exporter is usually built after the metrics.
func (m *Metrics) SetExportCounters(spansDropped, exportErrors func() float64) {
	m.export.spansDropped.Store(&spansDropped)
	m.export.exportErrors.Store(&exportErrors)
}

// Observe updates the metrics for one lifecycle event. It implements
// ingest.Sink: it never blocks (one short critical section) and never
// panics on an event it does not expect.
func (m *Metrics) Observe(l ingest.Lifecycle) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch l.Kind {
	case ingest.RunStarted:
		if l.Run == nil {
			return
		}
		st := m.state(l.Run, true)
		if !st.active && !st.finished {
			st.active = true
			m.runsStarted.WithLabelValues(st.label).Inc()
			m.runsActive.WithLabelValues(st.label).Inc()
		}
	case ingest.RunFinished:
		if l.Run != nil {
			m.runFinished(l.Run)
		}
	case ingest.AgentEnded:
		if l.Run != nil && l.Agent != nil {
			m.agentEnded(l.Run, l.Agent)
		}
	case ingest.TaskStarted:
		if l.Run != nil {
			m.state(l.Run, false)
		}
	case ingest.TaskEnded:
		if l.Run == nil {
			return
		}
		st := m.state(l.Run, false)
		if st.finished || !terminal(l.Run.Status) {
			return
		}
		st.finished = true
		m.tasks.WithLabelValues(st.label, l.Run.Status.String()).Inc()
	case ingest.RunFinalized:
		if l.Run == nil {
			return
		}
		if st, ok := m.runs[l.Run]; ok {
			m.runTimed(l.Run, st)
			m.runCosted(l.Run, st)
			m.agentStallsGone(st)
			if st.active { // finalized without a terminal status: never leak a gauge
				st.active = false
				m.runsActive.WithLabelValues(st.label).Dec()
			}
			delete(m.runs, l.Run)
		}
	case ingest.InterruptRequested:
		m.interrupts.Inc()
	case ingest.InterruptMatched:
		if l.LatencyMs >= 0 {
			m.interruptStop.Observe(float64(l.LatencyMs) / 1000)
		}
	case ingest.ViolationSeen:
		if c, ok := m.violations[l.Violation]; ok {
			c.Inc()
		}
	case ingest.TurnEnded:
		if l.Turn != nil {
			m.turnEnded(l.Turn)
		}
	case ingest.ModelCallSeen:
		if l.Call != nil {
			m.modelCall(l)
		}
	case ingest.RunStalled, ingest.RunResumed:
		if l.Run != nil {
			m.stall(l)
		}
	case ingest.AgentStalled, ingest.AgentResumed:
		if l.Run != nil && l.Agent != nil {
			m.agentStall(l)
		}
	}
}

// state returns the remembered state of r, creating it (and fixing its
// label) on first sight. workflow selects which label cap applies.
func (m *Metrics) state(r *ingest.Run, workflow bool) *runState {
	if st, ok := m.runs[r]; ok {
		return st
	}
	st := &runState{}
	if workflow {
		st.label = m.workflowLabel(r.Name)
	} else {
		st.label = m.taskTypeLabel(r.TaskType)
	}
	m.runs[r] = st
	return st
}

// workflowLabel maps a workflow name to its label value, pre-creating the
// series of a newly admitted value so that increase() and absent-series
// alerts see a zero before the first run ends.
func (m *Metrics) workflowLabel(name string) string {
	label, added, folded := m.workflows.resolve(name)
	switch folded {
	case foldedCap:
		m.wfOverflow.Inc()
	case foldedAllow:
		m.wfDisallowed.Inc()
	}
	if added {
		m.runsStarted.WithLabelValues(label)
		m.runsActive.WithLabelValues(label)
		m.tokens.WithLabelValues(label)
		m.toolUses.WithLabelValues(label)
		m.cost.wfCost.WithLabelValues(label)
		m.cost.runCostNone.WithLabelValues(label)
		for _, s := range ingest.TerminalStatuses() {
			m.runsTotal.WithLabelValues(label, s.String())
		}
		for _, s := range ingest.FinalAgentStates() {
			m.agentsTotal.WithLabelValues(label, s.String())
		}
	}
	return label
}

func (m *Metrics) taskTypeLabel(typ string) string {
	label, added, folded := m.taskTypes.resolve(typ)
	if folded != notFolded {
		m.typeOverflow.Inc()
	}
	if added {
		for _, s := range ingest.TerminalStatuses() {
			m.tasks.WithLabelValues(label, s.String())
		}
	}
	return label
}

func (m *Metrics) runFinished(r *ingest.Run) {
	st := m.state(r, true)
	if st.finished || !terminal(r.Status) {
		return // one terminal count per run, whatever the Tracker sends
	}
	st.finished = true
	if st.active {
		st.active = false
		m.runsActive.WithLabelValues(st.label).Dec()
	}
	status := r.Status.String()
	addWithExemplar(m.runsTotal.WithLabelValues(st.label, status), 1, m.runExemplar(r, st))
	if r.Usage.TotalTokens > 0 {
		m.tokens.WithLabelValues(st.label).Add(float64(r.Usage.TotalTokens))
	}
	if r.Usage.ToolUses > 0 {
		m.toolUses.WithLabelValues(st.label).Add(float64(r.Usage.ToolUses))
	}
}

// runTimed observes a finished workflow run's duration once, when it is
// finalized: snapshots of the grace window can still widen the run to
// enclose its agents, and the histogram must read the times every other
// output reads.
func (m *Metrics) runTimed(r *ingest.Run, st *runState) {
	if !r.Workflow || !st.finished || st.timed {
		return
	}
	st.timed = true
	if r.Start > 0 && r.End >= r.Start {
		observeWithExemplar(m.duration.WithLabelValues(st.label, r.Status.String()), float64(r.End-r.Start)/1000, m.runExemplar(r, st))
	}
}

func (m *Metrics) agentEnded(r *ingest.Run, a *ingest.Agent) {
	if !a.State.Final() || a.State >= numAgentStates {
		return // not a final state: nothing to count yet
	}
	st := m.state(r, true)
	if st.agents == nil {
		st.agents = make(map[int]struct{})
	}
	if _, dup := st.agents[a.Index]; dup {
		return // the Tracker sends one AgentEnded per agent; be sure anyway
	}
	st.agents[a.Index] = struct{}{}
	if st.series == nil {
		st.series = m.agentSeries[st.label]
		if st.series == nil {
			st.series = &agentSeries{}
			m.agentSeries[st.label] = st.series
		}
	}
	s := st.series
	if s.total[a.State] == nil {
		s.total[a.State] = m.agentsTotal.WithLabelValues(st.label, a.State.String())
	}
	s.total[a.State].Inc()
	if a.Start > 0 && a.End >= a.Start && a.State != ingest.AgentNotStarted {
		// A not_started agent never ran: its zero-length interval is no
		// duration.
		if s.duration[a.State] == nil {
			s.duration[a.State] = m.agentDuration.WithLabelValues(st.label, a.State.String())
		}
		s.duration[a.State].Observe(float64(a.End-a.Start) / 1000)
	}
}

// terminal reports whether s is one of the terminal status labels.
func terminal(s ingest.RunStatus) bool {
	return slices.Contains(ingest.TerminalStatuses(), s)
}

// runExemplar is exemplarFor(r), made once per run (the Exemplar func
// hashes the run's ids and formats them), for each of up to three series.
// A run's trace is its chain's root's, which a task_started in the grace
// window can still name: then it is made again.
func (m *Metrics) runExemplar(r *ingest.Run, st *runState) prometheus.Labels {
	root := [2]string{}
	if p := &r.Parent; p.TaskID != "" {
		root = [2]string{p.RootTask, p.RootRun}
	} else if p := r.Resumes; p != nil {
		root = [2]string{p.RootTask, p.RootRun}
	}
	if !st.exDone || st.exRoot != root {
		st.ex, st.exDone, st.exRoot = m.exemplarFor(r), true, root
	}
	return st.ex
}

// exemplarFor returns the exemplar labels of r, or nil when there is no
// exemplar func or its answer would not make a valid exemplar (client_golang
// panics on those, and a bad trace id must never take the pipeline down).
func (m *Metrics) exemplarFor(r *ingest.Run) prometheus.Labels {
	if m.exemplar == nil {
		return nil
	}
	traceID, spanID := m.exemplar(r)
	if traceID == "" || !utf8.ValidString(traceID) || !utf8.ValidString(spanID) {
		return nil
	}
	ex := prometheus.Labels{"trace_id": traceID}
	if spanID != "" {
		ex["span_id"] = spanID
	}
	// The OpenMetrics limit is 128 runes of names and values together.
	n := 0
	for k, v := range ex {
		n += utf8.RuneCountInString(k) + utf8.RuneCountInString(v)
	}
	if n > prometheus.ExemplarMaxRunes {
		return nil
	}
	return ex
}

func addWithExemplar(c prometheus.Counter, v float64, ex prometheus.Labels) {
	if ea, ok := c.(prometheus.ExemplarAdder); ok && ex != nil {
		ea.AddWithExemplar(v, ex)
		return
	}
	c.Add(v)
}

func observeWithExemplar(o prometheus.Observer, v float64, ex prometheus.Labels) {
	if eo, ok := o.(prometheus.ExemplarObserver); ok && ex != nil {
		eo.ObserveWithExemplar(v, ex)
		return
	}
	o.Observe(v)
}

// labelCap admits at most max distinct label values, and with an
// allow-list only the values it matches; the rest map to LabelOther.
// "unknown" and "other" themselves neither count against the cap nor are
// subject to the allow-list.
type labelCap struct {
	max   int
	seen  map[string]struct{}
	allow *regexp.Regexp // nil: every value is allowed
}

func newLabelCap(max int) labelCap {
	return labelCap{max: max, seen: make(map[string]struct{})}
}

// folding says why resolve folded a name into "other".
type folding int

const (
	notFolded   folding = iota
	foldedCap           // the cap was reached
	foldedAllow         // the allow-list does not match it
)

// allows reports whether label may be a label value under the allow-list.
func (c *labelCap) allows(label string) bool {
	return c.allow == nil || label == LabelUnknown || label == LabelOther || c.allow.MatchString(label)
}

// resolve bounds raw (clean: ingest cleaned it) and returns its label value; added reports a value
// seen for the first time (its series should be pre-created), folded why a
// name became "other". The allow-list applies first, then the cap.
func (c *labelCap) resolve(raw string) (label string, added bool, folded folding) {
	label = safetext.Cut(raw, maxLabelLen)
	if label == "" {
		label = LabelUnknown
	}
	if !c.allows(label) {
		label, folded = LabelOther, foldedAllow
	}
	if _, ok := c.seen[label]; ok {
		return label, false, folded
	}
	if label != LabelUnknown && label != LabelOther {
		if c.count() >= c.max {
			label, folded = LabelOther, foldedCap
			if _, ok := c.seen[label]; ok {
				return label, false, folded
			}
		}
	}
	c.seen[label] = struct{}{}
	return label, true, folded
}

// count is the number of admitted names, the reserved values excluded.
func (c *labelCap) count() int {
	n := len(c.seen)
	for _, r := range [...]string{LabelUnknown, LabelOther} {
		if _, ok := c.seen[r]; ok {
			n--
		}
	}
	return n
}

// exportFuncs holds the traces exporter's counter readers; they are
// swapped atomically because a scrape may read them at any time.
type exportFuncs struct {
	spansDropped atomic.Pointer[func() float64]
	exportErrors atomic.Pointer[func() float64]
}

func read(p *atomic.Pointer[func() float64]) float64 {
	if f := p.Load(); f != nil && *f != nil {
		return (*f)()
	}
	return 0
}

// statsCollector exposes the pipeline's own counters, read from
// ingest.Stats and the exporter funcs at scrape time, so the hot path pays
// nothing for them.
type statsCollector struct {
	stats                           *ingest.Stats
	export                          *exportFuncs
	lines, bytes, dropped, rejected *prometheus.Desc
	incomplete, rejectedBytes       *prometheus.Desc
	spansDropped, exportErrors      *prometheus.Desc
	launchersEvicted                *prometheus.Desc
}

func newStatsCollector(st *ingest.Stats, ex *exportFuncs) *statsCollector {
	return &statsCollector{
		stats:  st,
		export: ex,
		lines: prometheus.NewDesc("cbc_otel_lines_total",
			"Lines framed from each tapped stream.", []string{"source"}, nil),
		bytes: prometheus.NewDesc("cbc_otel_bytes_total",
			"Bytes framed from each tapped stream.", []string{"source"}, nil),
		dropped: prometheus.NewDesc("cbc_otel_tap_dropped_bytes_total",
			"Bytes of each tapped stream dropped because the telemetry pipeline could not keep up (the child is never slowed).", []string{"source"}, nil),
		rejected: prometheus.NewDesc("cbc_otel_lines_rejected_total",
			"Lines that could not be decoded, by reason.", []string{"reason"}, nil),
		incomplete: prometheus.NewDesc("cbc_otel_incomplete_bytes_total",
			"Bytes of each tapped stream read as pieces of lines a tap drop cut (no whole line framed): framed + incomplete + dropped bytes are all that passed.", []string{"source"}, nil),
		rejectedBytes: prometheus.NewDesc("cbc_otel_lines_rejected_bytes_total",
			"Bytes of the rejected lines (as far as read), by reason.", []string{"reason"}, nil),
		spansDropped: prometheus.NewDesc("cbc_otel_spans_dropped_total",
			"Spans the traces exporter dropped.", nil, nil),
		exportErrors: prometheus.NewDesc("cbc_otel_export_errors_total",
			"Trace exports that failed.", nil, nil),
		launchersEvicted: prometheus.NewDesc("cbc_otel_launchers_evicted_total",
			"Finalized runs forgotten by the bounded store that links later nested runs and resumes to them.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.lines, c.bytes, c.dropped, c.rejected, c.incomplete, c.rejectedBytes, c.spansDropped, c.exportErrors, c.launchersEvicted} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	for s, n := range c.stats.PerSource() {
		ch <- prometheus.MustNewConstMetric(c.lines, prometheus.CounterValue, float64(n.Lines), s)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(n.Bytes), s)
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(n.Dropped), s)
		ch <- prometheus.MustNewConstMetric(c.incomplete, prometheus.CounterValue, float64(n.Incomplete), s)
	}
	for r, n := range c.stats.PerReason() {
		ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(n.Lines), r)
		ch <- prometheus.MustNewConstMetric(c.rejectedBytes, prometheus.CounterValue, float64(n.Bytes), r)
	}
	ch <- prometheus.MustNewConstMetric(c.spansDropped, prometheus.CounterValue, read(&c.export.spansDropped))
	ch <- prometheus.MustNewConstMetric(c.exportErrors, prometheus.CounterValue, read(&c.export.exportErrors))
	ch <- prometheus.MustNewConstMetric(c.launchersEvicted, prometheus.CounterValue, float64(c.stats.LaunchersEvicted()))
}
