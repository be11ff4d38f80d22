package ingest_test

import (
	"fmt"
	"math/rand/v2"
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
// launched it. parent_agent_id is a typed field the decoder accepts though
// no recorded CLI writes it; the recorded shapes are TestLateChildLinked's,
// TestResumedRun's and the corpus tests'.
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

// subAgent is a sub-agent's task_started as Claude Code 2.1.335 writes it:
// spawn_depth always, parent_task_id when a sub-agent launched it.
func subAgent(task, run string, depth int, parent string) jobj {
	l := set(lnStarted(task, run, "local_agent", ""), "spawn_depth", depth, "subagent_type", "general-purpose")
	if parent != "" {
		l = set(l, "parent_task_id", parent)
	}
	return l
}

// runRef is what a test says of an AgentRef: task, run and root.
type runRef struct{ task, run, rootTask, rootRun string }

func refOf(a ingest.AgentRef) runRef { return runRef{a.TaskID, a.RunID, a.RootTask, a.RootRun} }

// refOfP is refOf of a link held out of line (Run.ParentLink, Run.Resumes).
func refOfP(a *ingest.AgentRef) runRef {
	if a == nil {
		return runRef{}
	}
	return refOf(*a)
}

// startedRun is the run r.at recorded for the task_started of (task, run).
func startedRun(t *testing.T, r *clockRig, task, run string) ingest.Run {
	t.Helper()
	for _, e := range r.rec.Events {
		if (e.Kind == ingest.TaskStarted || e.Kind == ingest.RunStarted) && e.Run.TaskID == task && e.Run.RunID == run {
			return e.Run
		}
	}
	t.Fatalf("no start of %s/%s; kinds %s", task, run, kindsOf(r.rec))
	return ingest.Run{}
}

// TestLateChildLinked: a run whose launcher (parent_task_id) is running
// hangs under it; one whose launcher ended, in its grace window or
// finalized long before, is linked to it (ParentLink, with the launcher's
// run and trace root); once the bounded store forgot the launcher, or for
// a launcher never seen, there is no link, and the forgetting is counted.
func TestLateChildLinked(t *testing.T) {
	const grace = 1000
	cases := []struct {
		name        string
		drive       func(r *clockRig) int64 // returns when the child starts
		child       jobj
		nested      runRef // Parent
		linked      runRef // ParentLink
		wantEvicted int64
	}{
		{"launcher open", func(r *clockRig) int64 {
			r.at(T0, subAgent("L", "rL", 1, ""))
			return T0 + 10
		}, subAgent("C", "rC", 2, "L"), runRef{"L", "rL", "L", "rL"}, runRef{}, 0},
		{"launcher in its grace window", func(r *clockRig) int64 {
			r.at(T0, subAgent("L", "rL", 1, ""))
			r.at(T0+10, lnNotify("L", "completed"))
			return T0 + 10 + grace/2
		}, subAgent("C", "rC", 2, "L"), runRef{}, runRef{"L", "rL", "L", "rL"}, 0},
		{"launcher finalized", func(r *clockRig) int64 {
			r.at(T0, subAgent("L", "rL", 1, ""))
			r.at(T0+10, lnNotify("L", "completed"))
			r.tr.Advance(T0 + 10 + 3*grace)
			return T0 + 10 + 3*grace
		}, subAgent("C", "rC", 2, "L"), runRef{}, runRef{"L", "rL", "L", "rL"}, 0},
		{"a fork's workflow, the fork finalized", func(r *clockRig) int64 {
			r.at(T0, set(subAgent("F", "rF", 1, ""), "subagent_type", "fork"))
			r.at(T0+10, lnNotify("F", "completed"))
			r.tr.Advance(T0 + 10 + 3*grace)
			return T0 + 10 + 3*grace
		}, set(lnStarted("W", "rW", "local_workflow", "wf"), "parent_task_id", "F"), runRef{}, runRef{"F", "rF", "F", "rF"}, 0},
		{"a nested launcher finalized: the link keeps its root", func(r *clockRig) int64 {
			r.at(T0, subAgent("L1", "r1", 1, ""))
			r.at(T0+1, subAgent("L2", "r2", 2, "L1"))
			r.at(T0+2, lnNotify("L2", "completed"))
			r.at(T0+3, lnNotify("L1", "completed"))
			r.tr.Advance(T0 + 3*grace)
			return T0 + 3*grace
		}, subAgent("C", "rC", 3, "L2"), runRef{}, runRef{"L2", "r2", "L1", "r1"}, 0},
		{"launcher evicted", func(r *clockRig) int64 {
			r.at(T0, subAgent("L", "rL", 1, ""))
			r.at(T0+1, lnNotify("L", "completed"))
			for i, id := range []string{"x1", "x2", "x3"} {
				r.at(T0+2+int64(i), subAgent(id, "r"+id, 1, ""))
				r.at(T0+2+int64(i), lnNotify(id, "completed"))
			}
			r.tr.Advance(T0 + 3*grace)
			return T0 + 3*grace
		}, subAgent("C", "rC", 2, "L"), runRef{}, runRef{}, 2},
		{"launcher never seen", func(r *clockRig) int64 { return T0 }, subAgent("C", "rC", 2, "nobody"), runRef{}, runRef{}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newClockRigWith(t, ingest.TrackerOptions{Grace: grace * time.Millisecond, Tombstones: 2})
			at := tc.drive(r)
			r.at(at, tc.child)
			task, run := tc.child["task_id"].(string), tc.child["run_id"].(string)
			c := startedRun(t, r, task, run)
			if got := refOf(c.Parent); got != tc.nested {
				t.Errorf("Parent %+v, want %+v", got, tc.nested)
			}
			if got := refOfP(c.ParentLink); got != tc.linked {
				t.Errorf("ParentLink %+v, want %+v", got, tc.linked)
			}
			if want := tc.nested.task + tc.linked.task; c.ParentTaskID != want {
				t.Errorf("ParentTaskID %q, want %q", c.ParentTaskID, want)
			}
			if c.Parent.TaskID != "" && c.Parent.Index != -1 || c.ParentLink != nil && c.ParentLink.Index != -1 {
				t.Errorf("a task launcher has an agent index: %+v %+v", c.Parent, c.ParentLink)
			}
			if n := r.stats.LaunchersEvicted(); n != tc.wantEvicted {
				t.Errorf("LaunchersEvicted %d, want %d", n, tc.wantEvicted)
			}
			// The link survives a checkpoint: a restored Tracker links alike.
			if tc.linked.task != "" && tc.nested.task == "" {
				r2 := newClockRigWith(t, ingest.TrackerOptions{Grace: grace * time.Millisecond, Tombstones: 2})
				st := r.tr.Snapshot()
				r2.tr = ingest.NewTracker(ingest.TrackerOptions{Grace: grace * time.Millisecond, Tombstones: 2, Sinks: []ingest.Sink{r2.rec}, Stats: r2.stats})
				if err := r2.tr.Restore(st, st.Now); err != nil {
					t.Fatal(err)
				}
				r2.at(at, set(subAgent("C2", "rC2", 2, tc.linked.task)))
				if got := refOfP(startedRun(t, r2, "C2", "rC2").ParentLink); got != tc.linked {
					t.Errorf("after a checkpoint: ParentLink %+v, want %+v", got, tc.linked)
				}
			}
		})
	}
}

