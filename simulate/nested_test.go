package simulate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// nestedEvent is what the nested tests read of a task_* line.
type nestedEvent struct {
	Subtype       string         `json:"subtype"`
	TaskID        string         `json:"task_id"`
	TaskType      string         `json:"task_type"`
	WorkflowName  *string        `json:"workflow_name"`
	SpawnDepth    *int           `json:"spawn_depth"`
	ParentTaskID  *string        `json:"parent_task_id"`
	ParentAgentID *string        `json:"parent_agent_id"`
	Status        string         `json:"status"`
	Patch         map[string]any `json:"patch"`
	Usage         *struct {
		TotalTokens int64 `json:"total_tokens"`
	} `json:"usage"`
	Progress []struct {
		Type    string `json:"type"`
		AgentID string `json:"agentId"`
		Label   string `json:"label"`
		State   string `json:"state"`
		Tokens  int64  `json:"tokens"`
	} `json:"workflow_progress"`
	line int // 0-based index in the output
}

// nestedStream is a nested scenario's output, indexed for the assertions.
type nestedStream struct {
	evs     []nestedEvent     // task_* lines only, in order
	started map[string]int    // task_id → index in evs of its task_started
	byName  map[string]string // workflow_name → task_id
	notify  map[string][]int  // task_id → indexes of its notifications
}

func readNested(t *testing.T, out []byte) *nestedStream {
	t.Helper()
	ns := &nestedStream{started: map[string]int{}, byName: map[string]string{}, notify: map[string][]int{}}
	for i, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		if !bytes.Contains(line, []byte(`"subtype":"task_`)) {
			continue
		}
		var e nestedEvent
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		e.line = i
		ns.evs = append(ns.evs, e)
		k := len(ns.evs) - 1
		switch e.Subtype {
		case "task_started":
			ns.started[e.TaskID] = k
			if e.WorkflowName != nil {
				ns.byName[*e.WorkflowName] = e.TaskID
			}
		case "task_notification":
			ns.notify[e.TaskID] = append(ns.notify[e.TaskID], k)
		}
	}
	return ns
}

// rowIndex is the index in evs of the first snapshot of task where the
// agent labelled label has an agentId (Claude Code's queued rows have none:
// they have not started) and is in one of states (-1: none), and that id.
func (ns *nestedStream) rowIndex(task, label string, states ...string) (int, string) {
	for k, e := range ns.evs {
		if e.TaskID != task || e.Subtype != "task_progress" {
			continue
		}
		for _, r := range e.Progress {
			for _, st := range states {
				if r.Type == "workflow_agent" && r.Label == label && r.AgentID != "" && r.State == st {
					return k, r.AgentID
				}
			}
		}
	}
	return -1, ""
}

// ownTokens sums the tokens of task's agents in its last snapshot.
func (ns *nestedStream) ownTokens(task string) int64 {
	var sum int64
	for k := len(ns.evs) - 1; k >= 0; k-- {
		e := ns.evs[k]
		if e.TaskID != task || e.Progress == nil {
			continue
		}
		for _, r := range e.Progress {
			sum += r.Tokens
		}
		return sum
	}
	return -1
}

// TestNestedScenario checks the nested scenario in both dialects: three
// runs, each launched by an agent of the one above it and naming it, the
// launcher live before and done after the run it launched, each run's
// usage its own agents' only, and a remote agent task beside them.
func TestNestedScenario(t *testing.T) {
	cases := []struct {
		dialect string
		seed    int64
	}{
		{DialectCBC, 7},
		{DialectCBC, 11},
		{DialectClaude, 7},
		{DialectClaude, 11},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s-seed%d", c.dialect, c.seed), func(t *testing.T) {
			cfg := Config{Scenario: ScenarioNested, Dialect: c.dialect, Epoch: testEpoch, Seed: c.seed, Noise: 300}
			out, expect := runSim(t, cfg, initLine, userLine("Please run the nested workflow."))
			evs := parseLines(t, out)
			checkStream(t, c.dialect, false, evs)
			checkExpect(t, expect, evs)
			ns := readNested(t, out)
			checkNestedRuns(t, ns)
			checkOwnUsage(t, ns, expect)
			checkRemote(t, ns)
		})
	}
}

