package simulate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// nestedEvent is what the nested tests read of a task_* or
// background_tasks_changed line.
type nestedEvent struct {
	Subtype         string         `json:"subtype"`
	TaskID          string         `json:"task_id"`
	RunID           string         `json:"run_id"`
	TaskType        string         `json:"task_type"`
	SubagentType    string         `json:"subagent_type"`
	WorkflowName    *string        `json:"workflow_name"`
	SpawnDepth      *int           `json:"spawn_depth"`
	ParentTaskID    *string        `json:"parent_task_id"`
	ParentAgentID   *string        `json:"parent_agent_id"`
	Prompt          *string        `json:"prompt"`
	IsBackgrounded  *bool          `json:"is_backgrounded"`
	OwnedBySubagent bool           `json:"owned_by_subagent"`
	Status          string         `json:"status"`
	Patch           map[string]any `json:"patch"`
	Tasks           []nestedEvent  `json:"tasks"`
	Usage           *struct {
		TotalTokens int64 `json:"total_tokens"`
	} `json:"usage"`
	Progress []struct {
		Type       string `json:"type"`
		Index      int    `json:"index"`
		Kind       string `json:"kind"`
		PhaseIndex int    `json:"phaseIndex"`
		AgentID    string `json:"agentId"`
		Label      string `json:"label"`
		State      string `json:"state"`
		Tokens     int64  `json:"tokens"`
	} `json:"workflow_progress"`
	raw  string
	line int // 0-based index in the output
}

// nestedStream is a nested scenario's output, indexed for the assertions.
type nestedStream struct {
	evs     []nestedEvent     // task_* lines only, in order
	bg      []nestedEvent     // background_tasks_changed lines
	starts  []int             // indexes in evs of every task_started
	byName  map[string]string // workflow_name → task_id
	notify  map[string][]int  // task_id/run_id → indexes of its notifications
	runsOf  map[string][]int  // task_id → indexes of its task_started, in order
	started map[string]int    // task_id → index in evs of its first task_started
}

func readNested(t *testing.T, out []byte) *nestedStream {
	t.Helper()
	ns := &nestedStream{byName: map[string]string{}, notify: map[string][]int{}, runsOf: map[string][]int{}, started: map[string]int{}}
	for i, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		bg := bytes.Contains(line, []byte(`"subtype":"background_tasks_changed"`))
		if !bg && !bytes.Contains(line, []byte(`"subtype":"task_`)) {
			continue
		}
		var e nestedEvent
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		e.line, e.raw = i, string(line)
		if bg {
			ns.bg = append(ns.bg, e)
			continue
		}
		ns.evs = append(ns.evs, e)
		k := len(ns.evs) - 1
		switch e.Subtype {
		case "task_started":
			ns.starts = append(ns.starts, k)
			ns.runsOf[e.TaskID] = append(ns.runsOf[e.TaskID], k)
			if _, ok := ns.started[e.TaskID]; !ok {
				ns.started[e.TaskID] = k
			}
			if e.WorkflowName != nil {
				ns.byName[*e.WorkflowName] = e.TaskID
			}
		case "task_notification":
			ns.notify[e.TaskID+"/"+e.RunID] = append(ns.notify[e.TaskID+"/"+e.RunID], k)
		}
	}
	return ns
}

// first returns the index in evs of the first task_started for which ok
// holds, or fails.
func (ns *nestedStream) first(t *testing.T, what string, ok func(e *nestedEvent) bool) int {
	t.Helper()
	for _, k := range ns.starts {
		if ok(&ns.evs[k]) {
			return k
		}
	}
	t.Fatalf("no task_started of %s", what)
	return -1
}

