package ingest

import "github.com/cbc-otel/cbc-otel/streamjson"

// Nested runs, as Claude Code 2.1.335 writes them (PROTOCOL.md "Nested
// runs"): a sub-agent task launches sub-agents (spawn_depth 2, 3), shells
// and monitors (parent_task_id, owned_by_subagent); a fork sub-agent
// launches a workflow (parent_task_id, no spawn_depth); a sub-agent is
// resumed as a new run of its task (same task_id, new run_id). The
// nested run is a run of its own: counted once, under its own name, with
// its own agents, usage and model calls; nothing of it is added to the run
// or the agent that launched it (README, "Nested and remote runs"). What
// the Tracker adds is where it hangs: Run.Parent, the run (or the agent of
// a workflow, when a stream names one by parent_agent_id) that launched
// it while it ran; Run.ParentLink, the launcher that had ended (a link);
// Run.Resumes, the task's run it resumes.

// AgentRef names the agent that launched a nested run: agent Index of run
// (TaskID, RunID), or, with Index -1, the run (a sub-agent task) itself.
// Root is the top-level run of the chain, whose trace the nested run joins.
type AgentRef struct {
	TaskID, RunID string
	Index         int
	AgentID       string
	Workflow      string // the launching run's workflow name
	Label         string // the launching agent's label, when it had one
	RootTask      string
	RootRun       string
}

// root is the top-level run whose trace r is in: its launcher's when it is
// nested, its first run's when it resumes one, else r itself.
func (r *Run) root() (task, run string) {
	switch {
	case r.Parent.TaskID != "":
		return r.Parent.RootTask, r.Parent.RootRun
	case r.Resumes.TaskID != "":
		return r.Resumes.RootTask, r.Resumes.RootRun
	}
	return r.TaskID, r.RunID
}

// refOf is what a run that names r (its child, its resume) keeps of it.
func refOf(r *Run) AgentRef {
	ref := AgentRef{TaskID: r.TaskID, RunID: r.RunID, Index: -1}
	if r.Workflow {
		ref.Workflow = r.Name
	}
	ref.RootTask, ref.RootRun = r.root()
	return ref
}

// endedRuns remembers, per task, what its last finalized run leaves for
// the runs that name it later: a child whose launcher ended before it
// started (its parent_task link), a resume of the task. Bounded like the
// tombstones (TrackerOptions.Tombstones); an entry pushed out is counted
// (Stats.LaunchersEvicted): a run naming that task afterwards gets no link.
type endedRuns struct {
	byTask map[string]endedRun
	order  []endedKey // oldest first; a key whose seq is stale is skipped
	seq    uint64
}

type endedRun struct {
	ref AgentRef
	seq uint64
}

type endedKey struct {
	task string
	seq  uint64
}

// remember records finalized r as the last run of its task, and forgets
// the oldest task beyond max.
func (e *endedRuns) remember(r *Run, max int, st *Stats) {
	if e.byTask == nil {
		e.byTask = make(map[string]endedRun)
	}
	e.put(refOf(r), max, st)
}

func (e *endedRuns) put(ref AgentRef, max int, st *Stats) {
	e.seq++
	e.byTask[ref.TaskID] = endedRun{ref: ref, seq: e.seq}
	e.order = append(e.order, endedKey{ref.TaskID, e.seq})
	for len(e.byTask) > max {
		k := e.order[0]
		e.order = e.order[1:]
		if x, ok := e.byTask[k.task]; ok && x.seq == k.seq {
			delete(e.byTask, k.task)
			st.launchersEvicted.Add(1)
		}
	}
	if len(e.order) > 2*max+64 {
		// Tasks finalized again left stale keys behind: drop them.
		n := 0
		for _, k := range e.order {
			if x, ok := e.byTask[k.task]; ok && x.seq == k.seq {
				e.order[n] = k
				n++
			}
		}
		e.order = e.order[:n]
	}
}

// get returns what the last finalized run of task left, if it is still
// remembered.
func (e *endedRuns) get(task string) (AgentRef, bool) {
	x, ok := e.byTask[task]
	return x.ref, ok
}

// list returns the remembered refs, oldest first (checkpoints).
func (e *endedRuns) list() []AgentRef {
	var out []AgentRef
	for _, k := range e.order {
		if x, ok := e.byTask[k.task]; ok && x.seq == k.seq {
			out = append(out, x.ref)
		}
	}
	return out
}

// seenRun returns the run of task a new run may name: its latest
// unfinalized run, else what its last finalized one left. ok is false
// for a task never seen (or forgotten).
func (t *Tracker) seenRun(task string) (AgentRef, bool) {
	if runs := t.byTask[task]; len(runs) > 0 {
		return refOf(runs[len(runs)-1]), true
	}
	return t.ended.get(task)
}

