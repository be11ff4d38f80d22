package traces

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// TestNestedRunSpans: a nested workflow run's span is a child of the agent
// that launched it, in its chain's one trace, two levels deep, with its
// depth; a run launched by a running sub-agent task hangs under that task's
// span; neither is linked as well. Through the whole pipeline (decoder,
// Tracker, Sink). No CLI writes parent_agent_id (PROTOCOL.md "Nested
// runs"): the decoder still accepts the typed field, and this holds what
// it does; TestNestedCorpusSpans holds the recorded shapes.
func TestNestedRunSpans(t *testing.T) {
	const ms = 1796205994000
	started := func(task, name, extra string) string {
		return fmt.Sprintf(`{"type":"system","subtype":"task_started","task_id":%q,"run_id":"r-%s","task_type":"local_workflow","workflow_name":%q,"session_id":"S"%s}`, task, task, name, extra)
	}
	agent := func(task string, idx int, id, state string, at int64) string {
		end := ""
		if state == "done" {
			end = fmt.Sprintf(`,"endedAt":%d`, at+5)
		}
		return fmt.Sprintf(`{"type":"system","subtype":"task_progress","task_id":%q,"run_id":"r-%s","session_id":"S","workflow_progress":[{"type":"workflow_agent","index":%d,"agentId":%q,"label":"%s-l%d","state":%q,"startedAt":%d%s}]}`,
			task, task, idx, id, task, idx, state, at, end)
	}
	done := func(task string) string {
		return fmt.Sprintf(`{"type":"system","subtype":"task_notification","task_id":%q,"run_id":"r-%s","status":"completed","session_id":"S"}`, task, task)
	}
	lines := []string{
		started("w1", "top", ""),
		agent("w1", 2, "A2", "start", ms),
		started("w2", "child", `,"spawn_depth":2,"parent_task_id":"w1","parent_agent_id":"A2"`),
		agent("w2", 1, "B1", "start", ms+10),
		started("w3", "grandchild", `,"spawn_depth":3,"parent_agent_id":"B1"`),
		agent("w3", 1, "C1", "done", ms+20),
		done("w3"),
		agent("w2", 1, "B1", "done", ms+10),
		done("w2"),
		agent("w1", 2, "A2", "done", ms),
		done("w1"),
		`{"type":"system","subtype":"task_started","task_id":"t1","run_id":"r-t1","task_type":"local_agent","session_id":"S"}`,
		started("w4", "by-task", `,"spawn_depth":2,"parent_task_id":"t1"`),
		done("w4"),
		`{"type":"system","subtype":"task_notification","task_id":"t1","run_id":"r-t1","status":"completed","session_id":"S"}`,
	}
	tr := newTracing(t)
	for _, l := range lines {
		tr.feed([][]byte{[]byte(l + "\n")})
	}
	tr.p.Close()
	spans := tr.exp.GetSpans()
	byName := map[string]int{}
	for i, sp := range spans {
		byName[sp.Name] = i
	}
	top := TraceID("w1", "r-w1")
	for _, c := range []struct {
		span   string
		trace  trace.TraceID
		parent trace.SpanID
		depth  string
	}{
		{"invoke_workflow child", top, SpanID("w1", "r-w1", kindAgent, 2), "cbc.spawn_depth=2"},
		{"invoke_workflow grandchild", top, SpanID("w2", "r-w2", kindAgent, 1), "cbc.spawn_depth=3"},
		{"invoke_agent w2-l1", top, SpanID("w2", "r-w2", kindWorkflow, 0), ""},
		{"invoke_agent w3-l1", top, SpanID("w3", "r-w3", kindWorkflow, 0), ""},
		{"invoke_workflow by-task", TraceID("t1", "r-t1"), SpanID("t1", "r-t1", kindWorkflow, 0), "cbc.spawn_depth=2"},
	} {
		i, ok := byName[c.span]
		if !ok {
			t.Fatalf("no span %q in\n%s", c.span, Tree(spans))
		}
		sp := spans[i]
		if sp.SpanContext.TraceID() != c.trace || sp.Parent.SpanID() != c.parent || len(sp.Links) != 0 {
			t.Errorf("%s: trace %s parent %s links %d; want trace %s parent %s, no link\n%s", c.span, sp.SpanContext.TraceID(), sp.Parent.SpanID(), len(sp.Links), c.trace, c.parent, Tree(spans))
		}
		if !strings.Contains(attrLine(sp.Attributes), c.depth) {
			t.Errorf("%s: attributes %s lack %q", c.span, attrLine(sp.Attributes), c.depth)
		}
	}
	// The parent agent's span exists where the child points.
	found := false
	for _, sp := range spans {
		found = found || (sp.SpanContext.TraceID() == top && sp.SpanContext.SpanID() == SpanID("w1", "r-w1", kindAgent, 2))
	}
	if !found {
		t.Errorf("the launching agent's span is not exported\n%s", Tree(spans))
	}
}

