package cost

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
//
// Each value is known or not on its own (issue 28): a line whose
// total_cost_usd, a model's costUSD or one of its token counts is absent or
// bad says nothing of that value, so it neither moves the value's baseline
// nor counts as a decrease. Read as 0, it would have been a decrease, taken
// as a reset, and the next turn's cumulative values would have counted
// whole again. The next line that gives the value counts its growth since
// the last one that did: a bad field costs only that field, and not even
// that once a later line gives it.

// DefaultMaxSessions is how many sessions' baselines Sessions remembers
// when NewSessions is given 0. A stream has one session at a time (a new
// one per resume); a serve pipeline follows one stream.
const DefaultMaxSessions = 1024

// MaxSessionModels bounds the models a session's baseline remembers (a
// session uses one to three). Beyond, the models the latest lines did not
// give are forgotten first (counted as evicted); a forgotten model's next
// values count in full.
const MaxSessionModels = 32

// Known marks which of a model's cumulative values a result line gave as
// usable numbers: bit k for Tokens[k], KnownCost for CostUSD.
type Known uint8

// Bits of Known.
const (
	KnownCost Known = 1 << NumTokenTypes
	KnownAll        = KnownCost<<1 - 1
)

// Tokens reports whether the count of token type k is known.
func (k Known) Tokens(t TokenType) bool { return k&(1<<t) != 0 }

// ModelReading is one model's cumulative values in a result line (or a
// baseline): only those Known says are values; the others are unknown.
type ModelReading struct {
	Model
	Known Known
}

// sessionBase is the last cumulative values of a session.
type sessionBase struct {
	id      string
	costUSD float64 // total_cost_usd, when hasCost
	hasCost bool
	// models are the last known values of each model, each value from
	// the latest line that gave it; those given by the latest line first.
	models []ModelReading
	used   uint64 // the sessions' clock at its last result: least recently used goes first
}

// model returns the index of name's baseline, or -1.
func (b *sessionBase) model(name string) int {
	return slices.IndexFunc(b.models, func(p ModelReading) bool { return p.Model.Model == name })
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
	// Reset is set when a known cumulative value went down since the
	// session's previous known one (a new session under the same id, or
	// a reset): the growth is then the whole of each known value.
	Reset bool
	// Delta lists, per model, what cost and tokens grew by; only the
	// models that grew.
	Delta []Model
	// CostUSD is the growth of total_cost_usd (0 when the line had none).
	CostUSD float64
}

// below reports whether cur went down from prev beyond float noise: the
// CLI sums costs in float64, so the same total can differ in its last bits.
func below(cur, prev float64) bool { return cur < prev-1e-9*max(1, prev) }

// wentDown reports whether a value known in both cur and its baseline p
// went down.
func wentDown(cur, p ModelReading) bool {
	both := cur.Known & p.Known
	if both&KnownCost != 0 && below(cur.CostUSD, p.CostUSD) {
		return true
	}
	return slices.ContainsFunc(TokenTypes(), func(k TokenType) bool { return both.Tokens(k) && cur.Tokens[k] < p.Tokens[k] })
}