// TestResumedRun: a task_started of a task already seen with a later
// run_id is a resume (Claude Code resumes a sub-agent after its shell
// ended): it names the run it resumes, open, in grace or finalized, and
// joins that run's trace root; a run id that sorts first, a run without
// run_id, or a first run forgotten is not linked.
func TestResumedRun(t *testing.T) {
	const grace = 1000
	cases := []struct {
		name    string
		drive   func(r *clockRig) int64
		resumed jobj
		want    runRef
	}{
		{"first run in its grace window", func(r *clockRig) int64 {
			r.at(T0, subAgent("A", "0a", 1, ""))
			r.at(T0+1, set(lnStarted("B", "0b", "local_bash", ""), "parent_task_id", "A", "owned_by_subagent", true))
			r.at(T0+2, lnNotify("A", "completed"))
			r.at(T0+3, lnNotify("B", "completed"))
			return T0 + 4
		}, subAgent("A", "0c", 1, ""), runRef{"A", "0a", "A", "0a"}},
		{"first run finalized", func(r *clockRig) int64 {
			r.at(T0, subAgent("A", "0a", 1, ""))
			r.at(T0+2, lnNotify("A", "completed"))
			r.tr.Advance(T0 + 3*grace)
			return T0 + 3*grace
		}, subAgent("A", "0c", 1, ""), runRef{"A", "0a", "A", "0a"}},
		{"a nested first run: the resume joins its root", func(r *clockRig) int64 {
			r.at(T0, subAgent("P", "0p", 1, ""))
			r.at(T0+1, subAgent("A", "0a", 2, "P"))
			r.at(T0+2, lnNotify("A", "completed"))
			r.tr.Advance(T0 + 3*grace)
			return T0 + 3*grace
		}, subAgent("A", "0c", 2, ""), runRef{"A", "0a", "P", "0p"}},
		// A run id that sorts before the task's latest is no resume and no
		// run at all: it is late (TestTrust28RunOrder).
		{"first run forgotten", func(r *clockRig) int64 {
			r.at(T0, subAgent("A", "0a", 1, ""))
			r.at(T0+1, lnNotify("A", "completed"))
			for i, id := range []string{"x1", "x2", "x3"} {
				r.at(T0+2+int64(i), subAgent(id, "r"+id, 1, ""))
				r.at(T0+2+int64(i), lnNotify(id, "completed"))
			}
			r.tr.Advance(T0 + 3*grace)
			return T0 + 3*grace
		}, subAgent("A", "0c", 1, ""), runRef{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newClockRigWith(t, ingest.TrackerOptions{Grace: grace * time.Millisecond, Tombstones: 2})
			at := tc.drive(r)
			r.at(at, tc.resumed)
			c := startedRun(t, r, "A", tc.resumed["run_id"].(string))
			if got := refOfP(c.Resumes); got != tc.want {
				t.Errorf("Resumes %+v, want %+v", got, tc.want)
			}
			if c.Parent.TaskID != "" || c.ParentLink != nil {
				t.Errorf("a resume without parent_task_id has a launcher: %+v %+v", c.Parent, c.ParentLink)
			}
			if v := violationCounts(r.stats); len(v) != 0 {
				t.Errorf("violations %v", v)
			}
		})
	}
	// Without run ids a second task_started is a duplicate, not a resume.
	r := newClockRigWith(t, ingest.TrackerOptions{Grace: grace * time.Millisecond})
	r.at(T0, subAgent("A", "", 1, ""))
	r.at(T0+1, subAgent("A", "", 1, ""))
	if n := r.stats.Violations(ingest.ViolationDuplicateStart); n != 1 {
		t.Errorf("duplicate_start %d, want 1", n)
	}
}

