package ingest

import (
	"slices"
	"time"
)

// DefaultGrace is how long a finished run stays open for late snapshots
// (PROTOCOL.md §6 recommends 5 s: cbc flips in-flight agents to error after
// the stopped notification).
const DefaultGrace = 5 * time.Second

// TrackerOptions configures a Tracker.
type TrackerOptions struct {
	// Grace is the window after a run's notification during which late
	// snapshots still update its agents. 0 means DefaultGrace; a negative
	// value closes the window at once.
	Grace time.Duration
	// Sinks receive every lifecycle event, in order.
	Sinks []Sink
	// Stats receives violation counts; nil allocates one.
	Stats *Stats
	// Tombstones bounds how many finalized runs are remembered to tell a
	// late event from an unknown task. 0 means 4096.
	Tombstones int
}

type runKey struct{ task, run string }

// Tracker reconstructs workflow runs from decoded events. It is not safe for
// concurrent use: one goroutine feeds it (see Pipeline).
//
// Clock: every call takes now, the caller's notion of the current time in
// epoch ms. A live pipeline passes the wall clock; a replay passes the
// largest timestamp seen in the stream, so that grace windows close at the
// same points in both.
type Tracker struct {
	grace      int64
	sinks      []Sink
	stats      *Stats
	byTask     map[string][]*Run // unfinalized runs per task id, oldest first
	open       []*Run            // unfinalized runs in order of appearance
	graceQ     []*Run            // finished runs by grace deadline
	tombs      map[runKey]struct{}
	tombOrder  []runKey
	maxTombs   int
	now        int64
	finalizedN int
}

// NewTracker returns a Tracker.
func NewTracker(opts TrackerOptions) *Tracker {
	g := opts.Grace
	if g == 0 {
		g = DefaultGrace
	}
	if g < 0 {
		g = 0
	}
	st := opts.Stats
	if st == nil {
		st = new(Stats)
	}
	mt := opts.Tombstones
	if mt <= 0 {
		mt = 4096
	}
	return &Tracker{
		grace:    g.Milliseconds(),
		sinks:    opts.Sinks,
		stats:    st,
		byTask:   make(map[string][]*Run),
		tombs:    make(map[runKey]struct{}),
		maxTombs: mt,
	}
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
	l.At = t.now
	for _, s := range t.sinks {
		s.Observe(l)
	}
}

func (t *Tracker) violation(v Violation, r *Run) {
	t.stats.violations[v].Add(1)
	t.emit(Lifecycle{Kind: ViolationSeen, Violation: v, Run: r})
}

func (t *Tracker) tick(now int64) {
	if now > t.now {
		t.now = now
	}
}

// Advance moves the clock to now and finalizes the runs whose grace window
// has closed.
func (t *Tracker) Advance(now int64) {
	t.tick(now)
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
func (t *Tracker) Handle(ev *Event, now int64) {
	t.Advance(now)
	t.stats.events.Add(1)
	switch ev.Kind {
	case KindTaskStarted:
		t.started(ev)
	case KindTaskProgress:
		t.progress(ev)
	case KindTaskUpdated:
		t.updated(ev)
	case KindTaskNotification:
		t.notified(ev)
	case KindControlRequest:
		if ev.Source == SourceStdin { // requests only travel to the CLI
			t.control(ev)
		}
	}
}

// Close ends the stream at time now: runs without a notification are
// abandoned, and every run is finalized (no late snapshot can come).
func (t *Tracker) Close(now int64) {
	t.tick(now)
	// finalize compacts t.open, so walk a copy.
	open := slices.Clone(t.open)
	for _, r := range open {
		if r.Finished || r.Finalized {
			continue
		}
		r.Status = StatusAbandoned
		if r.End == 0 {
			r.End = t.lastTime(r)
		}
		t.finish(r)
	}
	for _, r := range open {
		if !r.Finalized {
			t.finalize(r)
		}
	}
	t.open = t.open[:0]
	t.graceQ = t.graceQ[:0]
}

// lastTime is the best end time for a run that never ended: the tracker's
// clock, or the latest time the run itself carries.
func (t *Tracker) lastTime(r *Run) int64 {
	end := t.now
	for i := range r.Agents {
		a := &r.Agents[i]
		end = max(end, a.Start, a.End, a.QueuedAt)
	}
	return end
}

// lookup finds the unfinalized run an event is about. late reports that the
// run existed but was finalized already.
func (t *Tracker) lookup(ev *Event) (r *Run, late bool) {
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
	return nil, late
}

func (t *Tracker) started(ev *Event) {
	if r, late := t.lookup(ev); r != nil && (ev.RunID == "" || r.RunID == ev.RunID) {
		t.violation(ViolationDuplicateStart, r)
		return
	} else if late {
		t.violation(ViolationLateEvent, nil)
		return
	}
	r := t.newRun(ev)
	r.TaskType = ev.TaskType
	r.Workflow = ev.TaskType == "local_workflow"
	r.Name = ev.WorkflowName
	r.Description = ev.Description
	if p := ev.ParentTaskID; p != "" {
		// A parent we never saw is treated as no parent (PROTOCOL.md).
		if _, ok := t.byTask[p]; ok {
			r.ParentTaskID = p
		}
	}
	if r.Workflow {
		t.emit(Lifecycle{Kind: RunStarted, Run: r})
	} else {
		t.emit(Lifecycle{Kind: TaskStarted, Run: r})
	}
}

func (t *Tracker) newRun(ev *Event) *Run {
	r := &Run{
		TaskID:             ev.TaskID,
		RunID:              ev.RunID,
		SessionID:          ev.SessionID,
		ToolUseID:          ev.ToolUseID,
		FirstSeen:          t.now,
		InterruptLatencyMs: -1,
	}
	t.byTask[r.TaskID] = append(t.byTask[r.TaskID], r)
	t.open = append(t.open, r)
	return r
}

func (t *Tracker) progress(ev *Event) {
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
		// A workflow snapshot for a task we never saw start (a follower that
		// joined mid-stream): adopt it rather than lose the run.
		r = t.newRun(ev)
		r.Workflow = true
		r.TaskType = "local_workflow"
		t.emit(Lifecycle{Kind: RunStarted, Run: r})
	}
	if r.SessionID == "" {
		r.SessionID = ev.SessionID
	}
	if ev.HasUsage && !r.Finished {
		r.Usage = ev.Usage
	}
	if !ev.HasProgress || !r.Workflow {
		// A usage-only tick must not wipe the snapshot; a plain task has
		// no phases or agents of its own.
		return
	}
	for i := range ev.Entries {
		e := &ev.Entries[i]
		if e.Phase {
			t.mergePhase(r, e)
		} else {
			t.mergeAgent(r, e)
		}
	}
}