// nestedCorpus is the real Claude Code 2.1.335 recordings of nested runs.
const nestedCorpus = "../testdata/corpus/claude-code-2.1.335-nested/"

// TestNestedCorpusSpans replays the four recordings of nested runs and
// checks where every span hangs: a sub-agent's sub-agent under its
// launcher, with its depth; a sub-agent's shell under it, and the resumed
// sub-agent in its first run's trace, under its first run; a fork's
// workflow under the fork, with no depth; a script's workflow() child as a
// phase of kind child inside its parent, holding its agent. No span is
// linked: every launcher ran when its child started.
func TestNestedCorpusSpans(t *testing.T) {
	type hang struct {
		task, run          string // the span's run
		kind               string // kindWorkflow (root span) or kindPhase
		index              int
		parentTask, parent string // "" for a root span
		parentKind         string
		parentIndex        int
		rootTask, rootRun  string // the trace
		attrs              []string
		absent             []string
	}
	cases := map[string][]hang{
		"nestagent.ndjson": {
			{task: "ac7ac44cb81ef6b97", run: "0mx8giwik-825a4240", kind: kindWorkflow, rootTask: "ac7ac44cb81ef6b97", rootRun: "0mx8giwik-825a4240",
				attrs: []string{"cbc.spawn_depth=1"}},
			{task: "a73306778bb83d9eb", run: "0mx8giwkx-84a9ba28", kind: kindWorkflow, parentTask: "ac7ac44cb81ef6b97", parent: "0mx8giwik-825a4240", parentKind: kindWorkflow,
				rootTask: "ac7ac44cb81ef6b97", rootRun: "0mx8giwik-825a4240", attrs: []string{"cbc.spawn_depth=2", "cbc.task.type=local_agent"}},
		},
		"agentbash.ndjson": {
			{task: "bpzklu9dh", run: "0mx8gjcc5-3be7138a", kind: kindWorkflow, parentTask: "a0556c589d0d7584d", parent: "0mx8gjc9f-8970af1c", parentKind: kindWorkflow,
				rootTask: "a0556c589d0d7584d", rootRun: "0mx8gjc9f-8970af1c", attrs: []string{"cbc.task.type=local_bash"}, absent: []string{"cbc.spawn_depth"}},
			{task: "a0556c589d0d7584d", run: "0mx8gjd4t-247c0002", kind: kindWorkflow, parentTask: "a0556c589d0d7584d", parent: "0mx8gjc9f-8970af1c", parentKind: kindWorkflow,
				rootTask: "a0556c589d0d7584d", rootRun: "0mx8gjc9f-8970af1c", attrs: []string{"cbc.spawn_depth=1", "cbc.run.id=0mx8gjd4t-247c0002"}},
		},
		"agentfork.ndjson": {
			{task: "webyprft3", run: "0mx8gjlf8-93b0d0af", kind: kindWorkflow, parentTask: "ade94e88bd26dedbd", parent: "0mx8gjld6-78d9229f", parentKind: kindWorkflow,
				rootTask: "ade94e88bd26dedbd", rootRun: "0mx8gjld6-78d9229f", attrs: []string{"gen_ai.workflow.name=mock-nested-leaf"}, absent: []string{"cbc.spawn_depth"}},
		},
		"wfinline.ndjson": {
			{task: "wddq6rliz", run: "0mx8gkhz5-17576536", kind: kindPhase, index: 3, parentTask: "wddq6rliz", parent: "0mx8gkhz5-17576536", parentKind: kindWorkflow,
				rootTask: "wddq6rliz", rootRun: "0mx8gkhz5-17576536", attrs: []string{"cbc.phase.kind=child", "cbc.phase.title=▸ nestwf"}},
			{task: "wddq6rliz", run: "0mx8gkhz5-17576536", kind: kindAgent, index: 2, parentTask: "wddq6rliz", parent: "0mx8gkhz5-17576536", parentKind: kindPhase, parentIndex: 3,
				rootTask: "wddq6rliz", rootRun: "0mx8gkhz5-17576536", attrs: []string{"gen_ai.agent.name=leaf"}},
			{task: "wddq6rliz", run: "0mx8gkhz5-17576536", kind: kindPhase, index: 1, parentTask: "wddq6rliz", parent: "0mx8gkhz5-17576536", parentKind: kindWorkflow,
				rootTask: "wddq6rliz", rootRun: "0mx8gkhz5-17576536", absent: []string{"cbc.phase.kind"}},
		},
	}
	for file, hangs := range cases {
		t.Run(file, func(t *testing.T) {
			spans := replay(t, nestedCorpus+file, Options{}, false)
			for _, sp := range spans {
				if len(sp.Links) != 0 {
					t.Errorf("%s is linked: every launcher ran when its child started\n%s", sp.Name, Tree(spans))
				}
			}
			for _, h := range hangs {
				sid := SpanID(h.task, h.run, h.kind, h.index)
				var got *int
				for i := range spans {
					if spans[i].SpanContext.SpanID() == sid {
						got = &i
					}
				}
				if got == nil {
					t.Fatalf("no span %s/%s %s %d in\n%s", h.task, h.run, h.kind, h.index, Tree(spans))
				}
				sp := spans[*got]
				var wantParent trace.SpanID
				if h.parentTask != "" {
					wantParent = SpanID(h.parentTask, h.parent, h.parentKind, h.parentIndex)
				}
				if sp.SpanContext.TraceID() != TraceID(h.rootTask, h.rootRun) || sp.Parent.SpanID() != wantParent {
					t.Errorf("%s (%s): trace %s parent %s; want the trace of %s/%s, parent %s\n%s", sp.Name, h.run, sp.SpanContext.TraceID(),
						sp.Parent.SpanID(), h.rootTask, h.rootRun, wantParent, Tree(spans))
				}
				line := attrLine(sp.Attributes)
				for _, a := range h.attrs {
					if !strings.Contains(line, a) {
						t.Errorf("%s: attributes %s lack %s", sp.Name, line, a)
					}
				}
				for _, a := range h.absent {
					if strings.Contains(line, a) {
						t.Errorf("%s: attributes %s have %s", sp.Name, line, a)
					}
				}
			}
		})
	}
}