// TestLinksPointToSeenRuns is a property: on random streams of starts
// (random parents, depths, run ids, resumes), ends and clock jumps under a
// small store, every Parent, ParentLink, Resumes and their roots name a
// run whose task_started came before, never one unseen or the run itself.
func TestLinksPointToSeenRuns(t *testing.T) {
	var refs [3]int
	for seed := range uint64(300) {
		n := checkLinksSeen(t, linkOps(seed, 120))
		for i := range refs {
			refs[i] += n[i]
		}
	}
	// The streams reach every kind of reference, or the property is empty.
	if refs[0] == 0 || refs[1] == 0 || refs[2] == 0 {
		t.Fatalf("nested, linked, resumed runs seen: %v; want some of each", refs)
	}
}

// FuzzLinksPointToSeenRuns is TestLinksPointToSeenRuns on the fuzzer's
// op strings.
func FuzzLinksPointToSeenRuns(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(linkOps(seed, 60))
	}
	f.Fuzz(func(t *testing.T, ops []byte) { _ = checkLinksSeen(t, ops) })
}

func linkOps(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 28))
	b := make([]byte, n*3)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// checkLinksSeen plays ops, three bytes each: an op (start, workflow
// start, notify, jump past the grace window), a task of six, a parent of
// seven (the last one never started) and a run id.
// It returns how many runs were nested, linked and resumes.
func checkLinksSeen(t *testing.T, ops []byte) (refs [3]int) {
	t.Helper()
	r := newClockRigWith(t, ingest.TrackerOptions{Grace: 100 * time.Millisecond, Tombstones: 2, Caps: ingest.Caps{Tasks: 3, Runs: 3, Grace: 2}})
	seen := map[[2]string]bool{}
	now := T0
	tasks := []string{"a", "b", "c", "d", "e", "f", "never"}
	for i := 0; i+2 < len(ops); i += 3 {
		op, task, parent := ops[i]%4, tasks[int(ops[i+1])%6], tasks[int(ops[i+2])%7]
		run := fmt.Sprintf("%02d", ops[i+2]%16)
		now += int64(ops[i+1] % 50)
		switch op {
		case 0, 1:
			l := subAgent(task, run, 1+int(ops[i]/4)%3, parent)
			if op == 1 {
				l = set(lnStarted(task, run, "local_workflow", "wf"), "parent_task_id", parent)
			}
			r.at(now, l)
			seen[[2]string{task, run}] = true
		case 2:
			r.at(now, lnNotify(task, "completed"))
		case 3:
			now += 500
			r.tr.Advance(now)
		}
		for _, e := range r.rec.Events {
			if e.Kind != ingest.TaskStarted && e.Kind != ingest.RunStarted {
				continue
			}
			self := [2]string{e.Run.TaskID, e.Run.RunID}
			deref := func(p *ingest.AgentRef) ingest.AgentRef {
				if p == nil {
					return ingest.AgentRef{}
				}
				return *p
			}
			for j, ref := range []ingest.AgentRef{e.Run.Parent, deref(e.Run.ParentLink), deref(e.Run.Resumes)} {
				if ref.TaskID == "" {
					continue
				}
				refs[j]++
				for _, k := range [][2]string{{ref.TaskID, ref.RunID}, {ref.RootTask, ref.RootRun}} {
					if !seen[k] || k == self {
						t.Fatalf("ops %x: run %v names %v (ref %+v), never seen before it or itself", ops, self, k, ref)
					}
				}
			}
		}
		r.rec.Events = r.rec.Events[:0]
	}
	return refs
}