func (t *Tracker) mergePhase(r *Run, e *Entry) {
	if p := r.phase(e.Index); p != nil {
		if e.Title != "" {
			p.Title = e.Title
		}
		return
	}
	r.Phases = append(r.Phases, Phase{Index: e.Index, Title: e.Title})
	slices.SortStableFunc(r.Phases, func(a, b Phase) int { return a.Index - b.Index })
}

func (t *Tracker) mergeAgent(r *Run, e *Entry) {
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
		r.Agents = append(r.Agents, Agent{Index: e.Index, State: AgentQueued})
		if n := len(r.Agents); n > 1 && r.Agents[n-2].Index > e.Index {
			slices.SortStableFunc(r.Agents, func(x, y Agent) int { return x.Index - y.Index })
		}
		a = r.agent(e.Index)
	}
	// Identity fills in as it appears (agentId arrives when a queued agent
	// starts); it never becomes empty again.
	if e.AgentID != "" {
		a.AgentID = e.AgentID
	}
	if e.Label != "" {
		a.Label = e.Label
	}
	if e.PhaseIndex != 0 {
		a.PhaseIndex = e.PhaseIndex
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
		return
	}
	if st < a.State { // running → queued
		t.violation(ViolationAgentRegression, r)
		st = a.State
	}
	if e.QueuedAt > 0 {
		a.QueuedAt = e.QueuedAt
	}
	if e.StartedAt > 0 {
		a.Start = e.StartedAt
	}
	a.DurationMs = e.DurationMs
	a.Tokens = e.Tokens
	a.ToolCalls = e.ToolCalls
	a.Error = e.Error
	a.ResultPreview = e.ResultPreview
	a.PromptPreview = e.PromptPreview
	a.State = st
	a.Cached = st == AgentCached
	if a.Start > 0 && !a.startSent {
		a.startSent = true
		t.emit(Lifecycle{Kind: AgentStarted, Run: r, Agent: a})
	}
	if st.Final() {
		switch {
		case e.EndedAt > 0:
			a.End = e.EndedAt
		case a.Start > 0 && e.DurationMs > 0:
			a.End = a.Start + e.DurationMs
		}
		a.endSent = true
		t.emit(Lifecycle{Kind: AgentEnded, Run: r, Agent: a})
	}
}

func (t *Tracker) updated(ev *Event) {
	r, late := t.lookup(ev)
	if r == nil {
		if late {
			t.violation(ViolationLateEvent, nil)
		} else {
			t.violation(ViolationUnknownTask, nil)
		}
		return
	}
	if ev.PatchStatus != "" {
		if _, ok := MapStatus(ev.PatchStatus); !ok {
			t.violation(ViolationUnknownStatus, r)
		}
	}
	if r.Finished {
		// The notification is authoritative; a later patch may still fill
		// in an end time it lacked.
		t.violation(ViolationUpdateAfterNotification, r)
		return
	}
	if ev.PatchStatus != "" {
		r.PatchStatus = ev.PatchStatus
	}
	if ev.PatchEndTime > 0 {
		r.End = ev.PatchEndTime
	}
	if ev.PatchError != "" {
		r.Error = ev.PatchError
	}
	t.emit(Lifecycle{Kind: RunUpdated, Run: r})
}