// end is the index in evs of the notification of the run started at k.
func (ns *nestedStream) end(t *testing.T, k int) int {
	t.Helper()
	e := ns.evs[k]
	n := ns.notify[e.TaskID+"/"+e.RunID]
	if len(n) != 1 {
		t.Fatalf("run %s/%s: %d notifications, want 1", e.TaskID, e.RunID, len(n))
	}
	return n[0]
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

// TestNestedScenario checks the nested scenario in both dialects against
// what Claude Code 2.1.335 writes (PROTOCOL.md "Nested runs"): sub-agents
// 3 deep, a sub-agent's shell and the sub-agent resumed after it, a fork's
// workflow, a workflow() child row; never a workflow agent launching, never
// parent_agent_id, never spawn_depth on a workflow; each run's usage its
// own agents' only; a remote agent task beside them.
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
			claude := c.dialect == DialectClaude
			checkNeverSeen(t, ns)
			checkSubAgentChain(t, ns, claude)
			checkShellAndResume(t, ns, claude)
			checkForkWorkflow(t, ns)
			checkInlineChild(t, ns)
			checkOwnUsage(t, ns, expect)
			checkRemote(t, ns)
		})
	}
}

// checkNeverSeen: what the real CLI never writes. A parent_task_id names
// a sub-agent task, never a workflow; a workflow's only a fork.
func checkNeverSeen(t *testing.T, ns *nestedStream) {
	t.Helper()
	for _, k := range ns.starts {
		e := ns.evs[k]
		if e.ParentAgentID != nil {
			t.Errorf("parent_agent_id on %s", e.raw)
		}
		if e.TaskType == "local_workflow" && e.SpawnDepth != nil {
			t.Errorf("spawn_depth on a workflow: %s", e.raw)
		}
		if e.ParentTaskID == nil {
			continue
		}
		p, ok := ns.started[*e.ParentTaskID]
		if !ok {
			t.Errorf("parent_task_id %s never started", *e.ParentTaskID)
			continue
		}
		if pt := ns.evs[p].TaskType; pt != "local_agent" && pt != "Agent" {
			t.Errorf("%s launched by a %s", e.TaskID, pt)
		}
		if e.TaskType == "local_workflow" && ns.evs[p].SubagentType != "fork" {
			t.Errorf("workflow %s launched by a %s sub-agent, not a fork", e.TaskID, ns.evs[p].SubagentType)
		}
	}
}

// checkSubAgentChain: three sub-agents, each launched by the one before
// (spawn_depth 1-3 with Claude Code), the nested ones in the foreground,
// each ending before its launcher.
func checkSubAgentChain(t *testing.T, ns *nestedStream, claude bool) {
	t.Helper()
	byDesc := func(d string) int {
		return ns.first(t, d, func(e *nestedEvent) bool { return strings.Contains(e.raw, `"description":"`+d+`"`) })
	}
	chain := []int{byDesc("outer sub-agent"), byDesc("nested sub-agent"), byDesc("deepest sub-agent")}
	for depth, k := range chain {
		e := ns.evs[k]
		if claude && (e.SpawnDepth == nil || *e.SpawnDepth != depth+1) {
			t.Errorf("%s: spawn_depth %v, want %d", e.TaskID, e.SpawnDepth, depth+1)
		}
		if !claude && e.SpawnDepth != nil {
			t.Errorf("cbc writes spawn_depth: %s", e.raw)
		}
		if depth == 0 {
			if e.ParentTaskID != nil || e.IsBackgrounded == nil || !*e.IsBackgrounded {
				t.Errorf("the outer sub-agent: %s", e.raw)
			}
			continue
		}
		launcher := ns.evs[chain[depth-1]]
		if e.ParentTaskID == nil || *e.ParentTaskID != launcher.TaskID || e.IsBackgrounded == nil || *e.IsBackgrounded {
			t.Errorf("depth %d: %s; want parent_task_id %s, in the foreground", depth+1, e.raw, launcher.TaskID)
		}
		if ns.end(t, chain[depth-1]) < k || ns.end(t, k) > ns.end(t, chain[depth-1]) {
			t.Errorf("depth %d runs outside its launcher's life", depth+1)
		}
		for _, bg := range ns.bg {
			if strings.Contains(bg.raw, e.TaskID) {
				t.Errorf("foreground sub-agent %s listed as a background task", e.TaskID)
			}
		}
	}
}

