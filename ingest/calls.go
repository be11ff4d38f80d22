package ingest

// Attribution of the CLI's own model calls (run --cli-telemetry.join) to the
// workflow agents of the stream. The CLI tags a sub-agent's calls with its
// agent_id, which is the stream's workflow_agent.agentId; the main
// conversation's calls carry none. Both paths are asynchronous, so a call
// may arrive before the snapshot that names its agent: it is held for the
// grace window, then counted as unmatched.

// Bounds on what attribution may hold. A workflow has dozens of agents and
// the CLI exports every few seconds; these are far above that.
const (
	maxHeldCalls   = 4096 // calls waiting for their agent to be named
	maxLateAgents  = 4096 // agents of finalized runs still attributable
	maxIndexAgents = 1 << 16
)

// agentRef locates an agent of an open run.
type agentRef struct {
	run   *Run
	index int
}

// lateRef is what is kept of an agent of a finalized run: enough to name
// the workflow of its late calls.
type lateRef struct {
	workflow, task, run string
	index               int
}

type heldCall struct {
	call     ModelCall
	deadline int64
}

// callIndex is the Tracker's state for attribution; its zero value is off.
// Agents are found by id (the latest agent of that id) and by the
// tool_use_id of their run and their id: agentIds are content-addressed,
// so a workflow run twice reuses them, and a call that names its Workflow
// call (ModelCall.ToolUseID) goes to that run's agent only.
type callIndex struct {
	on        bool
	open      map[string]agentRef // by agent id, and by tool_use_id + "\x00" + agent id
	late      map[string]lateRef  // likewise, for finalized runs
	lateOrder []string
	held      []heldCall
}

func (x *callIndex) init() {
	x.on = true
	x.open = make(map[string]agentRef)
	x.late = make(map[string]lateRef)
}

func toolKey(tool, agent string) string { return tool + "\x00" + agent }

// indexAgent makes a's agent id attributable and hands it the calls that
// were waiting for it. A cached agent keeps the agentId of the run that
// computed it and makes no calls: it never takes the id over.
func (t *Tracker) indexAgent(r *Run, a *Agent) {
	x := &t.calls
	if !x.on || a.AgentID == "" || a.State == AgentCached {
		return
	}
	tk := toolKey(r.ToolUseID, a.AgentID)
	if ref, ok := x.open[tk]; ok && ref.run == r && ref.index == a.Index && x.open[a.AgentID] == ref {
		return
	}
	if len(x.open) >= maxIndexAgents {
		t.violation(ViolationOverCapacity, r)
		return
	}
	x.open[a.AgentID] = agentRef{run: r, index: a.Index}
	x.open[tk] = agentRef{run: r, index: a.Index}
	if len(x.held) == 0 {
		return
	}
	n := 0
	for _, h := range x.held {
		if h.call.AgentID == a.AgentID && (h.call.ToolUseID == "" || h.call.ToolUseID == r.ToolUseID) {
			t.attribute(h.call)
			continue
		}
		x.held[n] = h
		n++
	}
	clear(x.held[n:])
	x.held = x.held[:n]
}

// unindexRun moves r's agents from the open index to the late one, when r
// is forgotten.
func (t *Tracker) unindexRun(r *Run) {
	x := &t.calls
	if !x.on {
		return
	}
	for i := range r.Agents {
		a := &r.Agents[i]
		late := lateRef{workflow: r.Name, task: r.TaskID, run: r.RunID, index: a.Index}
		// Each key on its own: another run may have taken either over.
		for _, k := range []string{toolKey(r.ToolUseID, a.AgentID), a.AgentID} {
			if ref, ok := x.open[k]; !ok || ref.run != r {
				continue
			}
			delete(x.open, k)
			if _, ok := x.late[k]; !ok {
				x.lateOrder = append(x.lateOrder, k)
			}
			x.late[k] = late
		}
		for len(x.lateOrder) > 2*maxLateAgents {
			delete(x.late, x.lateOrder[0])
			x.lateOrder = x.lateOrder[1:]
		}
	}
}

// HandleCall attributes one model call of the CLI's own telemetry at time
// now and emits it as ModelCallSeen: at once when it is the main
// conversation's or its agent is known, after the grace window (as
// unmatched) when the stream never names its agent. Calls reach the
// Tracker only when TrackerOptions.AttributeCalls is set; otherwise every
// agent call is unmatched. c's text must be clean (safetext.Clean to the
// decoder's MaxIDLen): its boundary is the caller's (join cleans the CLI's
// attributes), the sinks only Cut it.
func (t *Tracker) HandleCall(c ModelCall, now int64) {
	t.Advance(now)
	t.stats.calls.Add(1)
	if c.AgentID == "" {
		c.Scope = CallMain
		t.emit(Lifecycle{Kind: ModelCallSeen, Call: &c})
		return
	}
	if t.attribute(c) {
		return
	}
	if !t.calls.on || t.grace <= 0 || len(t.calls.held) >= maxHeldCalls {
		if t.calls.on && t.grace > 0 {
			t.violation(ViolationOverCapacity, nil)
		}
		t.unmatched(c)
		return
	}
	t.calls.held = append(t.calls.held, heldCall{call: c, deadline: t.now + t.grace})
}

// attribute adds c to its agent's and run's Cost and emits it, when the
// agent is known (open or recently finalized).
func (t *Tracker) attribute(c ModelCall) bool {
	x := &t.calls
	if !x.on {
		return false
	}
	key := c.AgentID
	if c.ToolUseID != "" {
		key = toolKey(c.ToolUseID, c.AgentID)
	}
	if ref, ok := x.open[key]; ok {
		r := ref.run
		c.Scope, c.Workflow, c.TaskID, c.RunID, c.AgentIndex = CallWorkflow, r.Name, r.TaskID, r.RunID, ref.index
		a := r.agent(ref.index)
		if a != nil {
			a.Cost.Add(c.Cost, 1)
		}
		r.Cost.Add(c.Cost, 1)
		if r.pending() {
			// Its RunStarted is held back, and with it every event that
			// names it: the call still counts for its workflow.
			t.emit(Lifecycle{Kind: ModelCallSeen, Call: &c})
			return true
		}
		t.emit(Lifecycle{Kind: ModelCallSeen, Run: r, Agent: a, Call: &c})
		return true
	}
	if ref, ok := x.late[key]; ok {
		// The run's spans and report are final: the call counts for its
		// workflow's totals only.
		t.stats.lateCalls.Add(1)
		c.Late = true
		c.Scope, c.Workflow, c.TaskID, c.RunID, c.AgentIndex = CallWorkflow, ref.workflow, ref.task, ref.run, ref.index
		t.emit(Lifecycle{Kind: ModelCallSeen, Call: &c})
		return true
	}
	return false
}

func (t *Tracker) unmatched(c ModelCall) {
	c.Scope = CallUnmatched
	t.stats.unmatchedCalls.Add(1)
	t.emit(Lifecycle{Kind: ModelCallSeen, Call: &c})
}

// expireCalls gives up the held calls whose grace window has closed (all of
// them when all is set: the stream ended).
func (t *Tracker) expireCalls(all bool) {
	x := &t.calls
	if len(x.held) == 0 {
		return
	}
	n := 0
	for _, h := range x.held {
		if all || h.deadline <= t.now {
			t.unmatched(h.call)
			continue
		}
		x.held[n] = h
		n++
	}
	clear(x.held[n:])
	x.held = x.held[:n]
}
