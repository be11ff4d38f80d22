package traces

import (
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestNestedRunSpans: a nested workflow run's span is a child of the agent
// that launched it, in its chain's one trace, two levels deep, with its
// depth; a run launched by a running sub-agent task hangs under that task's
// span; neither is linked as well. Through the whole pipeline (decoder,
// Tracker, Sink).
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
