package runspage

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/golden"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// sonnet is one model call of the fixture.
func sonnet(usd float64, in, out int64) cost.Model {
	return cost.Model{Model: "claude-sonnet-4-5", CostUSD: usd, Tokens: cost.Tokens{in, out}}
}

// TestPageCostGolden pins the cost cells: a finalized run whose run and
// agents have a cost (an errored agent without), a run without any (no
// column), and an open run whose agent's cost arrives by ModelCallSeen.
func TestPageCostGolden(t *testing.T) {
	p := newTestPage(Options{})
	done := agent(1, 1, "reader", ingest.AgentDone, 0, 3*time.Second, 1200)
	done.Cost.Add(sonnet(0.0123, 1000, 200), 1)
	failed := agent(2, 1, "checker", ingest.AgentError, time.Second, 2*time.Second, 0)
	failed.Error = streamjson.WithheldError
	r := &ingest.Run{TaskID: "wf-cost", Name: "review-pr", Status: ingest.StatusFailed, Start: ms(0), End: ms(3 * time.Second),
		Usage:  streamjson.Usage{TotalTokens: 1200},
		Phases: []ingest.Phase{{Index: 1, Title: "Read", Start: ms(0), End: ms(3 * time.Second)}},
		Agents: []ingest.Agent{done, failed}, InterruptLatencyMs: -1}
	r.Cost.Add(sonnet(0.0123, 1000, 200), 1)
	finished(p, r)
	finished(p, &ingest.Run{TaskID: "wf-free", Name: "no-cost", Status: ingest.StatusCompleted, Start: ms(0), End: ms(time.Second),
		Agents: []ingest.Agent{agent(1, 0, "solo", ingest.AgentDone, 0, time.Second, 10)}, InterruptLatencyMs: -1})

	open := &ingest.Run{TaskID: "wf-open", Workflow: true, Name: "deploy", Status: ingest.StatusRunning, StartedAt: ms(10 * time.Second),
		FirstSeen: ms(10 * time.Second), LastSeen: ms(20 * time.Second), InterruptLatencyMs: -1,
		Agents: []ingest.Agent{agent(1, 0, "package", ingest.AgentRunning, 10*time.Second, -1, 0)}}
	p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: open})
	call := &ingest.ModelCall{AgentID: "a1", Cost: sonnet(0.5, 100, 20), Scope: ingest.CallWorkflow}
	open.Agents[0].Cost.Add(call.Cost, 1)
	open.Cost.Add(call.Cost, 1)
	p.Observe(ingest.Lifecycle{Kind: ingest.ModelCallSeen, Run: open, Agent: &open.Agents[0], Call: call})
	// A main-conversation call has no run: not the page's.
	p.Observe(ingest.Lifecycle{Kind: ingest.ModelCallSeen, Call: &ingest.ModelCall{Cost: sonnet(1, 1, 1)}})

	got := render(t, p)
	golden.Assert(t, "testdata/page-cost.golden.html", []byte(got))
	for _, want := range []string{"1 agent · $0.5000 ·", `<td class="tok cost">$0.5000</td>`, "2 agents · $0.0123 ·", `<td class="tok cost">$0.0123</td>`, `colspan="5"`} {
		if !strings.Contains(got, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// The run without cost has no cost column.
	free := got[strings.Index(got, "no-cost"):]
	free = free[:strings.Index(free, "</section>")]
	if strings.Contains(free, "tok cost") || strings.Contains(free, "$") {
		t.Errorf("a run without cost shows one:\n%s", free)
	}
}

// TestPageCostHostile: a cost that is not a number, or absurd, stays a
// short text.
func TestPageCostHostile(t *testing.T) {
	p := newTestPage(Options{})
	a := agent(1, 1, "x", ingest.AgentDone, 0, time.Second, 1)
	a.Cost.Add(sonnet(math.NaN(), 1, 1), 1)
	r := &ingest.Run{TaskID: "t", Name: "n", Status: ingest.StatusCompleted, Start: ms(0), End: ms(time.Second), Agents: []ingest.Agent{a}}
	r.Cost.Add(sonnet(1e300, 1, 1), 1)
	finished(p, r)
	got := render(t, p)
	for _, want := range []string{"$?", "$1e&#43;300"} {
		if !strings.Contains(got, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(got, "NaN") || strings.Contains(got, "000000000000") {
		t.Error("page prints a raw number")
	}
}
