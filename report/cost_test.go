package report

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/golden"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

const costT0 = 1796205994000

// costCall is one model call of the synthetic runs.
func costCall(model string, usd float64, in, out, read, write int64) cost.Model {
	return cost.Model{Model: model, CostUSD: usd, Tokens: cost.Tokens{in, out, read, write}}
}

// costRuns are two finalized workflow runs: one whose agents' calls the
// CLI's telemetry reported (two models, an agent without cost), one
// without any cost.
func costRuns() []ingest.Run {
	a1 := ingest.Agent{Index: 1, AgentID: "a1", Label: "reader:alpha", PhaseIndex: 1, State: ingest.AgentDone,
		Start: costT0 + 10, End: costT0 + 200, Tokens: 1210}
	a1.Cost.Add(costCall("claude-sonnet-4-5", 0.0073, 757, 302, 0, 151), 1)
	a2 := ingest.Agent{Index: 2, AgentID: "a2", Label: "check", PhaseIndex: 1, State: ingest.AgentDone,
		Start: costT0 + 20, End: costT0 + 400, Tokens: 640}
	a2.Cost.Add(costCall("claude-sonnet-4-5", 0.00195, 200, 80, 0, 40), 1)
	a2.Cost.Add(costCall("claude-haiku-4-5", 0.0004, 80, 80, 160, 0), 1)
	a3 := ingest.Agent{Index: 3, AgentID: "a3", Label: "cached", PhaseIndex: 1, State: ingest.AgentCached,
		Start: costT0 + 10, End: costT0 + 10, Cached: true}
	with := ingest.Run{TaskID: "w1", RunID: "r1", SessionID: "s1", Workflow: true, Name: "sim-review",
		Status: ingest.StatusCompleted, Start: costT0, End: costT0 + 420, InterruptLatencyMs: -1,
		Usage:  streamjson.Usage{TotalTokens: 1850, ToolUses: 1},
		Phases: []ingest.Phase{{Index: 1, Title: "Gather", Start: costT0 + 10, End: costT0 + 400}},
		Agents: []ingest.Agent{a1, a2, a3}}
	for _, a := range with.Agents {
		for _, m := range a.Cost.Models {
			with.Cost.Add(m, 0)
		}
		with.Cost.Calls += a.Cost.Calls
	}
	without := ingest.Run{TaskID: "w2", SessionID: "s1", Workflow: true, Name: "no-cost", Status: ingest.StatusFailed,
		Start: costT0 + 500, End: costT0 + 600, InterruptLatencyMs: -1,
		Agents: []ingest.Agent{{Index: 1, AgentID: "b1", Label: "solo", State: ingest.AgentError, Start: costT0 + 500, End: costT0 + 600}}}
	return []ingest.Run{with, without}
}

// costCollector has seen the runs' finalization and the main
// conversation's calls of one session, and a workflow call it must not
// count as the session's.
func costCollector() *Collector {
	var c Collector
	runs := costRuns()
	for i := range runs {
		c.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: &runs[i]})
	}
	for _, u := range []cost.Model{costCall("claude-sonnet-4-5", 0.000315, 100, 1, 0, 0), costCall("claude-sonnet-4-5", 0.0006, 100, 20, 0, 0)} {
		c.Observe(ingest.Lifecycle{Kind: ingest.ModelCallSeen, Call: &ingest.ModelCall{SessionID: "s1", Cost: u, Scope: ingest.CallMain}})
	}
	c.Observe(ingest.Lifecycle{Kind: ingest.ModelCallSeen, Call: &ingest.ModelCall{AgentID: "a1", SessionID: "s1",
		Cost: costCall("claude-sonnet-4-5", 1, 1, 1, 1, 1), Scope: ingest.CallWorkflow}})
	return &c
}

// TestCostGolden pins the cost fields of the JSON report and the
// waterfall, for runs with and without a known cost.
func TestCostGolden(t *testing.T) {
	c := costCollector()
	var j bytes.Buffer
	if err := WriteJSONSessions(&j, c.Runs, c.Sessions(), nil); err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, "testdata/cost.json.golden", j.Bytes())
	var w bytes.Buffer
	if err := WriteWaterfall(&w, c.Runs, nil, WaterfallOptions{Width: 100, Sessions: c.Sessions()}); err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, "testdata/cost.waterfall.golden", w.Bytes())
}

