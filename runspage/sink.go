// Package runspage is the page at / of the metrics listener: build info,
// links to /metrics, /healthz and /readyz, and the last runs as waterfalls
// (phases and agents on the run's time axis, status colours, durations,
// tokens, and the run's cost beside its workflow's p95: internal/runcost),
// with the session's spend against a budget when one is set (SetBudget),
// rendered on the server with html/template and inline SVG. The
// page holds no script and loads nothing: its Content-Security-Policy
// forbids both.
//
// Page is an ingest.Sink and an http.Handler. It keeps copies of the last
// Runs finalized workflow runs and of at most Open unfinalized ones, each
// cut to MaxAgents agents and MaxPhases phases, so that what it holds is
// bounded whatever the stream. The pipeline's goroutine writes, HTTP
// goroutines read: a request copies the list of runs under the lock and
// renders outside it, and the sink copies a run's agents before changing
// them once a request may hold them (copy on write), so the pipeline never
// waits for a page to render.
//
// Every name, title and label comes from the stream: ingest cleaned it of
// control and bidirectional formatting characters (safetext.Clean, once),
// the page only cuts it (safetext.Cut) and html/template escapes it. Prompt and result previews are never
// shown; error texts are what the Tracker kept (withheld unless
// --tracker.capture-errors).
package runspage

import (
	"cmp"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/runcost"
)

// Defaults of Options.
const (
	DefaultRuns = 20  // finalized runs kept
	DefaultOpen = 50  // unfinalized runs kept
	MaxAgents   = 200 // agents kept per run (by index); the rest are counted
	MaxPhases   = 64  // phases kept per run (by index); the rest are counted
	// DefaultRefresh is how often the page reloads itself.
	DefaultRefresh = 5 * time.Second
)

// Options configures a Page.
type Options struct {
	// Runs is how many finalized workflow runs are kept; 0 means
	// DefaultRuns.
	Runs int
	// Open is how many unfinalized runs are kept; beyond, the one that
	// appeared first is dropped from the page. 0 means DefaultOpen.
	Open int
	// Version is the build's version, shown in the header.
	Version string
	// Started is when the process started; zero means when New ran.
	Started time.Time
	// Now is the clock that ends open runs' time axes; nil means
	// time.Now.
	Now func() time.Time
	// Refresh is the reload interval; 0 means DefaultRefresh.
	Refresh time.Duration
	// Gaps, if set, says what the telemetry did not read (bytes dropped,
	// lines cut or rejected, and how much), "" when nothing: shown as a
	// warning at the top of the page.
	Gaps func() string
}

// goVersion is shown in the header (a variable so that the golden test
// does not depend on the toolchain).
var goVersion = runtime.Version()

// Page keeps the runs and renders them. Its zero value is not usable: call
// New.
type Page struct {
	opts Options

	mu       sync.Mutex
	seq      uint64
	open     map[*ingest.Run]*entry
	done     []*entry // finalized, oldest first, at most opts.Runs
	finished uint64   // finalized workflow runs seen
	dropped  uint64   // open runs dropped over Open
	before   uint64   // finished runs counted before a restart (SetFinishedBefore)
	// base is the workflows' recent costs: a finalized run is judged
	// against its workflow's earlier runs, an open one against all so far.
	base   runcost.Baseline
	budget func() runcost.Budget // SetBudget; nil: no budget line
}

// SetBudget makes the page show the session's spend against a cap (run
// --budget.max-cost-usd, or the demo's budget for show): budget is called
// at each render, from the HTTP goroutines, and must be safe for that.
func (p *Page) SetBudget(budget func() runcost.Budget) {
	p.mu.Lock()
	p.budget = budget
	p.mu.Unlock()
}

// SetFinishedBefore tells the page how many workflow runs finished before
// this process started, as restored from a state directory: /metrics
// counts them, the page never saw them, and says so instead of "no run has
// finished yet".
func (p *Page) SetFinishedBefore(n uint64) {
	p.mu.Lock()
	p.before = n
	p.mu.Unlock()
}

// entry is the page's copy of one run. A finalized entry never changes; an
// open one is changed by the sink only, after copying its slices when a
// request may still read them (shared).
type entry struct {
	seq          uint64 // order of appearance
	run          ingest.Run
	hiddenAgents int
	hiddenPhases int
	shared       bool
	// cost is the run's cost beside its workflow's p95: of the runs
	// before it, fixed at finalization; an open run's, at each snapshot.
	cost runcost.Verdict
}

