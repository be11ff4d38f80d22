package ingest

import (
	"slices"
	"strings"
	"time"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/internal/fifo"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// DefaultGrace is how long a finished run stays open for late snapshots
// (PROTOCOL.md §6 recommends 5 s: cbc flips in-flight agents to error after
// the stopped notification).
const DefaultGrace = 5 * time.Second

// TrackerOptions configures a Tracker.
type TrackerOptions struct {
	// Grace is the window after a run's notification during which late
	// snapshots still update its agents; 0 (or less) closes it at once.
	// The flags default it to DefaultGrace.
	Grace time.Duration
	// Sinks receive every lifecycle event, in order.
	Sinks []Sink
	// Stats receives violation counts; nil allocates one.
	Stats *Stats
	// Tombstones bounds how many finalized runs are remembered to tell a
	// late event from an unknown task, and how many tasks' last finalized
	// run is remembered for the runs that name it later (a nested run
	// whose launcher ended first, a resume). 0 means 1024.
	Tombstones int
	// Caps bounds the state input can make the Tracker hold.
	Caps Caps
	// StallAfter marks an unfinished workflow run stalled when no event of
	// it came for this long on the Tracker's clock (RunStalled; RunResumed
	// when one comes or the run ends); 0 never does. The flags default it
	// to 10 minutes.
	StallAfter time.Duration
	// AttributeCalls keeps an index of the agents' ids so that HandleCall
	// can attribute the CLI's own model calls to them (run
	// --cli-telemetry.join). Off, every agent call is unmatched.
	AttributeCalls bool
	// MaxSessions bounds the sessions whose cost baseline is remembered
	// (see session.go); 0 means DefaultMaxSessions.
	MaxSessions int
}

// Caps bounds what the Tracker holds, so that no stream (a CLI that never
// closes its runs, a hostile one) grows the process without bound. A zero
// field takes its default. Reaching a cap is counted as an over_capacity
// violation:
//   - Runs, Tasks: beyond them the oldest unfinished workflow run (plain
//     task) is given up: it ends abandoned at its last seen time and is
//     finalized at once, so that the new run, the likelier to be live, is
//     tracked;
//   - Agents, Phases: entries of a snapshot that would add more to a run
//     are ignored (one count per snapshot);
//   - Grace: beyond it the finished run that has waited longest for late
//     snapshots is finalized early.
type Caps struct {
	Runs   int // unfinished workflow runs; default DefaultCaps.Runs
	Tasks  int // unfinished plain tasks
	Agents int // agents per run
	Phases int // phases per run
	Grace  int // finished runs inside their grace window
}

// DefaultCaps returns the caps a zero Caps field takes. A workflow has
// dozens of agents and a session a handful of runs at once; these are
// orders of magnitude above that and keep the Tracker's state within a few
// MiB.
func DefaultCaps() Caps {
	return Caps{Runs: 256, Tasks: 256, Agents: 2000, Phases: 200, Grace: 256}
}

func (c Caps) withDefaults() Caps {
	d := DefaultCaps()
	for _, f := range []struct{ v, d *int }{{&c.Runs, &d.Runs}, {&c.Tasks, &d.Tasks}, {&c.Agents, &d.Agents}, {&c.Phases, &d.Phases}, {&c.Grace, &d.Grace}} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	return c
}

type runKey struct{ task, run string }

// runQueue is a FIFO of runs with a moving head, so that finding the
// oldest unfinished run costs amortized O(1) however many were given up.
type runQueue struct {
	runs []*Run
	head int
}

// push adds r. The finished runs at the front are dropped first (runs
// mostly finish in order); those that finished behind an older open one
// are dropped now and then: the queue holds at most about twice its open
// runs, and no finished run's state is kept alive by it for long (serve
// multiplies what one queue holds by its streams: a floor of 64 here held
// ~11 MB of finished runs with 256 busy streams).
func (q *runQueue) push(r *Run, open int) {
	q.trim()
	if live := len(q.runs) - q.head; live > 2*open+8 {
		n := 0
		for _, x := range q.runs[q.head:] {
			if !x.Finished {
				q.runs[n] = x
				n++
			}
		}
		clear(q.runs[n:])
		q.runs, q.head = q.runs[:n], 0
	}
	q.runs = append(q.runs, r)
}

// oldest returns the oldest run still unfinished, dropping finished ones
// from the front.
func (q *runQueue) oldest() *Run {
	q.trim()
	if q.head < len(q.runs) {
		return q.runs[q.head]
	}
	return nil
}

// trim drops the finished runs at the front.
func (q *runQueue) trim() {
	for q.head < len(q.runs) && q.runs[q.head].Finished {
		q.runs[q.head] = nil
		q.head++
	}
	switch {
	case q.head == len(q.runs):
		q.runs, q.head = q.runs[:0], 0 // every slot is nil already
	case q.head > 64 && q.head > len(q.runs)/2:
		n := copy(q.runs, q.runs[q.head:])
		clear(q.runs[n:])
		q.runs, q.head = q.runs[:n], 0
	}
}

// Tracker reconstructs workflow runs from decoded events. It is not safe for
// concurrent use: one goroutine feeds it (see Pipeline).
//
// Clock: every call takes now, the caller's notion of the current time in
// epoch ms. A live pipeline passes the wall clock; a replay passes the
// largest timestamp seen in the stream, so that grace windows close at the
// same points in both. Times of runs, phases and agents are decided here,
// once, and every output reads them (see Run.Start and Agent.Start).
type Tracker struct {
	grace      int64
	caps       Caps
	sinks      []Sink
	stats      *Stats
	byTask     map[string][]*Run // unfinalized runs per task id, oldest first
	open       []*Run            // unfinalized runs in order of appearance
	graceQ     []*Run            // finished runs by grace deadline
	pendingQ   []*Run            // adopted runs whose RunStarted is held back
	unfinished [2]runQueue       // unfinished plain tasks [0] and workflow runs [1], oldest first
	counts     [2]int            // how many of each are unfinished
	tombs      map[runKey]bool   // finalized runs: whether the run had its notification
	tombOrder  []runKey
	maxTombs   int
	ended      *fifo.Map[string, AgentRef] // finalized runs a later run may name (nested.go)
	now        int64
	finalizedN int
	capHit     bool // a cap refused part of the snapshot being merged
	resent     bool // the snapshot being merged is a resent one (agentRow)
	calls      callIndex
	stallAfter int64 // ms; 0: off
	stallCheck int64 // the clock at the last stall check
	sess       cost.Sessions

	// latestRun is the largest run id seen of each task (olderRun), in
	// latestOrder, bounded by maxLatestRuns; made when first needed.
	latestRun   map[string]string
	latestOrder []string
}

// NewTracker returns a Tracker.
func NewTracker(opts TrackerOptions) *Tracker {
	g := max(opts.Grace, 0)
	st := opts.Stats
	if st == nil {
		st = new(Stats)
	}
	mt := opts.Tombstones
	if mt <= 0 {
		mt = 1024
	}
	t := &Tracker{
		grace:    g.Milliseconds(),
		caps:     opts.Caps.withDefaults(),
		sinks:    opts.Sinks,
		stats:    st,
		byTask:   make(map[string][]*Run),
		tombs:    make(map[runKey]bool),
		maxTombs: mt,
		ended:    fifo.New[string, AgentRef](mt),
		sess:     cost.NewSessions(opts.MaxSessions),
	}
	if opts.AttributeCalls {
		t.calls.init()
	}
	t.stallAfter = max(opts.StallAfter, 0).Milliseconds()
	return t
}

// Stats returns the tracker's counters.
func (t *Tracker) Stats() *Stats { return t.stats }

// Open returns the runs not yet finalized, in order of appearance. The
// pointers are the Tracker's own: read them only from its goroutine.
func (t *Tracker) Open() []*Run {
	out := make([]*Run, 0, len(t.open))
	for _, r := range t.open {
		if !r.Finalized {
			out = append(out, r)
		}
	}
	return out
}

func (t *Tracker) emit(l Lifecycle) {
	if l.Run != nil && l.Run.pending() && l.Kind != ViolationSeen {
		return // announce replays what the sinks need
	}
	l.At = t.now
	for _, s := range t.sinks {
		s.Observe(l)
	}
}

func (t *Tracker) violation(v Violation, r *Run) {
	t.violations(v, r, 1)
}

func (t *Tracker) violations(v Violation, r *Run, n int) {
	for range n {
		t.stats.violations[v].Add(1)
		t.emit(Lifecycle{Kind: ViolationSeen, Violation: v, Run: r})
	}
}

func (t *Tracker) tick(now int64) {
	if now > t.now {
		t.now = now
	}
}

// Advance moves the clock to now, announces the adopted runs whose wait for
// their task_started is over, and finalizes the runs whose grace window has
// closed.
func (t *Tracker) Advance(now int64) {
	t.tick(now)
	if len(t.pendingQ) > 0 {
		n := 0
		for _, r := range t.pendingQ {
			if !r.pending() {
				n++
				continue
			}
			if r.announceBy > t.now {
				break
			}
			t.announce(r)
			n++
		}
		t.pendingQ = append(t.pendingQ[:0], t.pendingQ[n:]...)
	}
	t.expireCalls(false)
	t.checkStalls()
	n := 0
	for _, r := range t.graceQ {
		if r.Finalized {
			n++
			continue
		}
		if r.graceEnd > t.now {
			break
		}
		t.finalize(r)
		n++
	}
	if n > 0 {
		t.graceQ = append(t.graceQ[:0], t.graceQ[n:]...)
	}
}

// Handle applies one event at time now.
func (t *Tracker) Handle(ev *streamjson.Event, now int64) {
	t.Advance(now)
	t.stats.events.Add(1)
	if ev.Resent && t.sameState(ev) {
		return
	}
	at := t.eventTime(ev)
	t.violations(ViolationBadField, nil, ev.BadFields)
	t.violations(ViolationBadEntry, nil, ev.BadEntries)
	switch ev.Kind {
	case streamjson.KindTaskStarted:
		t.started(ev, at)
	case streamjson.KindTaskProgress:
		t.progress(ev, at)
	case streamjson.KindTaskUpdated:
		t.updated(ev, at)
	case streamjson.KindTaskNotification:
		t.notified(ev, at)
	case streamjson.KindControlRequest:
		if ev.Source == tap.SourceStdin { // requests only travel to the CLI
			t.control(ev)
		}
	case streamjson.KindResult:
		t.result(ev)
	}
}

// eventTime is the event's own time, its written_at, or 0. Arrival is not
// used here: a line's arrival is only as good as the reader's lag (a
// sidecar catching up on a file reads hours late), it cannot be had in a
// replay, and a simulator's clock need not be the wall clock. Without
// written_at a run's times come from the stream's other times (fixTimes),
// so a replay equals the live run; the Tracker's clock is the fallback.
func (t *Tracker) eventTime(ev *streamjson.Event) int64 {
	if ev.WrittenAt == 0 {
		return 0
	}
	if !streamjson.Plausible(ev.WrittenAt) {
		t.violation(ViolationBadTime, nil)
		return 0
	}
	return ev.WrittenAt
}

// Close ends the stream at time now: runs without a notification are
// abandoned, and every run is finalized (no late snapshot can come).
func (t *Tracker) Close(now int64) {
	t.tick(now)
	t.expireCalls(true) // no snapshot can name their agents any more
	// finalize compacts t.open, so walk a copy.
	open := slices.Clone(t.open)
	for _, r := range open {
		if r.Finished || r.Finalized {
			continue
		}
		t.abandon(r)
	}
	for _, r := range open {
		if !r.Finalized {
			t.finalize(r)
		}
	}
	t.open = t.open[:0]
	t.graceQ = t.graceQ[:0]
	t.pendingQ = t.pendingQ[:0]
}

// abandon ends a run whose notification will never come: it lasted until
// the last time it showed. The caller finalizes it at once.
func (t *Tracker) abandon(r *Run) {
	r.Status = StatusAbandoned
	t.dropEndBeforeStart(r)
	if r.End == 0 {
		r.End = r.LastSeen // its own times only; else the clock
	}
	if r.End == 0 {
		r.End = t.now
	}
	t.finish(r, false)
}

// seen advances r.LastSeen to at.
func seen(r *Run, at int64) {
	if at > r.LastSeen {
		r.LastSeen = at
	}
}

// lookup finds the unfinalized run an event is about. late reports that the
// run existed but was finalized already.
func (t *Tracker) lookup(ev *streamjson.Event) (r *Run, late bool) {
	runs := t.byTask[ev.TaskID]
	if ev.RunID != "" {
		for i := len(runs) - 1; i >= 0; i-- {
			if runs[i].RunID == ev.RunID {
				return runs[i], false
			}
		}
	} else if len(runs) > 0 {
		return runs[len(runs)-1], false
	}
	_, late = t.tombs[runKey{ev.TaskID, ev.RunID}]
	return nil, late || t.olderRun(ev.TaskID, ev.RunID)
}

func (t *Tracker) started(ev *streamjson.Event, at int64) {
	if r, late := t.lookup(ev); r != nil && (ev.RunID == "" || r.RunID == ev.RunID) {
		if r.Adopted {
			// The run was adopted from a snapshot that came first: this is
			// its identity, not a second start. Once announced, its name
			// is the label its metrics were counted under: it stays, so
			// that every output names the run alike.
			t.violation(ViolationStartAfterProgress, r)
			name := r.Name
			t.identify(r, ev, at)
			if r.pending() {
				t.announce(r)
			} else {
				r.Name = name
			}
			return
		}
		t.violation(ViolationDuplicateStart, r)
		return
	} else if late {
		t.violation(ViolationLateEvent, nil)
		return
	}
	workflow := ev.TaskType == "local_workflow"
	r := t.newRun(ev, workflow)
	t.identify(r, ev, at)
	if r.Workflow {
		t.emit(Lifecycle{Kind: RunStarted, Run: r})
	} else {
		t.emit(Lifecycle{Kind: TaskStarted, Run: r})
	}
}

// identify sets what a task_started says of its run; at is its own time
// (0 if none).
func (t *Tracker) identify(r *Run, ev *streamjson.Event, at int64) {
	r.Adopted = false
	r.TaskType = ev.TaskType
	r.Name = ev.WorkflowName
	r.Description = ev.Description
	if r.SessionID == "" {
		r.SessionID = ev.SessionID
	}
	if r.ToolUseID == "" {
		r.ToolUseID = ev.ToolUseID
	}
	r.StartedAt = at
	seen(r, at)
	t.touch(r)
	t.nest(r, ev) // parent_task_id, spawn_depth, a resume

}

func (t *Tracker) newRun(ev *streamjson.Event, workflow bool) *Run {
	kind := 0
	if workflow {
		kind = 1
	}
	limit := t.caps.Tasks
	if workflow {
		limit = t.caps.Runs
	}
	for t.counts[kind] >= limit {
		old := t.unfinished[kind].oldest()
		if old == nil {
			break
		}
		// Give up the oldest: it is the likeliest never to end.
		t.violation(ViolationOverCapacity, old)
		t.abandon(old)
		t.finalize(old)
	}
	r := &Run{
		TaskID:             ev.TaskID,
		RunID:              ev.RunID,
		SessionID:          ev.SessionID,
		ToolUseID:          ev.ToolUseID,
		Workflow:           workflow,
		FirstSeen:          t.now,
		InterruptLatencyMs: -1,
	}
	t.byTask[r.TaskID] = append(t.byTask[r.TaskID], r)
	t.noteRun(r.TaskID, r.RunID)
	t.open = append(t.open, r)
	t.unfinished[kind].push(r, t.counts[kind])
	t.counts[kind]++
	return r
}

// adopt makes a run of a workflow snapshot for a task never seen starting
// (a follower that joined mid-stream, or a task_started written after its
// first progress). Its RunStarted waits for the task_started, the run's
// end or one grace window, whichever comes first, so that a late
// task_started still names the run before any sink labels it.
func (t *Tracker) adopt(ev *streamjson.Event) *Run {
	r := t.newRun(ev, true)
	r.TaskType = "local_workflow"
	r.Adopted = true
	r.announceBy = t.now + max(t.grace, 1)
	t.pendingQ = append(t.pendingQ, r)
	return r
}

// announce emits an adopted run's RunStarted and what its agents did
// meanwhile.
func (t *Tracker) announce(r *Run) {
	r.announceBy = 0
	t.emit(Lifecycle{Kind: RunStarted, Run: r})
	for i := range r.Agents {
		a := &r.Agents[i]
		if a.Start > 0 && !a.startSent {
			a.startSent = true
			t.emit(Lifecycle{Kind: AgentStarted, Run: r, Agent: a})
		}
		if a.State.Final() && !a.endSent {
			a.endSent = true
			t.emit(Lifecycle{Kind: AgentEnded, Run: r, Agent: a})
		}
	}
}

func (t *Tracker) progress(ev *streamjson.Event, at int64) {
	r, late := t.lookup(ev)
	if r == nil {
		if late {
			t.violation(ViolationLateEvent, nil)
			return
		}
		t.violation(ViolationUnknownTask, nil)
		if !ev.HasProgress {
			return
		}
		// A workflow snapshot for a task we never saw start: adopt it
		// rather than lose the run.
		r = t.adopt(ev)
	}
	seen(r, at)
	t.touch(r)
	if r.SessionID == "" {
		r.SessionID = ev.SessionID
	}
	if ev.HasUsage && !r.Finished {
		r.Usage = mergeUsage(r.Usage, ev.Usage)
	}
	if !ev.HasProgress || !r.Workflow {
		// A usage-only tick must not wipe the snapshot; a plain task has
		// no phases or agents of its own.
		return
	}
	t.mergeSnapshot(r, ev)
}

// mergeSnapshot merges a workflow snapshot, of a task_progress or the
// final one a task_notification carries, into r's phases and agents.
func (t *Tracker) mergeSnapshot(r *Run, ev *streamjson.Event) {
	// Elements the decoder did not read (beyond what a run may keep) count
	// with the ones the caps refuse here: once per snapshot.
	t.capHit = ev.ElementsOverCap > 0
	t.resent = ev.Resent
	// A snapshot lists every agent so far: room for as many as it has
	// agent elements (up to the cap) at once, not one doubling per new
	// agent (a quarter of replay's allocated bytes were those copies).
	// Phase elements are not counted: room for them too was a third of
	// the agents' bytes that serve holds for runs in their grace window.
	agents, phases := 0, 0
	for i := range ev.Entries {
		if !ev.Entries[i].Phase {
			agents++
		} else {
			phases++
		}
	}
	if n := min(agents, t.caps.Agents); n > cap(r.Agents) {
		r.Agents = slices.Grow(r.Agents, n-len(r.Agents))
	}
	// Likewise the phases: room for the snapshot's at once (one
	// slices.Insert growth per new phase was 7 % of replay's allocations).
	if n := min(phases, t.caps.Phases); n > cap(r.Phases) {
		r.Phases = slices.Grow(r.Phases, n-len(r.Phases))
	}
	for i := range ev.Entries {
		e := &ev.Entries[i]
		var ok bool
		if e.Phase {
			ok = t.mergePhase(r, e)
		} else {
			ok = t.mergeAgent(r, e)
		}
		t.capHit = t.capHit || !ok
	}
	if t.capHit {
		t.violation(ViolationOverCapacity, r)
	}
}

// mergePhase merges a phase entry; false when the run's phase cap refused
// it.
func (t *Tracker) mergePhase(r *Run, e *streamjson.Entry) bool {
	i, found := slices.BinarySearchFunc(r.Phases, e.Index, func(p Phase, idx int) int { return p.Index - idx })
	if found {
		if e.Title != "" {
			r.Phases[i].Title = e.Title
		}
		r.Phases[i].Child = r.Phases[i].Child || e.Child
		return true
	}
	if len(r.Phases) >= t.caps.Phases {
		return false
	}
	r.Phases = slices.Insert(r.Phases, i, Phase{Index: e.Index, Title: e.Title, Child: e.Child})
	return true
}

// entryTime returns v when it is a plausible epoch-ms time; an implausible
// one is counted and reads as unknown.
func (t *Tracker) entryTime(v int64, r *Run) int64 {
	if v == 0 || streamjson.Plausible(v) {
		return v
	}
	t.violation(ViolationBadTime, r)
	return 0
}

// runEnd returns v, a candidate end of run r (an end_time, the
// notification's written_at), when it is usable: a plausible time not
// before the run's own start, its task_started's written_at. Any other is
// counted as bad_time and reads as unknown, so that the next best time is
// taken. (Without a written_at the run's start is derived from its end and
// agents: nothing to hold the end against.)
func (t *Tracker) runEnd(r *Run, v int64) int64 {
	if v = t.entryTime(v, r); v > 0 && v < r.StartedAt {
		t.violation(ViolationBadTime, r)
		return 0
	}
	return v
}

// dropEndBeforeStart drops an end_time taken before the run's start was
// known (a task_started that came after the update) that lies before it.
func (t *Tracker) dropEndBeforeStart(r *Run) {
	if r.End > 0 && r.End < r.StartedAt {
		t.violation(ViolationBadTime, r)
		r.End = 0
	}
}

// mergeAgent merges an agent entry; false when the run's agent cap refused
// it.
func (t *Tracker) mergeAgent(r *Run, e *streamjson.Entry) bool {
	st, ok := parseAgentState(e)
	if !ok {
		// A spelling the protocol does not define: counted, and read as
		// live (additive evolution adds states, it does not end agents).
		t.violation(ViolationUnknownStatus, r)
		st = AgentQueued
		if e.StartedAt > 0 {
			st = AgentRunning
		}
	}
	a := r.agent(e.Index)
	if a == nil {
		if len(r.Agents) >= t.caps.Agents {
			return false
		}
		a = r.insertAgent(e.Index)
	}
	if !st.Final() && e.EndedWithRun {
		// The run's outcome (whatever its spelling) ended the agent while
		// it was live: the stream says how it ended, so it is not left to
		// be abandoned, nor charged as missing its terminal state. One
		// that started ended in error, as the CLI's own stop flips say;
		// one never started is not_started.
		st = AgentNotStarted
		if e.StartedAt > 0 || a.Start > 0 {
			st = AgentError
		}
	}
	// Identity fills in as it appears (agentId arrives when a queued agent
	// starts); it never becomes empty again.
	if e.AgentID != "" {
		a.AgentID = e.AgentID
	}
	if e.Label != "" {
		a.Label = e.Label
	}
	if e.PhaseIndex != 0 && e.PhaseIndex != a.PhaseIndex {
		// The phase an agent names exists as soon as the agent does, so
		// that its span always has a parent; beyond the phase cap the
		// agent hangs off the workflow instead.
		if r.phase(e.PhaseIndex) == nil && !t.mergePhase(r, &streamjson.Entry{Phase: true, Index: e.PhaseIndex, Title: e.PhaseTitle}) {
			t.capHit = true
		} else {
			a.PhaseIndex = e.PhaseIndex
		}
	}
	if e.PhaseTitle != "" {
		a.PhaseTitle = e.PhaseTitle
	}
	if a.State.Final() {
		// Final states are final: a later snapshot can neither revive the
		// agent nor change how it ended.
		if st != a.State {
			t.violation(ViolationAgentRegression, r)
		}
		return true
	}
	if st < a.State { // running → queued
		t.violation(ViolationAgentRegression, r)
		st = a.State
	}
	queued, started := t.entryTime(e.QueuedAt, r), t.entryTime(e.StartedAt, r)
	t.agentRow(r, a, e, started, t.resent)
	if queued > 0 {
		a.QueuedAt = queued
	}
	if started > 0 {
		a.Start = started
	}
	seen(r, max(a.QueuedAt, a.Start))
	a.DurationMs = e.DurationMs
	a.Tokens = e.Tokens
	a.ToolCalls = e.ToolCalls
	if e.Error != streamjson.RedactedError || a.Error == "" {
		a.Error = e.Error // the CLI's redaction does not hide a text seen before
	}
	a.ResultPreview = e.ResultPreview
	a.PromptPreview = e.PromptPreview
	a.State = st
	a.Cached = st == AgentCached
	t.indexAgent(r, a)
	if st.Final() {
		a.End = t.agentEnd(r, a, e)
		seen(r, a.End)
	}
	if a.Start > 0 && !a.startSent && !r.pending() {
		a.startSent = true
		t.emit(Lifecycle{Kind: AgentStarted, Run: r, Agent: a})
	}
	if st.Final() {
		t.unstallAgent(r, a)
	}
	if st.Final() && !r.pending() {
		a.endSent = true
		t.emit(Lifecycle{Kind: AgentEnded, Run: r, Agent: a})
	}
	return true
}

// agentEnd is an ended agent's end: endedAt, else startedAt + durationMs;
// an implausible end or one before the start is counted and not used (0:
// the run's end stands in at finalize).
func (t *Tracker) agentEnd(r *Run, a *Agent, e *streamjson.Entry) int64 {
	if end := t.entryTime(e.EndedAt, r); end > 0 {
		if a.Start == 0 || end >= a.Start {
			return end
		}
		t.violation(ViolationBadTime, r)
	}
	if a.Start > 0 && e.DurationMs > 0 && streamjson.Plausible(a.Start+e.DurationMs) {
		return a.Start + e.DurationMs
	}
	return 0
}

func (t *Tracker) updated(ev *streamjson.Event, at int64) {
	r, late := t.lookup(ev)
	if r == nil {
		if late {
			t.violation(ViolationLateEvent, nil)
		} else {
			t.violation(ViolationUnknownTask, nil)
		}
		return
	}
	seen(r, at)
	t.touch(r)
	if ev.PatchStatus != "" {
		if _, ok := MapStatus(ev.PatchStatus); !ok {
			t.violation(ViolationUnknownStatus, r)
		}
	}
	if r.Finished {
		// The notification is authoritative and the run's times are fixed.
		t.violation(ViolationUpdateAfterNotification, r)
		return
	}
	if ev.PatchStatus != "" {
		r.PatchStatus = ev.PatchStatus
	}
	if end := t.runEnd(r, ev.PatchEndTime); end > 0 {
		r.End = end
		seen(r, end)
	}
	if ev.PatchError != "" {
		r.Error = ev.PatchError
	}
	t.emit(Lifecycle{Kind: RunUpdated, Run: r})
}

func (t *Tracker) notified(ev *streamjson.Event, at int64) {
	r, late := t.lookup(ev)
	if r == nil {
		switch {
		case late && t.tombs[runKey{ev.TaskID, ev.RunID}]:
			// Its grace window closed already: the second one of a run.
			t.violation(ViolationDuplicateNotify, nil)
			return
		case late:
			// The run was given up (a cap), or a later run of its task
			// opened, before its notification came.
			t.violation(ViolationLateEvent, nil)
			return
		default:
			t.violation(ViolationUnknownTask, nil)
			if !ev.HasProgress {
				return
			}
			// Its final snapshot is all there is of the run: adopted, as
			// a task_progress's would be, and ended here.
			r = t.adopt(ev)
		}
	}
	if r.Finished {
		t.violation(ViolationDuplicateNotify, r)
		return
	}
	seen(r, at)
	t.touch(r)
	if ev.HasProgress && r.Workflow {
		// The run's final snapshot, applied like any other before the
		// terminal status is taken: agents that reach a final state only
		// here are not missing it.
		t.mergeSnapshot(r, ev)
	}
	st, ok := MapStatus(ev.Status)
	if !ok || st == StatusRunning {
		t.violation(ViolationUnknownStatus, r)
		st = StatusFailed
	}
	if r.PatchStatus != "" {
		if ps, ok := MapStatus(r.PatchStatus); ok && ps != StatusRunning && ps != st {
			t.violation(ViolationStatusConflict, r)
		}
	}
	r.Status = st
	r.Reason = ev.Reason
	if st == StatusStopped && r.Reason == "" && r.budgetInterrupt {
		r.Reason = StopReasonBudget
	}
	r.Summary = ev.Summary
	if ev.HasUsage {
		r.Usage = mergeUsage(r.Usage, ev.Usage)
	}
	t.dropEndBeforeStart(r)
	if r.End == 0 {
		r.End = t.runEnd(r, at)
	}
	if r.End == 0 {
		r.End = t.now
	}
	if r.Workflow && (st == StatusCompleted || st == StatusFailed) {
		// §6: before a completed or failed terminal state every started,
		// non-cached agent has shown a final state.
		for i := range r.Agents {
			if r.Agents[i].State == AgentRunning {
				t.violation(ViolationMissingTerminal, r)
			}
		}
	}
	t.finish(r, true)
	if st == StatusStopped && r.InterruptAt > 0 {
		r.InterruptLatencyMs = max(0, t.now-r.InterruptAt)
		t.emit(Lifecycle{Kind: InterruptMatched, Run: r, LatencyMs: r.InterruptLatencyMs})
	}
}

// finish records the terminal status, fixes the run's times and, with
// grace, opens the grace window (else the caller finalizes the run).
func (t *Tracker) finish(r *Run, grace bool) {
	t.unstall(r)
	t.unstallAgents(r)
	r.Finished = true
	kind := 0
	if r.Workflow {
		kind = 1
	}
	t.counts[kind]--
	fixTimes(r)
	if r.pending() {
		t.announce(r)
	}
	if r.Workflow {
		t.emit(Lifecycle{Kind: RunFinished, Run: r})
	} else {
		t.emit(Lifecycle{Kind: TaskEnded, Run: r})
	}
	if !grace {
		return
	}
	r.graceEnd = t.now + t.grace
	t.graceQ = append(t.graceQ, r)
	for len(t.graceQ) > t.caps.Grace {
		old := t.graceQ[0]
		t.graceQ = t.graceQ[1:]
		if !old.Finalized {
			t.violation(ViolationOverCapacity, old)
			t.finalize(old)
		}
	}
}

// fixTimes decides a finished run's Start and End. The run starts when its
// task_started was written (written_at); without that, at the smaller of
// end − usage.duration_ms and the earliest agent time (both lower bounds of
// the truth: the CLI's duration counts from when the script starts), else
// when it was first seen. Then the pair is
// widened to enclose every agent time seen, so no agent lies outside its
// run. It runs at finish and again at finalize, where it can only widen
// the pair for what the grace window brought.
func fixTimes(r *Run) {
	s := r.Start // set at finish: the finalize pass only widens
	if s == 0 {
		s = r.StartedAt
	}
	if s == 0 {
		if d := r.End - r.Usage.DurationMs; r.End > 0 && r.Usage.DurationMs > 0 && streamjson.Plausible(d) {
			s = d
		}
		for i := range r.Agents {
			s = earliest(s, r.Agents[i].QueuedAt, r.Agents[i].Start)
		}
	}
	if s == 0 {
		s = r.FirstSeen
	}
	e := r.End
	for i := range r.Agents {
		a := &r.Agents[i]
		s = earliest(s, a.QueuedAt, a.Start)
		e = max(e, a.Start, a.End)
	}
	if s == 0 {
		s = e
	}
	r.Start, r.End = s, max(e, s)
}

// earliest returns the smallest of s and the known (non-zero) times t.
func earliest(s int64, t ...int64) int64 {
	for _, v := range t {
		if v > 0 && (s == 0 || v < s) {
			s = v
		}
	}
	return s
}

// clampAgent keeps an agent's times inside its run's.
func clampAgent(r *Run, a *Agent) {
	if a.Start != 0 {
		a.Start = min(max(a.Start, r.Start), r.End)
	}
	if a.End != 0 {
		a.End = min(max(a.End, a.Start, r.Start), r.End)
	}
}

// finalize closes a run: agents that never ended become abandoned (started)
// or not_started (queued), every agent and phase gets its times on the run's
// clock, and the run is forgotten but for a tombstone.
func (t *Tracker) finalize(r *Run) {
	for i := range r.Agents {
		a := &r.Agents[i]
		if a.State.Final() {
			continue
		}
		if a.State == AgentRunning {
			a.State = AgentAbandoned
		} else {
			a.State = AgentNotStarted
		}
		settleAgent(r, a)
		a.endSent = true
		t.emit(Lifecycle{Kind: AgentEnded, Run: r, Agent: a})
	}
	fixTimes(r) // the grace window may have brought agent times beyond the run's
	for i := range r.Agents {
		settleAgent(r, &r.Agents[i])
	}
	derivePhases(r, t.caps.Phases)
	r.Finalized = true
	t.emit(Lifecycle{Kind: RunFinalized, Run: r})
	t.forget(r)
}

// settleAgent gives an agent of a finished run both its times. One that
// never ran (not_started, cached without times) is a zero-length interval
// at its queue time, else at the run's start (cached) or end (not_started:
// when it was given up). One that started and has no end (abandoned, or
// flipped to error by a stop without endedAt) ends with the run, marked
// EndInferred.
func settleAgent(r *Run, a *Agent) {
	never := a.State == AgentNotStarted || (a.State == AgentCached && a.Start == 0)
	if a.Start == 0 {
		switch {
		case never && a.QueuedAt > 0:
			a.Start = a.QueuedAt
		case a.State == AgentNotStarted:
			a.Start = r.End
		default:
			a.Start = r.Start
		}
	}
	if a.End == 0 {
		if never {
			a.End = a.Start
		} else {
			a.End = r.End
			a.EndInferred = true
		}
	}
	clampAgent(r, a)
}

func (t *Tracker) forget(r *Run) {
	t.unindexRun(r)
	runs := t.byTask[r.TaskID]
	for i, x := range runs {
		if x == r {
			runs = append(runs[:i], runs[i+1:]...)
			break
		}
	}
	if len(runs) == 0 {
		delete(t.byTask, r.TaskID)
	} else {
		t.byTask[r.TaskID] = runs
	}
	t.rememberEnded(r)
	k := runKey{r.TaskID, r.RunID}
	if _, ok := t.tombs[k]; !ok {
		// Only a run given up (a cap, the stream's end) is abandoned: any
		// other had its notification.
		t.tombs[k] = r.Status != StatusAbandoned
		t.tombOrder = append(t.tombOrder, k)
		if len(t.tombOrder) > t.maxTombs {
			delete(t.tombs, t.tombOrder[0])
			t.tombOrder = t.tombOrder[1:]
		}
	}
	// A finalized run (its agents, phases, strings) must not stay alive in
	// the open list: serve multiplies what one list holds by its streams
	// (a floor of 64 finalized runs here held ~10,000 runs, ~20 MB of
	// heap, with 256 busy streams). Runs mostly end in the order they
	// began: those at the front go at once; the others when half of the
	// list is finalized (amortized O(1) per run).
	t.finalizedN++
	front := 0
	for front < len(t.open) && t.open[front].Finalized {
		t.open[front] = nil
		front++
	}
	t.open = t.open[front:]
	t.finalizedN = max(t.finalizedN-front, 0)
	if t.finalizedN > len(t.open)/2 {
		n := 0
		for _, x := range t.open {
			if !x.Finalized {
				t.open[n] = x
				n++
			}
		}
		clear(t.open[n:])
		t.open = t.open[:n]
		t.finalizedN = 0
	}
}

// derivePhases makes sure every phase an agent names exists (within the
// cap of maxPhases) and gives each phase the span of its agents, as
// settled; a phase no agent reached is a zero-length interval at the run's
// end.
func derivePhases(r *Run, maxPhases int) {
	for i := range r.Agents {
		a := &r.Agents[i]
		if a.PhaseIndex == 0 || len(r.Phases) >= maxPhases {
			continue
		}
		j, found := slices.BinarySearchFunc(r.Phases, a.PhaseIndex, func(p Phase, idx int) int { return p.Index - idx })
		if !found {
			r.Phases = slices.Insert(r.Phases, j, Phase{Index: a.PhaseIndex, Title: a.PhaseTitle})
		}
	}
	for i := range r.Phases {
		p := &r.Phases[i]
		p.Start, p.End = 0, 0
		for j := range r.Agents {
			a := &r.Agents[j]
			if a.PhaseIndex != p.Index {
				continue
			}
			if p.Start == 0 || a.Start < p.Start {
				p.Start = a.Start
			}
			p.End = max(p.End, a.End)
		}
		if p.Start == 0 {
			p.Start, p.End = r.End, r.End
		}
	}
}

// control handles control requests seen on stdin: an interrupt targets every
// running workflow of its session (all of them when it names none, as
// Claude Code's SDK sends it); stop_task targets one task.
func (t *Tracker) control(ev *streamjson.Event) {
	switch ev.RequestSubtype {
	case "interrupt":
		for _, r := range t.open {
			if r.Finished || r.InterruptAt != 0 {
				continue
			}
			if ev.SessionID != "" && r.SessionID != "" && r.SessionID != ev.SessionID {
				continue
			}
			r.InterruptAt = t.now
			r.budgetInterrupt = strings.HasPrefix(ev.RequestID, BudgetRequestIDPrefix)
		}
		t.emit(Lifecycle{Kind: InterruptRequested})
	case "stop_task":
		if ev.TaskID == "" {
			return
		}
		runs := t.byTask[ev.TaskID]
		if len(runs) > 0 {
			if r := runs[len(runs)-1]; !r.Finished && r.InterruptAt == 0 {
				r.InterruptAt = t.now
			}
		}
		t.emit(Lifecycle{Kind: InterruptRequested})
	}
}

// mergeUsage merges a usage block into a run's: the newer value of each
// counter wins, except a 0, which is what a bad or missing field reads as.
// The counters are cumulative over the run, so a real 0 only ever comes
// first.
func mergeUsage(old, u streamjson.Usage) streamjson.Usage {
	pick := func(o, n int64) int64 {
		if n == 0 {
			return o
		}
		return n
	}
	return streamjson.Usage{
		TotalTokens: pick(old.TotalTokens, u.TotalTokens),
		ToolUses:    pick(old.ToolUses, u.ToolUses),
		DurationMs:  pick(old.DurationMs, u.DurationMs),
	}
}
