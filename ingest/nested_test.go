package ingest_test

import (
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// nestedStarted is the task_started of a workflow run that an agent (or a
// task) launched.
func nestedStarted(task, name string, depth int, parentTask, parentAgent string) jobj {
	l := set(lnStarted(task, "r-"+task, "local_workflow", name), "spawn_depth", depth)
	if parentTask != "" {
		l = set(l, "parent_task_id", parentTask)
	}
	if parentAgent != "" {
		l = set(l, "parent_agent_id", parentAgent)
	}
	return l
}

// TestNestedRuns: a nested run hangs off the agent that launched it when
// the stream says which (by parent_agent_id, found through parent_task_id
// or among the open runs), off a sub-agent task that launched it, and off
// nothing when the agent is unknown, cached or the claim is a cycle; its
// root is the top of the chain; and nothing of it is counted in the run that
// launched it.
func TestNestedRuns(t *testing.T) {
	top := func(r *clockRig) {
		r.at(T0, lnStarted("w1", "r-w1", "local_workflow", "top"))
		r.at(T0+1, lnProgress("w1", agentRow(1, "done", "agentId", "A1", "label", "reader", "startedAt", T0, "endedAt", T0+1, "tokens", 10),
			agentRow(2, "start", "agentId", "A2", "label", "planner", "startedAt", T0+1)))
	}
	type want struct {
		task, parentTask, parentRun, rootTask, label string
		index, depth                                 int
	}
	cases := []struct {
		name  string
		drive func(r *clockRig)
		want  []want
	}{
		{"by parent_task_id and parent_agent_id, two levels", func(r *clockRig) {
			top(r)
			r.at(T0+2, nestedStarted("w2", "child", 2, "w1", "A2"))
			r.at(T0+3, lnProgress("w2", agentRow(1, "start", "agentId", "B1", "label", "deep", "startedAt", T0+3)))
			r.at(T0+4, nestedStarted("w3", "grandchild", 3, "w2", "B1"))
		}, []want{
			{task: "w2", parentTask: "w1", parentRun: "r-w1", rootTask: "w1", label: "planner", index: 2, depth: 2},
			{task: "w3", parentTask: "w2", parentRun: "r-w2", rootTask: "w1", label: "deep", index: 1, depth: 3},
		}},
		{"by parent_agent_id alone, among the open runs", func(r *clockRig) {
			top(r)
			r.at(T0+2, nestedStarted("w2", "child", 2, "", "A2"))
		}, []want{{task: "w2", parentTask: "w1", parentRun: "r-w1", rootTask: "w1", label: "planner", index: 2, depth: 2}}},
		{"launched by a sub-agent task", func(r *clockRig) {
			r.at(T0, lnStarted("t1", "r-t1", "local_agent", ""))
			r.at(T0+1, nestedStarted("w2", "child", 2, "t1", ""))
		}, []want{{task: "w2", parentTask: "t1", parentRun: "r-t1", rootTask: "t1", index: -1, depth: 2}}},
		{"an agent no run has: not nested, depth kept", func(r *clockRig) {
			top(r)
			r.at(T0+2, nestedStarted("w2", "child", 2, "w1", "nobody"))
		}, []want{{task: "w2", depth: 2}}},
		{"a workflow task without the agent: linked, not nested", func(r *clockRig) {
			top(r)
			r.at(T0+2, nestedStarted("w2", "child", 2, "w1", ""))
		}, []want{{task: "w2", depth: 2}}},
		{"a sub-agent task that ended: linked, not nested", func(r *clockRig) {
			r.at(T0, lnStarted("t1", "r-t1", "local_agent", ""))
			r.at(T0+1, lnNotify("t1", "completed"))
			r.at(T0+2, nestedStarted("w2", "child", 2, "t1", ""))
		}, []want{{task: "w2", depth: 2}}},
		{"a cached agent launched nothing", func(r *clockRig) {
			r.at(T0, lnStarted("w1", "r-w1", "local_workflow", "top"))
			r.at(T0+1, lnProgress("w1", agentRow(1, "done", "agentId", "A1", "cached", true)))
			r.at(T0+2, nestedStarted("w2", "child", 2, "w1", "A1"))
		}, []want{{task: "w2", depth: 2}}},
		{"a run re-announced under its own descendant keeps its place", func(r *clockRig) {
			top(r)
			r.at(T0+2, nestedStarted("w2", "child", 2, "w1", "A2"))
			r.at(T0+3, lnProgress("w2", agentRow(1, "start", "agentId", "B1", "startedAt", T0+3)))
			r.at(T0+4, nestedStarted("w1", "top", 1, "w2", "B1"))
		}, []want{{task: "w1", depth: 0}, {task: "w2", parentTask: "w1", parentRun: "r-w1", rootTask: "w1", label: "planner", index: 2, depth: 2}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newClockRigWith(t, ingest.TrackerOptions{Grace: time.Second})
			tc.drive(r)
			open := map[string]*ingest.Run{}
			for _, x := range r.tr.Open() {
				open[x.TaskID] = x
			}
			for _, w := range tc.want {
				run := open[w.task]
				if run == nil {
					t.Fatalf("run %s not open", w.task)
				}
				p := run.Parent
				if p.TaskID != w.parentTask || p.RunID != w.parentRun || p.RootTask != w.rootTask || p.Label != w.label || run.SpawnDepth != w.depth ||
					(w.parentTask != "" && p.Index != w.index) {
					t.Errorf("run %s: parent %+v, depth %d; want %+v", w.task, p, run.SpawnDepth, w)
				}
				if w.parentTask != "" && run.ParentTaskID != w.parentTask {
					t.Errorf("run %s: parent task %q, want %q (the link)", w.task, run.ParentTaskID, w.parentTask)
				}
			}
			// Nothing of a nested run is counted in the run that launched it.
			if w1 := open["w1"]; w1 != nil && len(w1.Agents) > 2 {
				t.Errorf("the top run has %d agents, want its own 2", len(w1.Agents))
			}
		})
	}
}

// TestRemoteRun: a remote_agent task is a plain task of its type; its
// remote_launched update is a status the protocol knows (no violation), and
// it ends with its notification like any task.
func TestRemoteRun(t *testing.T) {
	r := newClockRigWith(t, ingest.TrackerOptions{Grace: time.Second})
	r.at(T0, lnStarted("t9", "r9", "remote_agent", ""))
	r.at(T0+10, lnUpdated("t9", "remote_launched", 0))
	r.at(T0+20, lnNotify("t9", "completed"))
	r.tr.Close(T0 + 5000)
	var ended *ingest.Run
	for _, e := range r.rec.Events {
		switch e.Kind {
		case ingest.ViolationSeen:
			t.Errorf("violation %v", e.Violation)
		case ingest.TaskEnded:
			ended = &e.Run
		case ingest.RunFinished:
			t.Errorf("a remote_agent task counted as a workflow run")
		}
	}
	if ended == nil || ended.TaskType != "remote_agent" || ended.Status != ingest.StatusCompleted || ended.Workflow {
		t.Fatalf("ended %+v, want a completed remote_agent task", ended)
	}
}