// New returns an empty Page.
func New(opts Options) *Page {
	if opts.Runs <= 0 {
		opts.Runs = DefaultRuns
	}
	if opts.Open <= 0 {
		opts.Open = DefaultOpen
	}
	if opts.Started.IsZero() {
		opts.Started = time.Now()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultRefresh
	}
	return &Page{opts: opts, open: make(map[*ingest.Run]*entry)}
}

var _ ingest.Sink = (*Page)(nil)
var _ http.Handler = (*Page)(nil)

// Observe keeps a copy of the workflow run of l. It is safe to call from
// several goroutines (serve's pipelines), and it holds the lock only for
// copying one run's bounded share.
func (p *Page) Observe(l ingest.Lifecycle) {
	r := l.Run
	if r == nil || !r.Workflow {
		return
	}
	switch l.Kind {
	case ingest.RunStarted, ingest.RunUpdated, ingest.RunFinished, ingest.RunFinalized, ingest.AgentStarted, ingest.AgentEnded, ingest.ModelCallSeen,
		ingest.RunStalled, ingest.RunResumed, ingest.AgentStalled, ingest.AgentResumed:
	default:
		return // violations and interrupts may name a run already gone
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.open[r]
	if e == nil && r.Finalized && l.Kind != ingest.RunFinalized {
		return
	}
	switch {
	case e != nil && (l.Kind == ingest.AgentStarted || l.Kind == ingest.AgentEnded || l.Kind == ingest.ModelCallSeen ||
		l.Kind == ingest.AgentStalled || l.Kind == ingest.AgentResumed) && l.Agent != nil:
		e.agent(r, l.Agent)
	case e != nil:
		e.copyRun(r)
	default:
		p.seq++
		e = &entry{seq: p.seq}
		e.copyRun(r)
		p.open[r] = e
		p.dropOverflow()
	}
	if l.Kind == ingest.RunFinalized {
		e.cost = p.base.Run(&e.run)
		delete(p.open, r)
		p.finished++
		if len(p.done) == p.opts.Runs {
			p.done[0] = nil
			p.done = p.done[1:]
		}
		p.done = append(p.done, e)
	}
}

// dropOverflow forgets the oldest open runs beyond opts.Open.
func (p *Page) dropOverflow() {
	for len(p.open) > p.opts.Open {
		var oldest *ingest.Run
		for k, e := range p.open {
			if oldest == nil || e.seq < p.open[oldest].seq {
				oldest = k
			}
		}
		delete(p.open, oldest)
		p.dropped++
	}
}

// copyRun replaces e's copy by a fresh one of r (new slices: any a
// request holds stay as they were).
func (e *entry) copyRun(r *ingest.Run) {
	old := e.run
	e.run = keepRun(&old, r)
	n := min(len(r.Agents), MaxAgents)
	e.run.Agents = make([]ingest.Agent, n)
	for i := range n {
		var prev *ingest.Agent
		if i < len(old.Agents) && old.Agents[i].Index == r.Agents[i].Index {
			prev = &old.Agents[i]
		}
		e.run.Agents[i] = keepAgent(prev, &r.Agents[i])
	}
	e.hiddenAgents, e.hiddenPhases = len(r.Agents)-n, len(r.Phases)-len(e.run.Phases)
	e.shared = false
}

// agent updates one agent of e (and the run's fields and phases, which
// are few): a started or ended agent needs no copy of all the others.
func (e *entry) agent(r *ingest.Run, a *ingest.Agent) {
	agents := e.run.Agents
	if e.shared {
		agents = slices.Clone(agents)
	}
	old := e.run
	e.run = keepRun(&old, r)
	i, found := slices.BinarySearchFunc(agents, a.Index, func(x ingest.Agent, idx int) int { return cmp.Compare(x.Index, idx) })
	switch {
	case found:
		agents[i] = keepAgent(&agents[i], a)
	case len(agents) < MaxAgents:
		agents = slices.Insert(agents, i, keepAgent(nil, a))
	}
	e.run.Agents = agents
	e.hiddenAgents, e.hiddenPhases = max(0, len(r.Agents)-len(agents)), len(r.Phases)-len(e.run.Phases)
	e.shared = false
}

// keepRun copies what the page shows of r, its phases included (not its
// agents). Strings are copied, or reused from old when equal: a string of
// the Tracker may be a slice of a whole (and big) line, which the page
// must not keep alive.
func keepRun(old, r *ingest.Run) ingest.Run {
	c := ingest.Run{
		TaskID: keep(old.TaskID, r.TaskID), RunID: keep(old.RunID, r.RunID), SessionID: keep(old.SessionID, r.SessionID),
		Workflow: r.Workflow, Name: keep(old.Name, r.Name), Status: r.Status, Reason: keep(old.Reason, r.Reason),
		Error: keep(old.Error, r.Error), FirstSeen: r.FirstSeen, StartedAt: r.StartedAt, LastSeen: r.LastSeen,
		Start: r.Start, End: r.End, Usage: r.Usage, InterruptLatencyMs: r.InterruptLatencyMs,
		Finished: r.Finished, Finalized: r.Finalized, Cost: costTotal(&r.Cost), Stalled: r.Stalled, Stalls: r.Stalls,
		SpawnDepth: r.SpawnDepth, AgentsStalled: r.AgentsStalled,
	}
	if p := &r.Parent; p.TaskID != "" {
		c.Parent = ingest.AgentRef{TaskID: keep(old.Parent.TaskID, p.TaskID), Index: p.Index,
			Label: keep(old.Parent.Label, p.Label), Workflow: keep(old.Parent.Workflow, p.Workflow)}
	}
	n := min(len(r.Phases), MaxPhases)
	c.Phases = make([]ingest.Phase, n)
	for i := range n {
		p := r.Phases[i]
		if i < len(old.Phases) {
			p.Title = keep(old.Phases[i].Title, p.Title)
		} else {
			p.Title = strings.Clone(p.Title)
		}
		c.Phases[i] = p
	}
	return c
}

// keepAgent copies what the page shows of a, reusing prev's strings when
// equal (see keepRun).
func keepAgent(prev, a *ingest.Agent) ingest.Agent {
	var p ingest.Agent
	if prev != nil {
		p = *prev
	}
	return ingest.Agent{
		Index: a.Index, Label: keep(p.Label, a.Label), PhaseIndex: a.PhaseIndex, State: a.State, Cached: a.Cached,
		Start: a.Start, End: a.End, EndInferred: a.EndInferred, DurationMs: a.DurationMs, Tokens: a.Tokens,
		Error: keep(p.Error, a.Error), Cost: costTotal(&a.Cost), Stalled: a.Stalled, Stalls: a.Stalls,
	}
}

// costTotal is what the page shows of a cost: the totals, without the
// per-model list, which is the Tracker's slice and would be shared.
func costTotal(c *cost.Sum) cost.Sum {
	return cost.Sum{CostUSD: c.CostUSD, Tokens: c.Tokens, Calls: c.Calls}
}

// keep is s, as old when they are equal, else a copy.
func keep(old, s string) string {
	if old == s {
		return old
	}
	return strings.Clone(s)
}

// snapshot is what one request renders: copies of the entries (their
// slices shared, which the sink then copies before any change). settling
// are the open entries whose run has finished and waits out its grace
// window: they are shown as finished.
type snapshot struct {
	open, settling, done      []entry
	finished, dropped, before uint64
	budget                    func() runcost.Budget
}

// snapshot copies the page's state under the lock: open runs newest
// first, settling runs newest first, then finalized runs newest first.
func (p *Page) snapshot() snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := snapshot{finished: p.finished, dropped: p.dropped, before: p.before, budget: p.budget,
		open: make([]entry, 0, len(p.open)), done: make([]entry, 0, len(p.done))}
	for _, e := range p.open {
		e.shared = true
		e.cost = p.base.Peek(&e.run)
		if e.run.Finished {
			s.settling = append(s.settling, *e)
		} else {
			s.open = append(s.open, *e)
		}
	}
	for i := len(p.done) - 1; i >= 0; i-- {
		s.done = append(s.done, *p.done[i])
	}
	newest := func(a, b entry) int { return cmp.Compare(b.seq, a.seq) }
	slices.SortFunc(s.open, newest)
	slices.SortFunc(s.settling, newest)
	return s
}
