package ingest

import (
	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// DefaultMaxSessions is how many sessions' baselines a Tracker remembers
// when TrackerOptions.MaxSessions is 0 (cost.Sessions: the cumulative cost
// of result lines turned into per-turn growth).
const DefaultMaxSessions = cost.DefaultMaxSessions

// SessionSnapshot is one session's cost baseline in a TrackerState.
type SessionSnapshot = cost.SessionSnapshot

// result emits the TurnEnded of a result line: what the session's
// cumulative values grew by since its previous one (see Turn). A value the
// line does not know (absent or bad: its bad_field was counted) keeps its
// baseline.
func (t *Tracker) result(ev *streamjson.Event) {
	cur := make([]cost.ModelReading, len(ev.Models))
	for i, m := range ev.Models {
		cur[i] = cost.ModelReading{Model: cost.Model{Model: m.Model, CostUSD: m.CostUSD, Tokens: cost.Tokens(m.Tokens)},
			Known: cost.Known(m.Known)}
	}
	g, evicted := t.sess.Add(ev.SessionID, ev.TotalCostUSD, ev.HasCost, cur)
	t.violations(ViolationOverCapacity, nil, evicted)
	t.emit(Lifecycle{Kind: TurnEnded, Turn: &Turn{SessionID: ev.SessionID, Subtype: ev.ResultSubtype, IsError: ev.IsError,
		DurationMs: ev.DurationMs, Reset: g.Reset, Delta: g.Delta, CostUSD: g.CostUSD}})
}