func (t *Tracker) notified(ev *Event) {
	r, late := t.lookup(ev)
	if r == nil {
		if late {
			// Its grace window closed already: the second one of a run.
			t.violation(ViolationDuplicateNotify, nil)
		} else {
			t.violation(ViolationUnknownTask, nil)
		}
		return
	}
	if r.Finished {
		t.violation(ViolationDuplicateNotify, r)
		return
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
	r.Summary = ev.Summary
	if ev.HasUsage {
		r.Usage = ev.Usage
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
	t.finish(r)
	if st == StatusStopped && r.InterruptAt > 0 {
		r.InterruptLatencyMs = max(0, t.now-r.InterruptAt)
		t.emit(Lifecycle{Kind: InterruptMatched, Run: r, LatencyMs: r.InterruptLatencyMs})
	}
}

// finish records the terminal status and opens the grace window.
func (t *Tracker) finish(r *Run) {
	r.Finished = true
	r.Start = runStart(r)
	if r.Workflow {
		t.emit(Lifecycle{Kind: RunFinished, Run: r})
	} else {
		t.emit(Lifecycle{Kind: TaskEnded, Run: r})
	}
	r.graceEnd = t.now + t.grace
	t.graceQ = append(t.graceQ, r)
}

// finalize closes a run: agents that never ended become abandoned (started)
// or not_started (queued), phases get their times, and the run is forgotten
// but for a tombstone.
func (t *Tracker) finalize(r *Run) {
	for i := range r.Agents {
		a := &r.Agents[i]
		if a.State.Final() {
			continue
		}
		if a.State == AgentRunning {
			a.State = AgentAbandoned
			a.End = max(r.End, a.Start)
		} else {
			a.State = AgentNotStarted
		}
		a.endSent = true
		t.emit(Lifecycle{Kind: AgentEnded, Run: r, Agent: a})
	}
	derivePhases(r)
	r.Start = runStart(r)
	r.Finalized = true
	t.emit(Lifecycle{Kind: RunFinalized, Run: r})
	t.forget(r)
}

func (t *Tracker) forget(r *Run) {
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
	k := runKey{r.TaskID, r.RunID}
	if _, ok := t.tombs[k]; !ok {
		t.tombs[k] = struct{}{}
		t.tombOrder = append(t.tombOrder, k)
		if len(t.tombOrder) > t.maxTombs {
			delete(t.tombs, t.tombOrder[0])
			t.tombOrder = t.tombOrder[1:]
		}
	}
	// Compact the open list now and then rather than on every finalize.
	t.finalizedN++
	if t.finalizedN > 64 && t.finalizedN > len(t.open)/2 {
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

// runStart derives a run's start: end − duration_ms and the earliest agent
// time are both lower bounds of the truth, so the smaller one wins; the
// arrival of the first event is the fallback when neither is known.
func runStart(r *Run) int64 {
	var s int64
	if r.End > 0 && r.Usage.DurationMs > 0 && r.End > r.Usage.DurationMs {
		s = r.End - r.Usage.DurationMs
	}
	for i := range r.Agents {
		a := &r.Agents[i]
		for _, v := range [...]int64{a.QueuedAt, a.Start} {
			if v > 0 && (s == 0 || v < s) {
				s = v
			}
		}
	}
	if s == 0 {
		s = r.FirstSeen
	}
	return s
}

// derivePhases makes sure every phase an agent names exists and gives each
// phase the span of its agents.
func derivePhases(r *Run) {
	for i := range r.Agents {
		a := &r.Agents[i]
		if a.PhaseIndex != 0 && r.phase(a.PhaseIndex) == nil {
			r.Phases = append(r.Phases, Phase{Index: a.PhaseIndex, Title: a.PhaseTitle})
		}
	}
	slices.SortStableFunc(r.Phases, func(a, b Phase) int { return a.Index - b.Index })
	for i := range r.Phases {
		p := &r.Phases[i]
		p.Start, p.End = 0, 0
		for j := range r.Agents {
			a := &r.Agents[j]
			if a.PhaseIndex != p.Index {
				continue
			}
			if a.Start > 0 && (p.Start == 0 || a.Start < p.Start) {
				p.Start = a.Start
			}
			if a.End > p.End {
				p.End = a.End
			}
		}
	}
}

// control handles control requests seen on stdin: an interrupt targets every
// running workflow of its session (all of them when it names none, as
// Claude Code's SDK sends it); stop_task targets one task.
func (t *Tracker) control(ev *Event) {
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