// checkShellAndResume: a sub-agent's shell (owned_by_subagent with Claude
// Code), and with Claude Code the sub-agent resumed after the shell ended:
// same task_id, a run_id sorting after, no prompt, no parent_task_id.
func checkShellAndResume(t *testing.T, ns *nestedStream, claude bool) {
	t.Helper()
	sh := ns.first(t, "the nested shell", func(e *nestedEvent) bool {
		return (e.TaskType == "local_bash" || e.TaskType == "Bash") && e.ParentTaskID != nil
	})
	e := ns.evs[sh]
	owner := ns.runsOf[*e.ParentTaskID]
	if claude != e.OwnedBySubagent {
		t.Errorf("owned_by_subagent %v in dialect claude=%v", e.OwnedBySubagent, claude)
	}
	if ns.end(t, owner[0]) < sh || ns.end(t, owner[0]) > ns.end(t, sh) {
		t.Errorf("the owner's first run must end after the shell starts and before it ends")
	}
	if !claude {
		if len(owner) != 1 {
			t.Errorf("cbc has no run_id to tell a resume from a duplicate, yet the owner started %d times", len(owner))
		}
		return
	}
	if len(owner) != 2 {
		t.Fatalf("owner %s started %d times, want 2 (a resume)", e.TaskID, len(owner))
	}
	first, again := ns.evs[owner[0]], ns.evs[owner[1]]
	if again.RunID <= first.RunID || again.Prompt != nil || again.ParentTaskID != nil || owner[1] < ns.end(t, sh) ||
		again.SpawnDepth == nil || *again.SpawnDepth != 1 {
		t.Errorf("resume %s after the shell's end at %d; want a later run_id than %s, no prompt, no parent_task_id, depth 1", again.raw, ns.end(t, sh), first.RunID)
	}
	ns.end(t, owner[1])
}

// checkForkWorkflow: a fork launches a workflow (parent_task_id, no
// spawn_depth) and ends before the workflow does.
func checkForkWorkflow(t *testing.T, ns *nestedStream) {
	t.Helper()
	wf := ns.started[ns.byName["sim-nested-forked"]]
	fork := ns.started[ns.evs[ns.first(t, "the fork", func(e *nestedEvent) bool { return e.SubagentType == "fork" })].TaskID]
	e := ns.evs[wf]
	if e.ParentTaskID == nil || *e.ParentTaskID != ns.evs[fork].TaskID || e.SpawnDepth != nil {
		t.Errorf("forked workflow %s; want parent_task_id %s and no spawn_depth", e.raw, ns.evs[fork].TaskID)
	}
	if f := ns.end(t, fork); f < wf || f > ns.end(t, wf) {
		t.Errorf("the fork ends at %d; want after the workflow starts (%d), before it ends (%d)", f, wf, ns.end(t, wf))
	}
	if top := ns.byName["sim-nested"]; ns.evs[ns.started[top]].ParentTaskID != nil {
		t.Errorf("the top-level workflow has a parent")
	}
}

// checkInlineChild: the top-level run's workflow() call is a phase row of
// kind child, listed once its agent is, holding that agent.
func checkInlineChild(t *testing.T, ns *nestedStream) {
	t.Helper()
	top := ns.byName["sim-nested"]
	seen := false
	for _, e := range ns.evs {
		if e.TaskID != top || e.Progress == nil {
			continue
		}
		child, leaf := 0, false
		for _, r := range e.Progress {
			if r.Type == "workflow_phase" && r.Kind == "child" {
				child = r.Index
			}
			if r.Type == "workflow_agent" && r.Label == "leaf" {
				leaf = true
				if child == 0 || r.PhaseIndex != child {
					t.Errorf("agent leaf in phase %d, the child row %d listed before it", r.PhaseIndex, child)
				}
			}
		}
		if child != 0 && !leaf {
			t.Errorf("the child row is listed before its agent: %s", e.raw)
		}
		seen = seen || child != 0
	}
	if !seen {
		t.Error("no workflow_phase of kind child")
	}
}

