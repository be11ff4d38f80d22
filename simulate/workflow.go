package simulate

import (
	"fmt"
	"slices"
	"time"

	"github.com/cbc-otel/cbc-otel/simulate/clitel"
)

// task is one background task of a turn: a workflow or a side task.
type task struct {
	id, runID, toolUseID string
	typ                  string // task_type
	description          string
	name                 string // workflow_name
	side                 *sideTask
	status               string // notification status; "" while running
	endTime              int64
	start                int64 // when its task_started was written, epoch ms

	// Workflow only.
	plan      *plan
	agents    []*agent // index order
	lastUsage *usage   // usage of the last task_progress
	notifUse  *usage   // usage of the notification, if it had one
	progressN int      // task_progress frames emitted, for noise pacing

	wf *clitel.Workflow // its Workflow tool call in the CLI's own telemetry, nil without

	// A nested task (nested.go): the task that launched it while it ran,
	// its spawn_depth (a sub-agent's: 1 at the top), and the run of the
	// same task it resumes.
	parent  *task
	depth   int
	resumes *task
}

// agent is one sub-agent row. Its fields are what the rows printed so far
// say; ExpectedRun is derived from the rendered row, not from the plan.
type agent struct {
	ap        agentPlan
	index     int
	id        string
	visible   bool   // has appeared in a snapshot
	started   bool   // has a startedAt
	state     string // start, done, error, cached
	queuedAt  int64
	startedAt int64
	endedAt   int64
	progress  int64 // lastProgressAt
	toolFired bool
	errMsg    string
	byStop    bool // flipped to error by a stop

	endAt, toolAt time.Duration // scheduled, in the group's scripted time

	// The CLI's own telemetry (agentCall).
	callFrom int64    // when its model call in progress began
	spent    callCost // what its api_request events said
}

func (a *agent) terminal() bool {
	return a.state == "done" || a.state == "error" || a.state == "cached"
}

