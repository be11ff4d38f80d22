package usage

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Session cost: a result line ends a turn and carries the session's
// CUMULATIVE total_cost_usd and modelUsage, which include the workflow
// sub-agents'. Summing them would count every turn again at each later
// one, so Sessions remembers the last values of each session (its
// baseline) and returns what grew.

// DefaultMaxSessions is how many sessions' baselines Sessions remembers
// when NewSessions is given 0. A stream has one session at a time (a new
// one per resume); a serve pipeline follows one stream.
const DefaultMaxSessions = 1024

// sessionBase is the last cumulative values of a session.
type sessionBase struct {
	id      string
	costUSD float64 // total_cost_usd, when hasCost
	hasCost bool
	models  []ModelUsage
	used    uint64 // the sessions' clock at its last result: least recently used goes first
}

// Sessions are the baselines, bounded: beyond the maximum the least
// recently used is forgotten, and its next result counts as a first one, in
// full. Its zero value is not usable: see NewSessions.
type Sessions struct {
	max   int
	byID  map[string]*sessionBase
	clock uint64
}

// NewSessions returns Sessions that remember at most max baselines
// (DefaultMaxSessions when max <= 0).
func NewSessions(max int) Sessions {
	if max <= 0 {
		max = DefaultMaxSessions
	}
	return Sessions{max: max, byID: make(map[string]*sessionBase)}
}

// Len is how many baselines are remembered.
func (s *Sessions) Len() int { return len(s.byID) }

// Growth is what one result line added to its session's cumulative values.
type Growth struct {
	// Reset is set when a cumulative value went down since the session's
	// previous result (a new session under the same id, or a reset): the
	// growth is then the whole cumulative value.
	Reset bool
	// Delta lists, per model, what cost and tokens grew by; only the
	// models that grew.
	Delta []ModelUsage
	// CostUSD is the growth of total_cost_usd (0 when the line had none).
	CostUSD float64
}

// below reports whether cur went down from prev beyond float noise: the
// CLI sums costs in float64, so the same total can differ in its last bits.
func below(cur, prev float64) bool { return cur < prev-1e-9*max(1, prev) }

// Add makes a result line's cumulative values (totalCostUSD when hasCost,
// and cur per model) the session's baseline and returns what grew since the
// previous one. evicted reports that another session's baseline was
// forgotten to make room.
func (s *Sessions) Add(id string, totalCostUSD float64, hasCost bool, cur []ModelUsage) (g Growth, evicted bool) {
	b := s.byID[id]
	if b == nil {
		b, evicted = &sessionBase{id: id}, len(s.byID) >= s.max
		if evicted {
			s.evict()
		}
		s.byID[b.id] = b
	}
	s.clock++
	b.used = s.clock
	g.Reset = hasCost && b.hasCost && below(totalCostUSD, b.costUSD)
	for _, p := range b.models {
		i := slices.IndexFunc(cur, func(m ModelUsage) bool { return m.Model == p.Model })
		if i < 0 || below(cur[i].CostUSD, p.CostUSD) || slices.ContainsFunc(TokenTypes(), func(k TokenType) bool { return cur[i].Tokens[k] < p.Tokens[k] }) {
			g.Reset = true
		}
	}
	for _, m := range cur {
		d := m
		if i := slices.IndexFunc(b.models, func(p ModelUsage) bool { return p.Model == m.Model }); i >= 0 && !g.Reset {
			d.CostUSD = max(0, m.CostUSD-b.models[i].CostUSD) // noise clamped
			for k := range d.Tokens {
				d.Tokens[k] -= b.models[i].Tokens[k]
			}
		}
		if d.CostUSD != 0 || d.Tokens.Total() != 0 {
			g.Delta = append(g.Delta, d)
		}
	}
	if hasCost {
		g.CostUSD = totalCostUSD
		if b.hasCost && !g.Reset {
			g.CostUSD = max(0, totalCostUSD-b.costUSD)
		}
		b.costUSD, b.hasCost = totalCostUSD, true
	}
	b.models = slices.Clone(cur)
	return g, evicted
}

// evict forgets the least recently used session. A linear scan: it only
// runs when a new session arrives with the map full.
func (s *Sessions) evict() {
	var old *sessionBase
	for _, b := range s.byID {
		if old == nil || b.used < old.used {
			old = b
		}
	}
	delete(s.byID, old.id)
}

// SessionSnapshot is one session's baseline in a checkpoint: the
// cumulative values of its last result line. Without it a restarted serve
// would count the session's whole cost again at its next result.
type SessionSnapshot struct {
	ID      string       `json:"id"`
	CostUSD float64      `json:"cost_usd,omitempty"`
	HasCost bool         `json:"has_cost,omitempty"`
	Models  []ModelUsage `json:"models,omitempty"`
}

// Snapshot returns the baselines, least recently used first.
func (s *Sessions) Snapshot() []SessionSnapshot {
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

var errSecondBaseline = errors.New("a second baseline of the session")

// Restore checks saved baselines and returns the function that loads them
// (in the order saved, so least recently used first); beyond the maximum,
// the oldest are dropped as they would have been.
func (s *Sessions) Restore(saved []SessionSnapshot) (func(), error) {
	byID := make(map[string]*sessionBase, len(saved))
	for i, ss := range saved {
		if _, dup := byID[ss.ID]; dup {
			return nil, fmt.Errorf("session %d: %w", i, errSecondBaseline)
		}
		b := &sessionBase{id: ss.ID, costUSD: ss.CostUSD, hasCost: ss.HasCost, models: slices.Clone(ss.Models), used: uint64(i + 1)}
		ok := ss.CostUSD >= 0
		for _, m := range ss.Models {
			ok = ok && m.Model != "" && m.CostUSD >= 0 && !slices.ContainsFunc(m.Tokens[:], func(v int64) bool { return v < 0 })
		}
		if !ok {
			return nil, fmt.Errorf("session %d: a negative or unnamed cumulative value", i)
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