// maxLauncherScan bounds the agents looked at to find a launching agent
// that no parent_task_id locates: a hostile stream naming unknown agents on
// every task_started costs at most this much per line.
const maxLauncherScan = 4096

// nest sets what a task_started says of a run's nesting: its depth; the
// run (or workflow agent) that launched it, when the stream says which and
// it is still running (Parent: the span's parent); else that launcher,
// when it was seen at all, even finalized (ParentLink: a link, as a span
// does not start under one that is over); and the task's run it resumes.
func (t *Tracker) nest(r *Run, ev *streamjson.Event) {
	r.SpawnDepth = ev.SpawnDepth
	t.resumes(r)
	if r.Parent.TaskID != "" || r.ParentLink.TaskID != "" {
		return // set once: a run re-announced keeps its place (no cycles)
	}
	var p *Run
	idx := -1
	if ev.ParentAgentID != "" {
		p, idx = t.launcher(ev.ParentTaskID, ev.ParentAgentID)
	} else if runs := t.byTask[ev.ParentTaskID]; len(runs) > 0 && !runs[len(runs)-1].Workflow && !runs[len(runs)-1].Finished {
		p = runs[len(runs)-1] // a sub-agent task, still running, launched it
	}
	if p == nil || p == r {
		t.linkParent(r, ev.ParentTaskID)
		return
	}
	ref := AgentRef{TaskID: p.TaskID, RunID: p.RunID, Index: idx, Workflow: p.Name}
	ref.RootTask, ref.RootRun = p.root()
	if ref.RootTask == r.TaskID && ref.RootRun == r.RunID {
		return // the launcher descends from r: a stream that says so lies
	}
	if a := p.agent(idx); a != nil {
		ref.AgentID, ref.Label = a.AgentID, a.Label
	}
	r.Parent = ref
	r.ParentTaskID = p.TaskID
}

// linkParent sets the launcher r is only linked to: the parent task's
// latest run, open or finalized, when it was seen. A parent never seen is
// treated as no parent (PROTOCOL.md).
func (t *Tracker) linkParent(r *Run, task string) {
	if task == "" || task == r.TaskID {
		return
	}
	ref, ok := t.seenRun(task)
	if !ok || (ref.RootTask == r.TaskID && ref.RootRun == r.RunID) {
		return
	}
	r.ParentTaskID = task
	r.ParentLink = ref
}

// resumes sets the run of r's task that r resumes: the latest one seen
// whose run_id sorts before r's (run ids of a task sort in the order the
// runs opened, PROTOCOL.md), open or finalized. Set once.
func (t *Tracker) resumes(r *Run) {
	if r.Resumes.TaskID != "" || r.RunID == "" {
		return
	}
	var ref AgentRef
	runs := t.byTask[r.TaskID]
	for i := len(runs) - 1; i >= 0; i-- {
		if x := runs[i]; x != r && x.RunID != "" && x.RunID < r.RunID {
			ref = refOf(x)
			break
		}
	}
	if ref.TaskID == "" {
		if e, ok := t.ended.get(r.TaskID); ok && e.RunID != "" && e.RunID < r.RunID {
			ref = e
		}
	}
	if ref.TaskID == "" || (ref.RootTask == r.TaskID && ref.RootRun == r.RunID) {
		return
	}
	r.Resumes = ref
}

// launcher finds the unfinished workflow run and the index of its agent
// agentID: in the parent task's latest run, else through the attribution
// index, else among the unfinished runs, newest first, within a budget.
func (t *Tracker) launcher(task, agentID string) (*Run, int) {
	if runs := t.byTask[task]; len(runs) > 0 && !runs[len(runs)-1].Finished {
		if i := agentByID(runs[len(runs)-1], agentID); i >= 0 {
			return runs[len(runs)-1], i
		}
	}
	if ref, ok := t.calls.open[agentID]; ok && !ref.run.Finished {
		return ref.run, ref.index
	}
	q, budget := &t.unfinished[1], maxLauncherScan
	for k := len(q.runs) - 1; k >= q.head && budget > 0; k-- {
		r := q.runs[k]
		if r == nil || r.Finished {
			continue
		}
		if i := agentByID(r, agentID); i >= 0 {
			return r, i
		}
		budget -= len(r.Agents) + 1
	}
	return nil, -1
}

// agentByID returns the index of r's agent agentID that ran (a cached one
// launched nothing), or -1.
func agentByID(r *Run, agentID string) int {
	if !r.Workflow {
		return -1
	}
	for i := range r.Agents {
		if a := &r.Agents[i]; a.AgentID == agentID && a.State != AgentCached {
			return a.Index
		}
	}
	return -1
}