// checkOwnUsage checks that each run's notification and ground truth count
// its own agents' tokens only.
func checkOwnUsage(t *testing.T, ns *nestedStream, expect []byte) {
	t.Helper()
	truth := map[string]ExpectedRun{}
	for _, line := range bytes.Split(bytes.TrimSpace(expect), []byte("\n")) {
		var r ExpectedRun
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		truth[r.TaskID+"/"+r.RunID] = r
	}
	want := map[string]int64{"sim-nested": 960 + 520, "sim-nested-forked": 380 + 410}
	for name, tokens := range want {
		id := ns.byName[name]
		k := ns.started[id]
		e := ns.evs[ns.end(t, k)]
		if e.Status != "completed" || e.Usage == nil || e.Usage.TotalTokens != tokens || ns.ownTokens(id) != tokens {
			t.Errorf("%s: notification %s with usage %+v, agents' tokens %d; want completed, %d", name, e.Status, e.Usage, ns.ownTokens(id), tokens)
		}
		r := truth[id+"/"+ns.evs[k].RunID]
		if r.Kind != KindWorkflow || r.Workflow != name || r.Status != "completed" || r.Tokens != tokens || len(r.Agents) != 2 {
			t.Errorf("%s: ground truth %+v", name, r)
		}
	}
	if len(truth) != len(ns.starts) {
		t.Errorf("ground truth has %d runs, the stream %d", len(truth), len(ns.starts))
	}
}

// checkRemote checks the remote agent's lines: started while the top-level
// run is in phase 1, launched, completed once, never a workflow.
func checkRemote(t *testing.T, ns *nestedStream) {
	t.Helper()
	var id string
	for _, k := range ns.starts {
		if ns.evs[k].TaskType == "remote_agent" {
			id = ns.evs[k].TaskID
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
	if k := ns.started[id]; k < ns.started[ns.byName["sim-nested"]] {
		t.Errorf("remote agent starts at %d, before the top-level run", k)
	}
}

// TestNestedStop interrupts the nested scenario while the fork's workflow
// runs: it and the top-level run stop, each once; the tasks that had ended
// stay completed and nothing starts after the stop.
func TestNestedStop(t *testing.T) {
	for _, d := range []string{DialectCBC, DialectClaude} {
		t.Run(d, func(t *testing.T) {
			// Agent starts: planner, then the fork's workflow's leaf:a.
			cfg := Config{Scenario: ScenarioNested, Dialect: d, Epoch: testEpoch, Seed: 7, InterruptAfter: 2}
			out, expect := runSim(t, cfg, initLine, userLine("Please run the nested workflow."))
			evs := parseLines(t, out)
			checkStream(t, d, true, evs)
			checkExpect(t, expect, evs)
			ns := readNested(t, out)
			forked, top := ns.started[ns.byName["sim-nested-forked"]], ns.started[ns.byName["sim-nested"]]
			stopAt := ns.end(t, forked)
			for _, k := range []int{forked, top} {
				if e := ns.evs[ns.end(t, k)]; e.Status != "stopped" {
					t.Errorf("%s: %s, want stopped", ns.evs[k].TaskID, e.Status)
				}
			}
			for _, k := range ns.starts {
				if k > stopAt {
					t.Errorf("%s starts after the stop", ns.evs[k].raw)
				}
				if e := ns.evs[ns.end(t, k)]; k != forked && k != top && e.Status != "completed" {
					t.Errorf("%s ended %s before the stop, want completed", ns.evs[k].TaskID, e.Status)
				}
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