// checkNestedRuns checks the three runs' task_started lines and the order
// of each launch against its launcher's rows.
func checkNestedRuns(t *testing.T, ns *nestedStream) {
	t.Helper()
	top, child, grand := ns.byName["sim-nested"], ns.byName["sim-nested-child"], ns.byName["sim-nested-grandchild"]
	if top == "" || child == "" || grand == "" || len(ns.byName) != 3 {
		t.Fatalf("workflow runs %v, want sim-nested, sim-nested-child and sim-nested-grandchild", ns.byName)
	}
	for id, k := range ns.started {
		if e := ns.evs[k]; id != child && id != grand && (e.SpawnDepth != nil || e.ParentTaskID != nil || e.ParentAgentID != nil) {
			t.Errorf("task %s (%s) is not nested but carries spawn_depth/parent fields", id, e.TaskType)
		}
	}
	links := []struct {
		run, parent, launcher string
		depth                 int
	}{
		{child, top, "planner", 2},
		{grand, child, "deep", 3},
	}
	for _, l := range links {
		e := ns.evs[ns.started[l.run]]
		if e.SpawnDepth == nil || *e.SpawnDepth != l.depth || e.ParentTaskID == nil || *e.ParentTaskID != l.parent || e.ParentAgentID == nil {
			t.Errorf("run %s: spawn_depth %v parent_task_id %v parent_agent_id %v; want %d, %s and %s's agentId",
				l.run, e.SpawnDepth, e.ParentTaskID, e.ParentAgentID, l.depth, l.parent, l.launcher)
			continue
		}
		live, id := ns.rowIndex(l.parent, l.launcher, "start")
		if live < 0 || live > ns.started[l.run] || id != *e.ParentAgentID {
			t.Errorf("run %s: parent_agent_id %s; %s's row before the launch: at %d with agentId %q (launch at %d)",
				l.run, *e.ParentAgentID, l.launcher, live, id, ns.started[l.run])
		}
		done, _ := ns.rowIndex(l.parent, l.launcher, "done", "error")
		if n := ns.notify[l.run]; len(n) != 1 || done < n[0] {
			t.Errorf("run %s: %s ends at %d, before the run's notification %v", l.run, l.launcher, done, n)
		}
	}
	for id, k := range ns.started {
		if n := len(ns.notify[id]); n != 1 || ns.notify[id][0] < k {
			t.Errorf("task %s (%s): %d notifications (want exactly one, after its start)", id, ns.evs[k].TaskType, n)
		}
	}
	report, _ := ns.rowIndex(top, "report", "start")
	if planner, _ := ns.rowIndex(top, "planner", "done"); report < planner {
		t.Errorf("report starts at %d, before planner ends at %d", report, planner)
	}
}

// checkOwnUsage checks that each run's notification and ground truth count
// its own agents' tokens only: nothing of a nested run is rolled up.
func checkOwnUsage(t *testing.T, ns *nestedStream, expect []byte) {
	t.Helper()
	truth := map[string]ExpectedRun{}
	for _, line := range bytes.Split(bytes.TrimSpace(expect), []byte("\n")) {
		var r ExpectedRun
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		truth[r.TaskID] = r
	}
	want := map[string]int64{"sim-nested": 960 + 520, "sim-nested-child": 730 + 450, "sim-nested-grandchild": 380 + 410}
	for name, tokens := range want {
		id := ns.byName[name]
		e := ns.evs[ns.notify[id][0]]
		if e.Status != "completed" || e.Usage == nil || e.Usage.TotalTokens != tokens || ns.ownTokens(id) != tokens {
			t.Errorf("%s: notification %s with usage %+v, agents' tokens %d; want completed, %d", name, e.Status, e.Usage, ns.ownTokens(id), tokens)
		}
		r := truth[id]
		if r.Kind != KindWorkflow || r.Workflow != name || r.Status != "completed" || r.Tokens != tokens || len(r.Agents) != 2 {
			t.Errorf("%s: ground truth %+v", name, r)
		}
	}
	remote := 0
	for _, r := range truth {
		if r.Kind == KindTask && r.TaskType == "remote_agent" && r.Status == "completed" {
			remote++
		}
	}
	if len(truth) != 4 || remote != 1 {
		t.Errorf("ground truth has %d tasks, %d completed remote agents; want 4 and 1", len(truth), remote)
	}
}

