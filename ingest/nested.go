package ingest

import "github.com/cbc-otel/cbc-otel/streamjson"

// Nested runs (PROTOCOL.md "Nested runs"; docs/reconstruction.md, "Nested
// and remote runs"): a nested run is a run of its own, counted once; the
// Tracker only says where it hangs: Run.Parent, Run.ParentLink, Run.Resumes.

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
	case r.Resumes != nil:
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

// rememberEnded keeps what finalized r leaves for the runs that name it
// later (a child whose launcher ended first, a resume), as its task's last
// run; beyond the tombstones' bound the oldest task is forgotten, counted.
func (t *Tracker) rememberEnded(r *Run) {
	t.stats.launchersEvicted.Add(int64(t.ended.Put(r.TaskID, refOf(r))))
}

// seenRun returns the run of task a new run may name: its latest
// unfinalized run, else what its last finalized one left. ok is false
// for a task never seen (or forgotten).
func (t *Tracker) seenRun(task string) (AgentRef, bool) {
	if runs := t.byTask[task]; len(runs) > 0 {
		return refOf(runs[len(runs)-1]), true
	}
	return t.ended.Get(task)
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
	if r.Parent.TaskID != "" || r.ParentLink != nil {
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
	if (ref.RootTask == r.TaskID && ref.RootRun == r.RunID) || t.descends(p, r) {
		return // the launcher descends from r: a stream that says so lies
	}
	if a := p.agent(idx); a != nil {
		ref.AgentID, ref.Label = a.AgentID, a.Label
	}
	r.Parent = ref
	r.ParentTaskID = p.TaskID
}

// maxChainWalk bounds the launchers descends follows up from a run:
// Claude Code nests 3 deep (MaxSpawnDepth bounds what a stream may claim);
// a longer chain is a stream not worth a longer walk per task_started.
const maxChainWalk = 4 * streamjson.MaxSpawnDepth

// descends reports whether p has r among its launchers, following the
// unfinalized runs' Parent up the chain. The roots the refs keep cannot
// say it alone: a run adopted from a snapshot learns its launcher from a
// task_started that may come after it launched others, and their roots
// stay its own. A chain longer than maxChainWalk is treated as descending
// (no parent rather than a possible cycle).
func (t *Tracker) descends(p, r *Run) bool {
	for range maxChainWalk {
		if p == r {
			return true
		}
		if p.Parent.TaskID == "" {
			return false
		}
		next := (*Run)(nil)
		for _, x := range t.byTask[p.Parent.TaskID] {
			if x.RunID == p.Parent.RunID {
				next = x
			}
		}
		if next == nil {
			return false // finalized: it gains no launcher any more
		}
		p = next
	}
	return true
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
	r.ParentLink = &ref
}

// resumes sets the run of r's task that r resumes: the latest one seen
// whose run_id sorts before r's (run ids of a task sort in the order the
// runs opened, PROTOCOL.md), open or finalized. Set once.
func (t *Tracker) resumes(r *Run) {
	if r.Resumes != nil || r.RunID == "" {
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
		if e, ok := t.ended.Get(r.TaskID); ok && e.RunID != "" && e.RunID < r.RunID {
			ref = e
		}
	}
	if ref.TaskID == "" || (ref.RootTask == r.TaskID && ref.RootRun == r.RunID) {
		return
	}
	r.Resumes = &ref
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
