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

// TestPageAgentStalled: a run with stalled agents says how many; each
// agent says "stalled" while it is and "stalled ×N" once it moved; the
// marks go when the agents move (the run's) and never appear for agents
// that never stalled.
func TestPageAgentStalled(t *testing.T) {
	p := newTestPage(Options{Runs: 5})
	r := &ingest.Run{TaskID: "w1", Workflow: true, Name: "review", Status: ingest.StatusRunning, Start: 1_000,
		Agents: []ingest.Agent{
			{Index: 1, Label: "reader", State: ingest.AgentRunning, Start: 1_000},
			{Index: 2, Label: "writer", State: ingest.AgentRunning, Start: 1_000},
			{Index: 3, Label: "fine", State: ingest.AgentRunning, Start: 1_000},
		}}
	obs := func(k ingest.LifecycleKind, i int) {
		p.Observe(ingest.Lifecycle{Kind: k, Run: r, Agent: &r.Agents[i]})
	}
	p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
	for i := range r.Agents {
		obs(ingest.AgentStarted, i)
	}
	stall := func(i int, on bool) {
		a := &r.Agents[i]
		a.Stalled = on
		k := ingest.AgentResumed
		if on {
			a.Stalls++
			r.AgentsStalled++
			k = ingest.AgentStalled
		} else {
			r.AgentsStalled--
		}
		obs(k, i)
	}
	stall(0, true)
	stall(1, true)
	html := render(t, p)
	for _, want := range []string{"2 agents stalled</span>", `#1 reader</td>`, `running <span class="st-error">stalled</span>`} {
		if !strings.Contains(html, want) {
			t.Errorf("two agents stalled: no %q on the page", want)
		}
	}
	if n := strings.Count(html, `<span class="st-error">stalled</span>`); n != 2 {
		t.Errorf("%d agents marked stalled, want 2", n)
	}
	stall(1, false)
	stall(1, true)
	stall(1, false)
	html = render(t, p)
	for _, want := range []string{"1 agent stalled</span>", `<span class="st-error">stalled ×2</span>`} {
		if !strings.Contains(html, want) {
			t.Errorf("agent 1 stalled, agent 2 twice before: no %q on the page", want)
		}
	}
	stall(0, false)
	html = render(t, p)
	if strings.Contains(html, "agent stalled") || strings.Contains(html, `<span class="st-error">stalled</span>`) {
		t.Errorf("no agent stalled any more, but the page says one is")
	}
	if n := strings.Count(html, "stalled ×"); n != 2 {
		t.Errorf("%d agents marked as having stalled, want 2 (the third never did)", n)
	}
}
