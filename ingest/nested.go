package ingest

import "github.com/cbc-otel/cbc-otel/streamjson"

// Nested runs. Claude Code nests workflows: an agent of a workflow (or a
// plain sub-agent task) launches another workflow, up to spawn_depth 3. The
// nested run is a run of its own: counted once, under its own workflow
// name, with its own agents, usage and model calls; nothing of it is added
// to the run or the agent that launched it (README, "Nested and remote
// runs"). What the Tracker adds is where it hangs: Run.Parent, the agent
// that launched it, when the stream says which.

// AgentRef names the agent that launched a nested run: agent Index of run
// (TaskID, RunID), or, with Index -1, the plain task (a sub-agent) itself.
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

// maxLauncherScan bounds the agents looked at to find a launching agent
// that no parent_task_id locates: a hostile stream naming unknown agents on
// every task_started costs at most this much per line.
const maxLauncherScan = 4096

// nest sets what a task_started says of a run's nesting: its depth, and the
// agent that launched it when the stream says which and its run is still
// running; a launcher that ended already is only linked (traces), as a span
// does not start under one that is over.
func (t *Tracker) nest(r *Run, ev *streamjson.Event) {
	r.SpawnDepth = ev.SpawnDepth
	if r.Parent.TaskID != "" {
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
		return
	}
	ref := AgentRef{TaskID: p.TaskID, RunID: p.RunID, Index: idx, Workflow: p.Name, RootTask: p.TaskID, RootRun: p.RunID}
	if p.Parent.TaskID != "" {
		ref.RootTask, ref.RootRun = p.Parent.RootTask, p.Parent.RootRun
	}
	if ref.RootTask == r.TaskID && ref.RootRun == r.RunID {
		return // the launcher descends from r: a stream that says so lies
	}
	if a := p.agent(idx); a != nil {
		ref.AgentID, ref.Label = a.AgentID, a.Label
	}
	r.Parent = ref
	r.ParentTaskID = p.TaskID
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