// checkRemote checks the remote agent's lines: started while the top-level
// run is in phase 1, launched, completed once, never a workflow.
func checkRemote(t *testing.T, ns *nestedStream) {
	t.Helper()
	var id string
	for tid, k := range ns.started {
		if ns.evs[k].TaskType == "remote_agent" {
			id = tid
		}
	}
	if id == "" {
		t.Fatal("no remote_agent task")
	}
	var seq []string
	for _, e := range ns.evs {
		if e.TaskID != id {
			continue
		}
		if e.WorkflowName != nil || e.Progress != nil {
			t.Errorf("remote agent line with workflow fields: %+v", e)
		}
		s := e.Subtype
		switch e.Subtype {
		case "task_updated":
			s += ":" + e.Patch["status"].(string)
		case "task_notification":
			s += ":" + e.Status
			if e.Usage == nil || e.Usage.TotalTokens == 0 {
				t.Error("remote agent's notification without usage")
			}
		}
		seq = append(seq, s)
	}
	want := "task_started,task_updated:remote_launched,task_updated:completed,task_notification:completed"
	if got := strings.Join(seq, ","); got != want {
		t.Errorf("remote agent lines %s, want %s", got, want)
	}
	top := ns.byName["sim-nested"]
	planner, _ := ns.rowIndex(top, "planner", "done")
	if k := ns.started[id]; k < ns.started[top] || k > planner {
		t.Errorf("remote agent starts at %d, not in the top-level run's phase 1 (%d..%d)", k, ns.started[top], planner)
	}
}

// TestNestedStop interrupts the nested scenario while its grandchild runs:
// every run stops once, innermost first, and the remote agent is killed.
func TestNestedStop(t *testing.T) {
	for _, d := range []string{DialectCBC, DialectClaude} {
		t.Run(d, func(t *testing.T) {
			// Agent starts: planner, deep, shallow, leaf:a, leaf:b.
			cfg := Config{Scenario: ScenarioNested, Dialect: d, Epoch: testEpoch, Seed: 7, InterruptAfter: 5}
			out, expect := runSim(t, cfg, initLine, userLine("Please run the nested workflow."))
			evs := parseLines(t, out)
			checkStream(t, d, true, evs)
			checkExpect(t, expect, evs)
			ns := readNested(t, out)
			var order []string
			for _, e := range ns.evs {
				if e.Subtype == "task_notification" {
					if e.Status != "stopped" {
						t.Errorf("task %s: %s, want stopped", e.TaskID, e.Status)
					}
					order = append(order, e.TaskID)
				}
			}
			want := []string{ns.byName["sim-nested-grandchild"], ns.byName["sim-nested-child"], ns.byName["sim-nested"]}
			if len(order) != 4 || strings.Join(order[:3], ",") != strings.Join(want, ",") || ns.evs[ns.started[order[3]]].TaskType != "remote_agent" {
				t.Errorf("notifications in order %v, want %v then the remote agent", order, want)
			}
		})
	}
}

// TestStopRequestedNested: a stop_task of a run stops the runs it
// launched, not the run that launched it.
func TestStopRequestedNested(t *testing.T) {
	top := &task{id: "w1"}
	child := &task{id: "w2", parent: top}
	grand := &task{id: "w3", parent: child}
	cases := []struct {
		stop string
		want [3]bool // top, child, grand
	}{
		{"", [3]bool{false, false, false}},
		{"w1", [3]bool{true, true, true}},
		{"w2", [3]bool{false, true, true}},
		{"w3", [3]bool{false, false, true}},
	}
	for _, c := range cases {
		s := &session{stopTasks: map[string]bool{c.stop: c.stop != ""}}
		got := [3]bool{s.stopRequested(top), s.stopRequested(child), s.stopRequested(grand)}
		if got != c.want {
			t.Errorf("stop_task %q: top, child, grand stop %v, want %v", c.stop, got, c.want)
		}
	}
}
