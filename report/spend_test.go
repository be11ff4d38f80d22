package report

import (
	"math"
	"testing"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
)

// TestSpendTotals: the session's spend is the higher of the result lines'
// and the joined calls', each known only when its source reported it (a
// result line's 0 is no cost reported), and a bad amount counts nothing,
// as in the metrics.
func TestSpendTotals(t *testing.T) {
	turn := func(usd float64, delta ...cost.Model) ingest.Lifecycle {
		return ingest.Lifecycle{Kind: ingest.TurnEnded, Turn: &ingest.Turn{CostUSD: usd, Delta: delta}}
	}
	call := func(usd float64, tok cost.Tokens) ingest.Lifecycle {
		return ingest.Lifecycle{Kind: ingest.ModelCallSeen, Call: &ingest.ModelCall{Cost: cost.Model{Model: "m", CostUSD: usd, Tokens: tok}}}
	}
	model := func(usd float64, tok cost.Tokens) cost.Model {
		return cost.Model{Model: "m", CostUSD: usd, Tokens: tok}
	}
	f := func(v float64) *float64 { return &v }
	tb := func(in, out, cr, cc int64) *TokensByType {
		return &TokensByType{Input: in, Output: out, CacheRead: cr, CacheCreation: cc}
	}
	for _, c := range []struct {
		name   string
		events []ingest.Lifecycle
		cost   *float64
		tokens *TokensByType
	}{
		{name: "nothing"},
		{name: "CodeBuddy: total_cost_usd 0, no modelUsage", events: []ingest.Lifecycle{turn(0), turn(0)}},
		{name: "result lines", events: []ingest.Lifecycle{turn(0.5, model(0.5, cost.Tokens{10, 2, 3, 4})), turn(0.25, model(0.25, cost.Tokens{1, 1, 1, 1}))},
			cost: f(0.75), tokens: tb(11, 3, 4, 5)},
		{name: "total_cost_usd absent: the models' cost", events: []ingest.Lifecycle{turn(0, model(0.5, cost.Tokens{1, 0, 0, 0}), model(0.25, cost.Tokens{}))},
			cost: f(0.75), tokens: tb(1, 0, 0, 0)},
		{name: "joined only", events: []ingest.Lifecycle{turn(0), call(0.1, cost.Tokens{5, 6, 7, 8}), call(0.2, cost.Tokens{1, 1, 1, 1})},
			cost: f(0.1 + 0.2), tokens: tb(6, 7, 8, 9)},
		{name: "a joined call of 0 is a known 0", events: []ingest.Lifecycle{call(0, cost.Tokens{1, 0, 0, 0})}, cost: f(0), tokens: tb(1, 0, 0, 0)},
		{name: "both: the higher, per value", events: []ingest.Lifecycle{turn(1, model(1, cost.Tokens{100, 1, 0, 0})), call(2, cost.Tokens{10, 20, 30, 0})},
			cost: f(2), tokens: tb(100, 20, 30, 0)},
		{name: "result higher", events: []ingest.Lifecycle{turn(3, model(3, cost.Tokens{})), call(2, cost.Tokens{})}, cost: f(3), tokens: tb(0, 0, 0, 0)},
		{name: "bad amounts count nothing", events: []ingest.Lifecycle{turn(math.NaN(), model(math.Inf(1), cost.Tokens{-5, 1, 0, 0})), call(math.NaN(), cost.Tokens{-1, 0, 0, 0}), call(-3, cost.Tokens{})},
			cost: f(0), tokens: tb(0, 1, 0, 0)},
		{name: "other events ignored", events: []ingest.Lifecycle{{Kind: ingest.TurnEnded}, {Kind: ingest.ModelCallSeen}, {Kind: ingest.RunFinalized}}},
	} {
		var s Spend
		for _, e := range c.events {
			s.Observe(e)
		}
		got := s.Totals()
		if (got.CostUSD == nil) != (c.cost == nil) || got.CostUSD != nil && math.Abs(*got.CostUSD-*c.cost) > 1e-15 {
			t.Errorf("%s: cost %v, want %v", c.name, deref(got.CostUSD), deref(c.cost))
		}
		if (got.Tokens == nil) != (c.tokens == nil) || got.Tokens != nil && *got.Tokens != *c.tokens {
			t.Errorf("%s: tokens %+v, want %+v", c.name, got.Tokens, c.tokens)
		}
	}
}

func deref(p *float64) any {
	if p == nil {
		return "unknown"
	}
	return *p
}