// TestNoCostNoChange checks that a run without cost prints no cost field,
// and that WriteJSON and WriteJSONSessions without sessions agree.
func TestNoCostNoChange(t *testing.T) {
	runs := costRuns()[1:]
	var a, b, w bytes.Buffer
	if err := WriteJSON(&a, runs, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSONSessions(&b, runs, (&Collector{}).Sessions(), nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteWaterfall(&w, runs, nil, WaterfallOptions{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Errorf("WriteJSON and WriteJSONSessions differ:\n%s\n%s", a.Bytes(), b.Bytes())
	}
	for _, k := range []string{"cost_usd", "tokens_by_type", "model_calls", "models", `"session"`} {
		if strings.Contains(a.String(), k) {
			t.Errorf("%s without any cost: %s", k, a.Bytes())
		}
	}
	if strings.Contains(w.String(), "$") {
		t.Errorf("waterfall shows a cost without any: %s", w.Bytes())
	}
}

// TestCostNotFinite: a NaN or infinite cost (the CLI's telemetry is input)
// leaves cost_usd out instead of failing the report.
func TestCostNotFinite(t *testing.T) {
	runs := costRuns()[:1]
	runs[0].Agents[0].Cost.Add(costCall("claude-sonnet-4-5", math.NaN(), 1, 1, 0, 0), 1)
	runs[0].Cost.Add(costCall("claude-sonnet-4-5", math.Inf(1), 1, 1, 0, 0), 1)
	var j, w bytes.Buffer
	if err := WriteJSON(&j, runs, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteWaterfall(&w, runs, nil, WaterfallOptions{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(j.String(), `"agentId":"a1","label":"reader:alpha","phaseIndex":1,"state":"done","cached":false,"start":1796205994010,"end":1796205994200,"tokens":1210,"error":"","cost_usd"`) {
		t.Errorf("a NaN cost printed: %s", j.Bytes())
	}
	if strings.Contains(w.String(), "NaN") || strings.Contains(w.String(), "Inf") {
		t.Errorf("waterfall prints a cost that is not a number:\n%s", w.Bytes())
	}
}

// TestCollectorJSONOnly: a Collector that keeps each run as its line
// writes what WriteJSONSessions writes of the runs it would have copied,
// sessions and stats included, for runs with and without cost, for a
// recording's runs and for runs whose lines fill several of its blocks.
func TestCollectorJSONOnly(t *testing.T) {
	feed := func(c *Collector, runs []ingest.Run) {
		for i := range runs {
			c.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: &runs[i]})
		}
		c.Observe(ingest.Lifecycle{Kind: ingest.ModelCallSeen, Call: &ingest.ModelCall{SessionID: "s1", Cost: costCall("claude-sonnet-4-5", 0.0006, 100, 20, 0, 0), Scope: ingest.CallMain}})
	}
	corpus, stats := replay(t, "../testdata/simulate/nested-cbc.ndjson")
	many, _ := benchRuns()
	for len(many)*300 < 3*linesBlock {
		many = append(many, many...)
	}
	for name, runs := range map[string][]ingest.Run{"cost": costRuns(), "nested recording": corpus, "several blocks": many} {
		var copies, lines Collector
		lines.JSONOnly = true
		feed(&copies, runs)
		feed(&lines, runs)
		if len(lines.Runs) != 0 {
			t.Errorf("%s: JSONOnly kept %d run copies", name, len(lines.Runs))
		}
		if name == "several blocks" && len(lines.lines) < 3 {
			t.Errorf("%s: %d blocks, want several", name, len(lines.lines))
		}
		var want, got bytes.Buffer
		if err := copies.WriteJSON(&want, stats); err != nil {
			t.Fatal(err)
		}
		if err := lines.WriteJSON(&got, stats); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("%s: JSONOnly wrote\n%s\nwant\n%s", name, got.String(), want.String())
		}
		if n := strings.Count(got.String(), "\n"); n != len(runs)+2 {
			t.Errorf("%s: %d lines, want %d runs + a session + stats", name, n, len(runs))
		}
	}
}
