package runspage

import (
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// TestPageStalled: a run stalled now says so; one that was says how often;
// one that never was says nothing.
func TestPageStalled(t *testing.T) {
	for _, tc := range []struct {
		stalled bool
		stalls  int
		want    string
	}{
		{true, 1, "stalled</span>"},
		{false, 2, "stalled ×2</span>"},
		{false, 0, ""},
	} {
		p := newTestPage(Options{Runs: 5})
		r := &ingest.Run{TaskID: "w1", Workflow: true, Name: "review", Status: ingest.StatusRunning, Start: 1_000,
			Stalled: tc.stalled, Stalls: tc.stalls}
		p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
		p.Observe(ingest.Lifecycle{Kind: ingest.RunStalled, Run: r})
		html := render(t, p)
		if tc.want == "" {
			if strings.Contains(html, "stalled") {
				t.Errorf("never stalled, but the page says stalled")
			}
			continue
		}
		if !strings.Contains(html, tc.want) {
			t.Errorf("stalled=%v stalls=%d: no %q on the page", tc.stalled, tc.stalls, tc.want)
		}
	}
}

// TestPageNested: a nested run says which agent of which workflow launched
// it, and how deep it is; a top-level run says nothing of the kind.
func TestPageNested(t *testing.T) {
	p := newTestPage(Options{Runs: 5})
	top := &ingest.Run{TaskID: "w1", RunID: "r1", Workflow: true, Name: "review", Status: ingest.StatusRunning, Start: 1_000}
	child := &ingest.Run{TaskID: "w2", RunID: "r2", Workflow: true, Name: "deep-dive", Status: ingest.StatusRunning, Start: 2_000, SpawnDepth: 2,
		Parent: ingest.AgentRef{TaskID: "w1", RunID: "r1", Index: 3, Label: "planner", Workflow: "review", RootTask: "w1", RootRun: "r1"}}
	p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: top})
	p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: child})
	html := render(t, p)
	if n := strings.Count(html, "nested (depth"); n != 1 || !strings.Contains(html, "nested (depth 2), launched by agent 3 planner of review") {
		t.Errorf("%d nested marks; want the child's, launched by planner of review", n)
	}
}

// TestPageNestedNoDepth: a workflow a fork launched has no spawn_depth on
// the wire (PROTOCOL.md "Nested runs"): the page says it is nested, and no
// depth it was not told.
func TestPageNestedNoDepth(t *testing.T) {
	p := newTestPage(Options{Runs: 5})
	forked := &ingest.Run{TaskID: "w2", RunID: "r2", Workflow: true, Name: "forked", Status: ingest.StatusRunning, Start: 2_000,
		Parent: ingest.AgentRef{TaskID: "afork", RunID: "rf", Index: -1, RootTask: "afork", RootRun: "rf"}}
	p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: forked})
	html := render(t, p)
	if strings.Contains(html, "depth") || !strings.Contains(html, "nested, launched by task afork") {
		t.Errorf("want \"nested, launched by task afork\" and no depth:\n%s", html)
	}
}