// Add makes what a result line knows of the session's cumulative values
// (totalCostUSD when hasCost, and cur per model) the session's baseline and
// returns what grew since the previous line that knew each. A value the
// line does not know, and a model it does not list, keep their baseline.
// evicted counts the baselines forgotten to make room: another session's,
// or models of this one.
func (s *Sessions) Add(id string, totalCostUSD float64, hasCost bool, cur []ModelReading) (g Growth, evicted int) {
	b := s.byID[id]
	if b == nil {
		b = &sessionBase{id: id}
		if len(s.byID) >= s.max {
			s.evict()
			evicted++
		}
		s.byID[b.id] = b
	}
	s.clock++
	b.used = s.clock
	g.Reset = hasCost && b.hasCost && below(totalCostUSD, b.costUSD)
	for _, m := range cur {
		if i := b.model(m.Model.Model); i >= 0 && wentDown(m, b.models[i]) {
			g.Reset = true
		}
	}
	if g.Reset {
		// A new session under the same id: what the old one's lines
		// said, the values this line does not know included, is no
		// baseline of it.
		b.costUSD, b.hasCost, b.models = 0, false, nil
	}
	if hasCost {
		g.CostUSD = totalCostUSD
		if b.hasCost {
			g.CostUSD = max(0, totalCostUSD-b.costUSD) // noise clamped
		}
		b.costUSD, b.hasCost = totalCostUSD, true
	}
	// The line's models go first, in its order; the others keep theirs.
	models := make([]ModelReading, 0, len(cur)+len(b.models))
	for _, m := range cur {
		j := slices.IndexFunc(models, func(o ModelReading) bool { return o.Model.Model == m.Model.Model })
		if j < 0 {
			p := ModelReading{Model: Model{Model: m.Model.Model}}
			if i := b.model(m.Model.Model); i >= 0 {
				p = b.models[i]
			}
			models, j = append(models, p), len(models)
		}
		p := &models[j]
		d := Model{Model: m.Model.Model}
		if m.Known&KnownCost != 0 {
			d.CostUSD = m.CostUSD
			if p.Known&KnownCost != 0 {
				d.CostUSD = max(0, m.CostUSD-p.CostUSD) // noise clamped
			}
			p.CostUSD = m.CostUSD
		}
		for _, k := range TokenTypes() {
			if !m.Known.Tokens(k) {
				continue
			}
			d.Tokens[k] = m.Tokens[k]
			if p.Known.Tokens(k) {
				d.Tokens[k] -= p.Tokens[k]
			}
			p.Tokens[k] = m.Tokens[k]
		}
		p.Known |= m.Known & KnownAll
		if d.CostUSD != 0 || d.Tokens.Total() != 0 {
			g.Delta = append(g.Delta, d)
		}
	}
	for _, p := range b.models {
		if !slices.ContainsFunc(models, func(o ModelReading) bool { return o.Model.Model == p.Model.Model }) {
			models = append(models, p)
		}
	}
	if len(models) > MaxSessionModels {
		evicted += len(models) - MaxSessionModels
		models = models[:MaxSessionModels]
	}
	b.models = models
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
// cumulative values of its last result lines. Without it a restarted serve
// would count the session's whole cost again at its next result.
type SessionSnapshot struct {
	ID      string         `json:"id"`
	CostUSD float64        `json:"cost_usd,omitempty"`
	HasCost bool           `json:"has_cost,omitempty"`
	Models  []SessionModel `json:"models,omitempty"`
}

// SessionModel is a model's baseline in a SessionSnapshot. Unknown marks
// the values no line has given yet (Known's bits); a checkpoint written
// before values were known apart has none, as all of its were known.
type SessionModel struct {
	Model
	Unknown Known `json:"unknown,omitempty"`
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
		ss := SessionSnapshot{ID: b.id, CostUSD: b.costUSD, HasCost: b.hasCost}
		for _, m := range b.models {
			ss.Models = append(ss.Models, SessionModel{Model: m.Model, Unknown: KnownAll &^ m.Known})
		}
		out = append(out, ss)
	}
	return out
}

var (
	errSecondBaseline = errors.New("a second baseline of the session")
	errBadBaseline    = errors.New("a negative, unnamed, repeated or unknown-flagged cumulative value")
)

// Restore checks saved baselines and returns the function that loads them
// (in the order saved, so least recently used first); beyond the maximum,
// the oldest are dropped as they would have been.
func (s *Sessions) Restore(saved []SessionSnapshot) (func(), error) {
	byID := make(map[string]*sessionBase, len(saved))
	for i, ss := range saved {
		if _, dup := byID[ss.ID]; dup {
			return nil, fmt.Errorf("session %d: %w", i, errSecondBaseline)
		}
		b := &sessionBase{id: ss.ID, costUSD: ss.CostUSD, hasCost: ss.HasCost, used: uint64(i + 1)}
		ok := ss.CostUSD >= 0 && len(ss.Models) <= MaxSessionModels
		for _, m := range ss.Models {
			ok = ok && m.Model.Model != "" && m.CostUSD >= 0 && m.Unknown&^KnownAll == 0 && b.model(m.Model.Model) < 0 &&
				!slices.ContainsFunc(m.Tokens[:], func(v int64) bool { return v < 0 })
			b.models = append(b.models, ModelReading{Model: m.Model, Known: KnownAll &^ m.Unknown})
		}
		if !ok {
			return nil, fmt.Errorf("session %d: %w", i, errBadBaseline)
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
