package runcost

import (
	"fmt"
	"math"
)

// USD is a cost as the summaries and the runs page print it: four
// decimals, enough for one cheap model call; an absurd one (the CLI's
// telemetry is input too) stays short, and one that is no number says so.
func USD(usd float64) string {
	switch {
	case math.IsNaN(usd) || math.IsInf(usd, 0):
		return "$?"
	case math.Abs(usd) >= 1e6:
		return fmt.Sprintf("$%.3g", usd)
	}
	return fmt.Sprintf("$%.4f", usd)
}

// BaseText is what a run's line says beside its cost: "(p95 $0.0384)",
// "(over p95 $0.0384)" when the run cost more, "" when the cost or the
// baseline is unknown.
func (v Verdict) BaseText() string {
	if !v.CostKnown || !v.BaseKnown {
		return ""
	}
	if v.Over() {
		return "(over p95 " + USD(v.Base.P95) + ")"
	}
	return "(p95 " + USD(v.Base.P95) + ")"
}

// Budget is the session's spend against a cap: run --budget.max-cost-usd,
// or the demo's budget for show (ShowOnly), which nothing acts on.
type Budget struct {
	// CapUSD is the cap; a Budget with none (0) is not shown.
	CapUSD float64
	// SpendUSD is the spend the cap weighs (report.Spend's), nil when no
	// source reported a cost yet.
	SpendUSD *float64
	// ShowOnly marks the demo's budget: shown, never enforced.
	ShowOnly bool
}

// Fraction is the share of the cap spent (1 = all of it; over 1 past
// it), 0 when nothing is known.
func (b Budget) Fraction() float64 {
	if b.SpendUSD == nil || !(b.CapUSD > 0) {
		return 0
	}
	return *b.SpendUSD / b.CapUSD
}

// Text is the budget line's text after its label: "$0.4123 of $1.0000
// (41%)", "$1.2345 of $1.0000 (124%: over)", or, before any cost, "no
// cost reported yet, of $1.0000"; "" without a cap. A CLI that reports
// no cost (CodeBuddy's 0) stays at "nothing reported": it never trips the
// cap.
func (b Budget) Text() string {
	switch {
	case !(b.CapUSD > 0):
		return ""
	case b.SpendUSD == nil:
		return "no cost reported yet, of " + USD(b.CapUSD)
	}
	// Rounded away from 100%: a cap not reached never reads 100%, one
	// passed never does either.
	f := b.Fraction()
	pct, over := math.Floor(100*f), ""
	if f > 1 {
		pct, over = math.Ceil(100*f), ": over"
	}
	return fmt.Sprintf("%s of %s (%.0f%%%s)", USD(*b.SpendUSD), USD(b.CapUSD), pct, over)
}

// Label is the budget line's label: what the cap is and whether anything
// acts on it.
func (b Budget) Label() string {
	if b.ShowOnly {
		return "budget (the demo's, for show: nothing is stopped)"
	}
	return "budget (--budget.max-cost-usd)"
}
