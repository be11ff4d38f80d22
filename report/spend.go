package report

import (
	"math"
	"sync"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/runcost"
)

// Spend is an ingest.Sink that sums what a session spent, from both
// sources cbc-otel has: the result lines (the growth of their cumulative
// total_cost_usd and modelUsage, sub-agents and workflows included, as
// cbc_cost_usd_total and cbc_model_tokens_total count it) and the CLI's
// own telemetry when joined (every model call it reported, whatever its
// scope, as cbc_cli_cost_usd_total counts it). It is safe for concurrent
// use: the pipeline sums, the runs page reads (Budget).
type Spend struct {
	mu           sync.Mutex
	result       cost.Sum
	resultTokens bool // a result line's modelUsage grew
	joined       cost.Sum
}

// Observe sums turns and model calls.
func (s *Spend) Observe(l ingest.Lifecycle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case l.Kind == ingest.TurnEnded && l.Turn != nil:
		// total_cost_usd's growth, or its models' costUSD when it is
		// absent: the higher of the two.
		var models float64
		for _, d := range l.Turn.Delta {
			models += positive(d.CostUSD)
			for k, v := range d.Tokens {
				s.result.Tokens[k] += max(0, v)
			}
			s.resultTokens = true
		}
		s.result.CostUSD += max(positive(l.Turn.CostUSD), models)
	case l.Kind == ingest.ModelCallSeen && l.Call != nil:
		u := cost.Model{CostUSD: positive(l.Call.Cost.CostUSD)}
		for k, v := range l.Call.Cost.Tokens {
			u.Tokens[k] = max(0, v)
		}
		s.joined.Add(u, 1)
	}
}

// positive is v when it is a positive finite amount, else 0: what the
// metrics' counters add.
func positive(v float64) float64 {
	if v > 0 && !math.IsInf(v, 0) {
		return v
	}
	return 0
}

// Costs returns the session's cost as each source has it so far: the
// result lines' and the joined calls' (0 when a source reported none).
// Totals' CostUSD is the higher of the two.
func (s *Spend) Costs() (result, joined float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.result.CostUSD, s.joined.CostUSD
}

// SpendTotals is what a session spent, each value nil when no source
// knows it.
type SpendTotals struct {
	// CostUSD is the higher of the result lines' cost and the joined
	// calls' (the cost --budget.max-cost-usd weighs). A result line's 0,
	// as CodeBuddy writes on every one, is no cost reported: without
	// joined calls it stays nil.
	CostUSD *float64
	// Tokens holds, per type, the higher of the result lines' modelUsage
	// and the joined calls'; nil when neither reported tokens by type.
	Tokens *TokensByType
}

// Totals returns what the session spent so far.
func (s *Spend) Totals() SpendTotals {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t SpendTotals
	joined := s.joined.Calls > 0
	if s.result.CostUSD > 0 || joined {
		v := max(s.result.CostUSD, s.joined.CostUSD)
		t.CostUSD = &v
	}
	if s.resultTokens || joined {
		var tok cost.Tokens
		for k := range tok {
			tok[k] = max(s.result.Tokens[k], s.joined.Tokens[k])
		}
		tb := tokensOf(tok)
		t.Tokens = &tb
	}
	return t
}

// Budget is the spend so far against capUSD (Totals' CostUSD: the figure
// --budget.max-cost-usd weighs); showOnly marks the demo's budget for
// show, which nothing acts on.
func (s *Spend) Budget(capUSD float64, showOnly bool) runcost.Budget {
	return runcost.Budget{CapUSD: capUSD, SpendUSD: s.Totals().CostUSD, ShowOnly: showOnly}
}