// TestLateChildLinkedSpan: a sub-agent's shell that starts after the
// sub-agent was finalized (past its grace window) still gets its
// parent_task link, to the sub-agent's span in the sub-agent's trace;
// one naming a task never seen gets none. Through the whole pipeline,
// on the stream's clock (written_at).
func TestLateChildLinkedSpan(t *testing.T) {
	at := func(ms int64) string {
		return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
	}
	const t0 = 1796356932824
	lines := []string{
		fmt.Sprintf(`{"type":"system","subtype":"task_started","task_id":"P","run_id":"0p","task_type":"local_agent","spawn_depth":1,"session_id":"S","written_at":%q}`, at(t0)),
		fmt.Sprintf(`{"type":"system","subtype":"task_started","task_id":"Q","run_id":"0q","task_type":"local_agent","spawn_depth":2,"parent_task_id":"P","session_id":"S","written_at":%q}`, at(t0+5)),
		fmt.Sprintf(`{"type":"system","subtype":"task_notification","task_id":"Q","run_id":"0q","status":"completed","session_id":"S","written_at":%q}`, at(t0+10)),
		fmt.Sprintf(`{"type":"system","subtype":"task_notification","task_id":"P","run_id":"0p","status":"completed","session_id":"S","written_at":%q}`, at(t0+20)),
		// Well past the 5 s grace window: P and Q are finalized.
		fmt.Sprintf(`{"type":"system","subtype":"task_started","task_id":"B","run_id":"0b","task_type":"local_bash","parent_task_id":"Q","owned_by_subagent":true,"session_id":"S","written_at":%q}`, at(t0+60_000)),
		fmt.Sprintf(`{"type":"system","subtype":"task_notification","task_id":"B","run_id":"0b","status":"completed","session_id":"S","written_at":%q}`, at(t0+61_000)),
		fmt.Sprintf(`{"type":"system","subtype":"task_started","task_id":"C","run_id":"0c","task_type":"local_bash","parent_task_id":"nobody","session_id":"S","written_at":%q}`, at(t0+62_000)),
		fmt.Sprintf(`{"type":"system","subtype":"task_notification","task_id":"C","run_id":"0c","status":"completed","session_id":"S","written_at":%q}`, at(t0+63_000)),
	}
	tr := newTracing(t)
	for _, l := range lines {
		tr.feed([][]byte{[]byte(l + "\n")})
	}
	tr.p.Close()
	spans := tr.exp.GetSpans()
	seen := 0
	for _, sp := range spans {
		run, _ := attr(&sp, AttrRunID)
		switch run {
		case "0b":
			seen++
			if len(sp.Links) != 1 || sp.Parent.IsValid() {
				t.Fatalf("B: parent %v, %d links; want a root span with one link\n%s", sp.Parent, len(sp.Links), Tree(spans))
			}
			l := sp.Links[0]
			// Q hangs under P: its span is in P's trace.
			if l.SpanContext.TraceID() != TraceID("P", "0p") || l.SpanContext.SpanID() != SpanID("Q", "0q", kindWorkflow, 0) ||
				!strings.Contains(attrLine(l.Attributes), "cbc.link.type=parent_task") {
				t.Errorf("B's link %v %s; want Q's span in P's trace, type parent_task", l.SpanContext, attrLine(l.Attributes))
			}
		case "0c":
			seen++
			if len(sp.Links) != 0 {
				t.Errorf("C names a task never seen, yet is linked: %v", sp.Links)
			}
		}
	}
	if seen != 2 {
		t.Fatalf("the spans of B and C: %d found\n%s", seen, Tree(spans))
	}
	if n := tr.p.Stats().LaunchersEvicted(); n != 0 {
		t.Errorf("LaunchersEvicted %d, want 0", n)
	}
}