// runScenario launches the side tasks and the workflow of a plan and runs
// them to their ends.
func (s *session) runScenario(p *plan) error {
	var sides []*task
	startSides := func(g int) error {
		for i := range p.sides {
			if p.sides[i].startIn != g {
				continue
			}
			t, err := s.startSide(&p.sides[i])
			if err != nil {
				return err
			}
			sides = append(sides, t)
		}
		return nil
	}
	if err := startSides(0); err != nil {
		return err
	}
	wf, err := s.startWorkflow(p)
	if err != nil {
		return err
	}
	err = s.runWorkflow(wf, func(g int, after bool) error {
		if !after {
			return startSides(g)
		}
		if err := s.endSides(sides, g); err != nil {
			return err
		}
		if p.nestAfter == g {
			return s.runNestedTasks(wf)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.endSides(sides, 0)
}

// runWorkflow runs a started workflow's groups in order, then its end:
// completed or failed, or the stop path as soon as a stop request came.
// around, if set, runs before (after false) and after each group that was
// not stopped: the side tasks due then. The stop path comes before theirs.
func (s *session) runWorkflow(t *task, around func(g int, after bool) error) error {
	groups := 0
	for _, a := range t.plan.agents {
		groups = max(groups, a.group)
	}
	for g := 1; g <= groups; g++ {
		if around != nil {
			if err := around(g, false); err != nil {
				return err
			}
		}
		stopped, err := s.runGroup(t, g)
		if err != nil {
			return err
		}
		if stopped {
			return s.stopWorkflow(t)
		}
		if around != nil {
			if err := around(g, true); err != nil {
				return err
			}
		}
	}
	return s.finishWorkflow(t)
}

// startSide launches a background task that is not a workflow from the
// main conversation. A remote agent then reports its launch in a
// task_updated of its own.
func (s *session) startSide(st *sideTask) (*task, error) { return s.startSub(st, nil) }

// startSub launches a task that is not a workflow: from the main
// conversation (parent nil), or from inside sub-agent task parent, whose
// tool call it is (nothing of it in the main conversation). A nested one
// names its launcher (parent_task_id); a sub-agent says its depth, a
// shell that a sub-agent owns it (PROTOCOL.md "Nested runs").
func (s *session) startSub(st *sideTask, parent *task) (*task, error) {
	t := &task{side: st, description: st.description, parent: parent, depth: 1}
	if parent != nil {
		t.depth = parent.depth + 1
	}
	t.id, t.runID, t.toolUseID = s.newTaskIDs(st.kind)
	typ, tool, input := s.sideLaunch(st)
	t.typ = typ
	if parent == nil {
		if err := s.emitToolUse(t.toolUseID, tool, input); err != nil {
			return nil, err
		}
	}
	s.tasks = append(s.tasks, t)
	if err := s.emitBackgroundTasks(); err != nil {
		return nil, err
	}
	if err := s.emitSubStarted(t, true); err != nil {
		return nil, err
	}
	if parent != nil {
		return t, nil
	}
	msg := "Command running in background with ID: " + t.id + "."
	switch st.kind {
	case "agent":
		msg = "Async agent launched successfully. agentId: " + t.id
	case "remote":
		msg = "Remote agent launched. Task ID: " + t.id
	}
	if err := s.emitToolResult(t.toolUseID, msg); err != nil {
		return nil, err
	}
	if _, err := s.pause(s.ids.jitter(30*time.Millisecond), nil); err != nil {
		return nil, err
	}
	if st.kind == "remote" {
		return t, s.emitTaskPatch(t, obj{{"status", "remote_launched"}})
	}
	return t, nil
}

// emitSubStarted writes the task_started of a task that is not a
// workflow: a resumed sub-agent's (first false) has no prompt and no
// parent_task_id.
func (s *session) emitSubStarted(t *task, first bool) error {
	st := t.side
	o := s.taskHead("task_started", t)
	if t.parent != nil && s.claude() && t.typ == "local_bash" {
		o = append(o, kv{"owned_by_subagent", true})
	}
	o = append(o, kv{"tool_use_id", t.toolUseID}, kv{"description", t.description})
	if t.typ == "local_agent" || t.typ == "Agent" {
		o = append(o, kv{"subagent_type", st.subagentType()})
	}
	o = append(o, kv{"is_backgrounded", !st.foreground})
	if t.typ == "local_agent" {
		o = append(o, kv{"spawn_depth", t.depth})
	}
	if t.parent != nil && first {
		o = append(o, kv{"parent_task_id", t.parent.id})
	}
	o = append(o, kv{"task_type", t.typ})
	if t.typ == "local_agent" && first {
		o = append(o, kv{"prompt", st.prompt})
	}
	t.start = s.clk.Now()
	return s.emit(s.taskTail(o))
}

// subagentType is a sub-agent's subagent_type.
func (st *sideTask) subagentType() string {
	if st.kind == "fork" {
		return "fork"
	}
	return "general-purpose"
}

// sideLaunch is a side task's task_type in the dialect, and the tool call
// of the main conversation that launches it.
func (s *session) sideLaunch(st *sideTask) (typ, tool string, input obj) {
	switch st.kind {
	case "bash":
		typ = "Bash"
		if s.claude() {
			typ = "local_bash"
		}
		return typ, "Bash", obj{{"command", st.prompt}, {"description", st.description}, {"run_in_background", true}}
	case "remote":
		// No recording has a remote agent: the Agent tool's remote
		// isolation, and one task_type in both dialects, are assumptions.
		return "remote_agent", "Agent", obj{{"description", st.description}, {"prompt", st.prompt},
			{"subagent_type", "general-purpose"}, {"isolation", "remote"}}
	}
	typ = "Agent"
	if s.claude() {
		typ = "local_agent"
	}
	return typ, "Agent", obj{{"description", st.description}, {"prompt", st.prompt}, {"subagent_type", st.subagentType()}}
}

// endSides ends the still-running side tasks due after group g (0 = after
// the workflow), and kills those a stop request targets.
func (s *session) endSides(sides []*task, g int) error {
	for _, t := range sides {
		if t.status != "" {
			continue
		}
		t.endTime = s.clk.Now()
		switch {
		case s.stopRequested(t):
			if err := s.emitTaskUpdated(t, "killed", ""); err != nil {
				return err
			}
			if err := s.emitNotification(t, "stopped", "Background task \""+t.description+"\" was stopped", nil); err != nil {
				return err
			}
		case t.side.endAfter == g:
			if err := s.emitTaskUpdated(t, "completed", ""); err != nil {
				return err
			}
			summary, u := t.sideResult()
			if err := s.emitNotification(t, "completed", summary, u); err != nil {
				return err
			}
		default:
			continue
		}
		if err := s.emitBackgroundTasks(); err != nil {
			return err
		}
	}
	return nil
}

// sideResult is the summary and usage of a side task's completed
// notification: a shell's has no usage, an agent's has.
func (t *task) sideResult() (string, *usage) {
	switch t.side.kind {
	case "agent":
		return "result of solo", &usage{tokens: 120, durMS: 186}
	case "remote":
		return "Remote agent \"" + t.description + "\" completed", &usage{tokens: 640, tools: 3, durMS: t.endTime - t.start}
	}
	return "Background command \"" + t.description + "\" completed (exit code 0)", nil
}

// startWorkflow launches the top-level workflow task from the main
// conversation.
func (s *session) startWorkflow(p *plan) (*task, error) {
	t := s.newWorkflow(p)
	input := obj{{"script", p.script()}}
	if p.pathName {
		input = obj{{"scriptPath", "/srv/sim/proj/" + p.name + ".workflow.js"}}
	}
	if err := s.emitToolUse(t.toolUseID, "Workflow", input); err != nil {
		return nil, err
	}
	if err := s.announce(t); err != nil {
		return nil, err
	}
	t.wf = s.tel.WorkflowLaunched(t.id, t.toolUseID, t.start)
	if err := s.emitToolResult(t.toolUseID, "Workflow launched in background. Task ID: "+t.id+"\nSummary: "+t.description); err != nil {
		return nil, err
	}
	if err := s.emitAssistantText("Workflow launched; waiting for its notification."); err != nil {
		return nil, err
	}
	return t, nil
}

// newWorkflow makes the task of a run of p with its ids and agents. An
// agentId is a content address: the same work gets the same id.
func (s *session) newWorkflow(p *plan) *task {
	t := &task{plan: p, typ: "local_workflow", description: p.description, name: p.name, depth: 1}
	if p.pathName && !s.claude() {
		t.name = "path:" + p.name + ".workflow.js"
	}
	t.id, t.runID, t.toolUseID = s.newTaskIDs("workflow")
	for i, ap := range p.agents {
		a := &agent{ap: ap, index: i + 1}
		if s.claude() {
			a.id = "a" + contentHash(p.name, ap.label, ap.prompt)[:16]
		} else {
			a.id = "v2:" + contentHash(p.name, ap.label, ap.prompt)
		}
		t.agents = append(t.agents, a)
	}
	return t
}

// announce adds a workflow to the turn's tasks and writes its
// task_started; the run starts when that line is written. A nested run's
// (a fork's workflow) names the task that launched it, and no depth.
func (s *session) announce(t *task) error {
	s.tasks = append(s.tasks, t)
	if err := s.emitBackgroundTasks(); err != nil {
		return err
	}
	o := append(s.taskHead("task_started", t), kv{"tool_use_id", t.toolUseID}, kv{"description", t.description})
	if t.parent != nil {
		o = append(o, kv{"parent_task_id", t.parent.id})
	}
	o = append(o, kv{"task_type", t.typ}, kv{"workflow_name", t.name})
	if s.claude() {
		o = append(o, kv{"prompt", t.plan.script()})
	}
	t.start = s.clk.Now()
	return s.emit(s.taskTail(o))
}

// runGroup runs the agents of group g, at most plan.concurrency at a time.
// It returns true if a stop request arrived (the caller runs the stop path).
func (s *session) runGroup(t *task, g int) (bool, error) {
	stop := func() bool { return s.stopRequested(t) }
	pending, err := s.queueGroup(t, g)
	if err != nil {
		return false, err
	}
	var running []*agent
	var local time.Duration // scripted time since the group began
	for len(pending) > 0 || len(running) > 0 {
		for len(running) < t.plan.concurrency && len(pending) > 0 {
			a := pending[0]
			pending = pending[1:]
			gap := s.ids.jitter(4 * time.Millisecond)
			if stopped, err := s.pause(gap, stop); stopped || err != nil {
				return stopped, err
			}
			local += gap
			running = append(running, a)
			if err := s.startAgent(t, a, local); err != nil {
				return false, err
			}
		}
		next, at, isTool := nextEvent(running)
		if stopped, err := s.pause(at-local, stop); stopped || err != nil {
			return stopped, err
		}
		local = at
		now := s.clk.Now()
		next.progress = now
		if !isTool {
			running = slices.DeleteFunc(running, func(a *agent) bool { return a == next })
			if err := s.endAgent(t, next, now); err != nil {
				return false, err
			}
			continue
		}
		if err := s.toolCall(t, next, now); err != nil {
			return false, err
		}
	}
	return false, nil
}

// queueGroup returns the agents of group g that are to run, in index
// order. Cached agents are done at once (a group of only cached agents
// gets its one snapshot here); Claude Code lists the others as queued.
func (s *session) queueGroup(t *task, g int) ([]*agent, error) {
	var pending []*agent
	now := s.clk.Now()
	anyCached := false
	for _, a := range t.agents {
		if a.ap.group != g {
			continue
		}
		switch {
		case a.ap.cached:
			a.visible, a.state, a.queuedAt, a.progress = true, "cached", now, now
			a.startedAt, a.endedAt = now, now
			anyCached = true
		default:
			pending = append(pending, a)
			if s.claude() {
				// Claude Code lists queued agents before they start.
				a.visible, a.state, a.queuedAt, a.progress = true, "start", now, now
			}
		}
	}
	if anyCached && len(pending) == 0 {
		if err := s.emitProgress(t, nil); err != nil {
			return nil, err
		}
	}
	return pending, nil
}

// startAgent starts agent a at local (its group's scripted time) and
// schedules its tool call and its end.
func (s *session) startAgent(t *task, a *agent, local time.Duration) error {
	now := s.clk.Now()
	if !a.visible {
		a.queuedAt = now
	}
	a.visible, a.started, a.state, a.startedAt, a.progress = true, true, "start", now, now
	a.callFrom = now
	a.endAt = local + s.ids.jitter(a.ap.dur)
	if a.ap.slow {
		a.endAt = local + a.ap.dur // the stall window stays exact
	}
	if a.ap.tools > 0 {
		a.toolAt = local + (a.endAt-local)/2
	}
	if err := s.emitProgress(t, a); err != nil {
		return err
	}
	s.agentStarts++
	if s.cfg.InterruptAfter > 0 && s.agentStarts == s.cfg.InterruptAfter && !s.selfInterrupted {
		s.selfInterrupted, s.stopAll = true, true
	}
	return nil
}

// nextEvent is the earliest tool call or end among the running agents;
// the first listed wins a tie.
func nextEvent(running []*agent) (next *agent, at time.Duration, isTool bool) {
	for _, a := range running {
		w, tool := a.endAt, false
		if a.ap.tools > 0 && !a.toolFired {
			w, tool = a.toolAt, true
		}
		if next == nil || w < at {
			next, at, isTool = a, w, tool
		}
	}
	return next, at, isTool
}

// toolCall is agent a's tool call at now: its first model call ends, and
// a usage tick shows the call. A workflow agent has neither the Agent nor
// the Workflow tool: it launches nothing (PROTOCOL.md "Nested runs").
func (s *session) toolCall(t *task, a *agent, now int64) error {
	a.toolFired = true
	s.agentCall(t, a, now, false)
	return s.emitProgressTick(t, a)
}

// endAgent ends agent a at now: done, or error if it is scripted to fail.
func (s *session) endAgent(t *task, a *agent, now int64) error {
	a.endedAt = now
	a.state = "done"
	if a.ap.errMsg != "" {
		a.state, a.errMsg = "error", a.ap.errMsg
	}
	s.agentCall(t, a, now, true)
	return s.emitProgress(t, a)
}

// currentUsage sums what the agents have used so far.
func (t *task) currentUsage(now int64) usage {
	u := usage{durMS: now - t.start}
	for _, a := range t.agents {
		if a.state == "cached" {
			continue
		}
		if a.toolFired || (a.terminal() && a.state == "done") {
			u.tokens += a.ap.tokens
		}
		if a.toolFired {
			u.tools += a.ap.tools
		}
	}
	return u
}

// childShown reports whether the run's workflow() child row is listed:
// one of its agents is.
func (t *task) childShown() bool {
	if t.plan.childPhase == 0 {
		return false
	}
	for _, a := range t.agents {
		if a.visible && a.ap.phase == t.plan.childPhase {
			return true
		}
	}
	return false
}

// snapshot renders the full workflow_progress timeline.
func (s *session) snapshot(t *task) []obj {
	var out []obj
	for i, ph := range t.plan.phases {
		if i+1 != t.plan.childPhase {
			out = append(out, obj{{"type", "workflow_phase"}, {"index", i + 1}, {"title", ph}})
		}
	}
	if t.childShown() {
		// workflow()'s row, listed once the child runs, after the rows
		// before it (as Claude Code 2.1.335 writes it).
		out = append(out, obj{{"type", "workflow_phase"}, {"index", t.plan.childPhase}, {"title", t.plan.phases[t.plan.childPhase-1]}, {"kind", "child"}})
	}
	for _, a := range t.agents {
		if a.visible {
			out = append(out, s.row(t, a))
		}
	}
	return out
}

// row renders one workflow_agent entry in the dialect's shape.
func (s *session) row(t *task, a *agent) obj {
	phaseTitle := t.plan.phases[a.ap.phase-1]
	if !s.claude() {
		state := a.state
		if state == "start" && t.plan.running {
			state = "running"
		}
		o := obj{{"type", "workflow_agent"}, {"index", a.index}, {"agentId", a.id}, {"state", state},
			{"startedAt", a.startedAt}}
		if a.terminal() {
			o = append(o, kv{"endedAt", a.endedAt})
		}
		o = append(o, kv{"label", a.ap.label}, kv{"phaseIndex", a.ap.phase}, kv{"phaseTitle", phaseTitle})
		if a.terminal() && a.state != "cached" && !a.byStop {
			o = append(o, kv{"tokens", a.tokens()})
		}
		if a.state == "done" || a.state == "cached" {
			o = append(o, kv{"resultPreview", "result of " + a.ap.label})
		}
		if a.errMsg != "" {
			o = append(o, kv{"error", a.errMsg})
		}
		return o
	}
	o := obj{{"type", "workflow_agent"}, {"index", a.index}, {"label", a.ap.label}, {"phaseIndex", a.ap.phase},
		{"phaseTitle", phaseTitle}}
	cached := a.state == "cached"
	if a.started || cached {
		o = append(o, kv{"agentId", a.id})
	}
	o = append(o, kv{"model", claudeModel})
	if cached {
		o = append(o, kv{"state", "done"}, kv{"cached", true})
	} else {
		o = append(o, kv{"state", a.state})
	}
	if a.started {
		o = append(o, kv{"startedAt", a.startedAt})
	}
	o = append(o, kv{"queuedAt", a.queuedAt})
	if a.started || cached {
		o = append(o, kv{"attempt", 1})
	}
	if a.toolFired && a.terminal() {
		o = append(o, kv{"lastToolName", "Bash"}, kv{"lastToolSummary", a.ap.tool})
	}
	o = append(o, kv{"promptPreview", a.ap.prompt})
	if a.started || cached {
		o = append(o, kv{"promptFramed", true})
	}
	o = append(o, kv{"lastProgressAt", a.progress})
	if a.errMsg != "" {
		o = append(o, kv{"error", a.errMsg})
	}
	if a.byStop {
		o = append(o, kv{"endedWithRun", "stopped"})
	}
	if a.terminal() && !cached && !a.byStop {
		o = append(o, kv{"tokens", a.tokens()}, kv{"toolCalls", a.ap.tools}, kv{"durationMs", a.endedAt - a.startedAt})
	}
	if a.state == "done" || cached {
		o = append(o, kv{"resultPreview", "result of " + a.ap.label})
	}
	return o
}

// tokens is what a finished agent reports: errors used none.
func (a *agent) tokens() int64 {
	if a.state == "error" {
		return 0
	}
	return a.ap.tokens
}

// emitProgress writes a full snapshot; focus is the agent that changed
// (nil: none in particular).
func (s *session) emitProgress(t *task, focus *agent) error {
	u := t.currentUsage(s.clk.Now())
	return s.emitProgressWith(t, focus, u, true)
}

// emitProgressTick writes the frame of a tool call: Claude Code sends a
// usage-only task_progress, cbc a full snapshot.
func (s *session) emitProgressTick(t *task, focus *agent) error {
	u := t.currentUsage(s.clk.Now())
	return s.emitProgressWith(t, focus, u, !s.claude())
}

func (s *session) emitProgressWith(t *task, focus *agent, u usage, withTimeline bool) error {
	desc := t.description
	if focus != nil {
		desc = t.plan.phases[focus.ap.phase-1] + ": " + sanitizeLabel(focus.ap.label)
	}
	o := append(s.taskHead("task_progress", t), kv{"tool_use_id", t.toolUseID}, kv{"description", desc},
		kv{"usage", u.obj()})
	if s.claude() {
		if focus != nil {
			o = append(o, kv{"last_tool_name", focus.ap.label})
		}
		o = append(o, kv{"summary", t.description})
	}
	if withTimeline {
		o = append(o, kv{"workflow_progress", s.snapshot(t)})
	}
	t.lastUsage = &u
	if err := s.emit(s.taskTail(o)); err != nil {
		return err
	}
	t.progressN++
	if t.progressN%3 == 0 {
		return s.emitNoise()
	}
	return nil
}

// finishWorkflow ends a run that was not stopped: completed, or failed if
// the script throws.
func (s *session) finishWorkflow(t *task) error {
	if _, err := s.pause(s.ids.jitter(3*time.Millisecond), nil); err != nil {
		return err
	}
	t.endTime = s.clk.Now()
	u := t.currentUsage(t.endTime)
	t.notifUse = &u
	status, patchStatus, errMsg := "completed", "completed", ""
	summary := fmt.Sprintf("Dynamic workflow %q completed", t.description)
	if t.plan.failErr != "" {
		status, patchStatus, errMsg = "failed", "failed", t.plan.failErr
		summary = fmt.Sprintf("Dynamic workflow %q failed: %s", t.description, errMsg)
	}
	if err := s.emitTaskUpdated(t, patchStatus, errMsg); err != nil {
		return err
	}
	if err := s.emitNotification(t, status, summary, &u); err != nil {
		return err
	}
	return s.emitBackgroundTasks()
}

// stopWorkflow runs the dialect's stop path. Claude Code flips in-flight
// agents to error first and sends a notification without usage; cbc sends
// killed and the notification first and flips the agents late, one
// snapshot each. Queued agents never get a terminal state.
func (s *session) stopWorkflow(t *task) error {
	now := s.clk.Now()
	var inflight []*agent
	for _, a := range t.agents {
		if a.started && !a.terminal() {
			inflight = append(inflight, a)
		}
	}
	if s.claude() {
		for _, a := range inflight {
			a.state, a.errMsg, a.byStop = "error", "Stopped because the workflow was stopped", true
		}
		if len(inflight) > 0 {
			if err := s.emitProgress(t, nil); err != nil {
				return err
			}
		}
		t.endTime = now
		if err := s.emitTaskUpdated(t, "killed", ""); err != nil {
			return err
		}
		if err := s.emitNotification(t, "stopped", t.description, nil); err != nil {
			return err
		}
		return s.emitBackgroundTasks()
	}
	t.endTime = now
	u := t.currentUsage(now)
	t.notifUse = &u
	if err := s.emitTaskUpdated(t, "killed", ""); err != nil {
		return err
	}
	if err := s.emitNotification(t, "stopped", fmt.Sprintf("Dynamic workflow %q was stopped", t.description), &u); err != nil {
		return err
	}
	reason := s.interruptReason
	if reason == "" {
		reason = "user cancel"
	}
	// All late flips land within 1 s of scripted time.
	spacing := min(150*time.Millisecond, 900*time.Millisecond/time.Duration(max(1, len(inflight))))
	for _, a := range inflight {
		if _, err := s.pause(spacing, nil); err != nil {
			return err
		}
		a.state, a.errMsg, a.byStop, a.endedAt = "error", "subagent aborted: "+reason, true, s.clk.Now()
		a.progress = a.endedAt
		if err := s.emitProgressWith(t, a, u, true); err != nil {
			return err
		}
	}
	return nil
}

// callCost is what an agent's api_request events added up to: the
// simulator's own accounting of cost, written to ExpectedAgent.
type callCost struct {
	usd   float64
	tok   clitel.Tokens
	calls int64
}

// agentCall records agent a's model call that ended at now in the CLI's
// own telemetry: the first of two at its tool tick, else its last at its
// end (one call, and one more after its tool calls came back). The
// agent's tokens are split over its calls so that they add up to its
// row's; an agent that ends in error has its last call rejected. A call
// cut short by a stop is never recorded: the CLI leaves no span for it.
func (s *session) agentCall(t *task, a *agent, now int64, last bool) {
	if s.tel == nil {
		return
	}
	n := int64(1)
	if a.ap.tools > 0 {
		n = 2
	}
	share := a.ap.tokens / n
	if last {
		share = a.ap.tokens - share*(n-1)
	}
	var tok clitel.Tokens
	stop, errMsg := "end_turn", ""
	switch {
	case !last:
		stop = "tool_use"
	case a.ap.errMsg != "":
		stop, errMsg = "", a.ap.errMsg
	}
	if errMsg == "" {
		// Output a quarter; the first call writes the prompt cache, later
		// ones read it; the rest is plain input.
		tok[1] = share / 4
		if !last || n == 1 {
			tok[3] = share / 8
		} else {
			tok[2] = share / 2
		}
		tok[0] = share - tok[1] - tok[2] - tok[3]
	}
	usd, ok := s.tel.AgentCall(t.wf, a.id, a.callFrom, now, tok, stop, errMsg)
	a.callFrom = now
	if ok {
		a.spent.usd += usd
		for i, v := range tok {
			a.spent.tok[i] += v
		}
		a.spent.calls++
	}
}
