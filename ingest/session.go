package ingest

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/cbc-otel/cbc-otel/streamjson"
)

// Session cost: a result line ends a turn and carries the session's
// CUMULATIVE total_cost_usd and modelUsage (PROTOCOL.md "Session
// results"), which include the workflow sub-agents'. Summing them would
// count every turn again at each later one, so the Tracker remembers the
// last values of each session (its baseline) and emits what grew: see Turn.

// DefaultMaxSessions is how many sessions' baselines a Tracker remembers
// when TrackerOptions.MaxSessions is 0. A stream has one session at a time
// (a new one per resume); a serve pipeline follows one stream.
const DefaultMaxSessions = 1024

// sessionBase is the last cumulative values of a session.
type sessionBase struct {
	id      string
	costUSD float64 // total_cost_usd, when hasCost
	hasCost bool
	models  []ModelUsage
	used    uint64 // the sessions' clock at its last result: least recently used goes first
}

// sessions are the baselines, bounded: beyond max the least recently used
// is forgotten (an over_capacity violation), and its next result counts as
// a first one, in full.
type sessions struct {
	max   int
	byID  map[string]*sessionBase
	clock uint64
}

func newSessions(max int) sessions {
	if max <= 0 {
		max = DefaultMaxSessions
	}
	return sessions{max: max, byID: make(map[string]*sessionBase)}
}

// result emits the TurnEnded of a result line.
func (t *Tracker) result(ev *streamjson.Event) {
	turn, evicted := t.sess.turn(ev)
	if evicted {
		t.violation(ViolationOverCapacity, nil)
	}
	t.emit(Lifecycle{Kind: TurnEnded, Turn: turn})
}

// below reports whether cur went down from prev beyond float noise: the
// CLI sums costs in float64, so the same total can differ in its last bits.
func below(cur, prev float64) bool { return cur < prev-1e-9*max(1, prev) }

// turn turns a result's cumulative values into the Turn's deltas and makes
// them the session's baseline. evicted reports that another session's
// baseline was forgotten to make room.
func (s *sessions) turn(ev *streamjson.Event) (turn *Turn, evicted bool) {
	b := s.byID[ev.SessionID]
	if b == nil {
		b, evicted = &sessionBase{id: ev.SessionID}, len(s.byID) >= s.max
		if evicted {
			s.evict()
		}
		s.byID[b.id] = b
	}
	s.clock++
	b.used = s.clock
	cur := make([]ModelUsage, len(ev.Models))
	for i, m := range ev.Models {
		cur[i] = ModelUsage{Model: m.Model, CostUSD: m.CostUSD, Tokens: Tokens(m.Tokens)}
	}
	turn = &Turn{SessionID: ev.SessionID, Subtype: ev.ResultSubtype, IsError: ev.IsError, DurationMs: ev.DurationMs}
	turn.Reset = ev.HasCost && b.hasCost && below(ev.TotalCostUSD, b.costUSD)
	for _, p := range b.models {
		i := slices.IndexFunc(cur, func(m ModelUsage) bool { return m.Model == p.Model })
		if i < 0 || below(cur[i].CostUSD, p.CostUSD) || slices.ContainsFunc(TokenTypes(), func(k TokenType) bool { return cur[i].Tokens[k] < p.Tokens[k] }) {
			turn.Reset = true
		}
	}
	for _, m := range cur {
		d := m
		if i := slices.IndexFunc(b.models, func(p ModelUsage) bool { return p.Model == m.Model }); i >= 0 && !turn.Reset {
			d.CostUSD = max(0, m.CostUSD-b.models[i].CostUSD) // noise clamped
			for k := range d.Tokens {
				d.Tokens[k] -= b.models[i].Tokens[k]
			}
		}
		if d.CostUSD != 0 || d.Tokens.Total() != 0 {
			turn.Delta = append(turn.Delta, d)
		}
	}
	if ev.HasCost {
		turn.CostUSD = ev.TotalCostUSD
		if b.hasCost && !turn.Reset {
			turn.CostUSD = max(0, ev.TotalCostUSD-b.costUSD)
		}
		b.costUSD, b.hasCost = ev.TotalCostUSD, true
	}
	b.models = cur
	return turn, evicted
}

// evict forgets the least recently used session. A linear scan: it only
// runs when a new session arrives with the map full.
func (s *sessions) evict() {
	var old *sessionBase
	for _, b := range s.byID {
		if old == nil || b.used < old.used {
			old = b
		}
	}
	delete(s.byID, old.id)
}

// SessionSnapshot is one session's baseline in a TrackerState: the
// cumulative values of its last result line. Without it a restarted serve
// would count the session's whole cost again at its next result.
type SessionSnapshot struct {
	ID      string       `json:"id"`
	CostUSD float64      `json:"cost_usd,omitempty"`
	HasCost bool         `json:"has_cost,omitempty"`
	Models  []ModelUsage `json:"models,omitempty"`
}

// snapshot returns the baselines, least recently used first.
func (s *sessions) snapshot() []SessionSnapshot {
	bs := make([]*sessionBase, 0, len(s.byID))
	for _, b := range s.byID {
		bs = append(bs, b)
	}
	slices.SortFunc(bs, func(a, b *sessionBase) int { return cmp.Compare(a.used, b.used) })
	var out []SessionSnapshot
	for _, b := range bs {
		out = append(out, SessionSnapshot{ID: b.id, CostUSD: b.costUSD, HasCost: b.hasCost, Models: slices.Clone(b.models)})
	}
	return out
}

// restore checks saved baselines and returns the function that loads them
// (in the order saved, so least recently used first); beyond max, the
// oldest are dropped as they would have been.
func (s *sessions) restore(saved []SessionSnapshot) (func(), error) {
	byID := make(map[string]*sessionBase, len(saved))
	for i, ss := range saved {
		if _, dup := byID[ss.ID]; dup {
			return nil, fmt.Errorf("ingest: restoring session %d: a second baseline of the session", i)
		}
		b := &sessionBase{id: ss.ID, costUSD: ss.CostUSD, hasCost: ss.HasCost, models: slices.Clone(ss.Models), used: uint64(i + 1)}
		ok := ss.CostUSD >= 0
		for _, m := range ss.Models {
			ok = ok && m.Model != "" && m.CostUSD >= 0 && !slices.ContainsFunc(m.Tokens[:], func(v int64) bool { return v < 0 })
		}
		if !ok {
			return nil, fmt.Errorf("ingest: restoring session %d: a negative or unnamed cumulative value", i)
		}
		byID[ss.ID] = b
	}
	return func() {
		s.byID, s.clock = byID, uint64(len(saved))
		for len(s.byID) > s.max {
			s.evict()
		}
	}, nil
}
