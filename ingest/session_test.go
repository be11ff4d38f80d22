// Tests of session cost: result lines' cumulative values turned into
// per-turn deltas (the rule in Turn's documentation), on the recordings and
// on the cases the recordings do not have: resets, a first result, float
// noise, a cost missing, the bound on sessions and a restore; and that a
// value absent or bad is unknown, never 0 (issue 28).
package ingest_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/ingesttest"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// lnResult is a result line of session with the cumulative total and
// models (name → {input, output, cache read, cache creation, cost}).
func lnResult(session string, total any, models map[string][5]float64) jobj {
	mu := jobj{}
	for name, v := range models {
		mu[name] = jobj{"inputTokens": v[0], "outputTokens": v[1], "cacheReadInputTokens": v[2], "cacheCreationInputTokens": v[3], "costUSD": v[4]}
	}
	m := jobj{"type": "result", "subtype": "success", "is_error": false, "duration_ms": 1500, "session_id": session, "modelUsage": mu, "result": "ok"}
	if total != nil {
		m["total_cost_usd"] = total
	}
	return m
}

// turns returns the recorded TurnEnded events.
func turns(rec *ingesttest.Recorder) []ingest.Turn {
	var out []ingest.Turn
	for _, e := range rec.Events {
		if e.Kind == ingest.TurnEnded {
			out = append(out, e.Turn)
		}
	}
	return out
}

// sums adds up the deltas of turns per session: the total cost, and per
// model its cost and tokens.
type sums struct {
	cost   float64
	models map[string]cost.Model
}

func sumTurns(ts []ingest.Turn) map[string]*sums {
	out := map[string]*sums{}
	for _, tr := range ts {
		s := out[tr.SessionID]
		if s == nil {
			s = &sums{models: map[string]cost.Model{}}
			out[tr.SessionID] = s
		}
		s.cost += tr.CostUSD
		for _, d := range tr.Delta {
			m := s.models[d.Model]
			m.Model = d.Model
			m.CostUSD += d.CostUSD
			for k, v := range d.Tokens {
				m.Tokens[k] += v
			}
			s.models[d.Model] = m
		}
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*max(1, math.Abs(b)) }

// TestTurnDeltasOnRecordings: for every session of the recordings, the sum
// of the emitted deltas equals its last cumulative values (read here with
// encoding/json, not the decoder), per model, per token type, and for
// total_cost_usd; no turn of them is a reset.
func TestTurnDeltasOnRecordings(t *testing.T) {
	files := corpusFiles(t)
	more, _ := filepath.Glob(filepath.Join("..", "testdata", "written-at", "*.ndjson"))
	sessions, withModels := 0, 0
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		type last struct {
			Cost   float64                   `json:"total_cost_usd"`
			Models map[string]map[string]any `json:"modelUsage"`
			N      int
		}
		want := map[string]*last{}
		for _, l := range strings.Split(string(b), "\n") {
			var m struct {
				Type    string `json:"type"`
				Session string `json:"session_id"`
				last
			}
			if json.Unmarshal([]byte(l), &m) != nil || m.Type != "result" {
				continue
			}
			n := 0
			if w := want[m.Session]; w != nil {
				n = w.N
			}
			m.last.N = n + 1
			want[m.Session] = &m.last
		}
		r := newPipeRig(ingest.PipelineOptions{})
		r.p.Write(0, b)
		r.p.Close()
		ts := turns(r.rec)
		got := sumTurns(ts)
		n := 0
		for id, w := range want {
			n += w.N
			sessions++
			g := got[id]
			if g == nil || !near(g.cost, w.Cost) {
				t.Fatalf("%s: session %s: deltas sum to %+v, last total_cost_usd %v", f, id, g, w.Cost)
			}
			if len(g.models) != len(w.Models) {
				t.Fatalf("%s: models %v, want %v", f, g.models, w.Models)
			}
			if len(w.Models) > 0 {
				withModels++
			}
			for name, fields := range w.Models {
				gm := g.models[name]
				for k, field := range []string{"inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens"} {
					if v, _ := fields[field].(float64); gm.Tokens[k] != int64(v) {
						t.Errorf("%s: %s %s: deltas sum to %d, last value %v", f, name, field, gm.Tokens[k], v)
					}
				}
				if v, _ := fields["costUSD"].(float64); !near(gm.CostUSD, v) {
					t.Errorf("%s: %s cost: deltas sum to %v, last value %v", f, name, gm.CostUSD, v)
				}
			}
		}
		if len(ts) != n {
			t.Fatalf("%s: %d turns for %d result lines", f, len(ts), n)
		}
		for _, tr := range ts {
			if tr.Reset || tr.Subtype != "success" || tr.DurationMs <= 0 {
				t.Errorf("%s: turn %+v", f, tr)
			}
		}
	}
	if sessions < 8 || withModels < 5 {
		t.Fatalf("only %d sessions (%d with modelUsage) in the recordings", sessions, withModels)
	}
}

func TestTurnDeltas(t *testing.T) {
	type model = map[string][5]float64
	r := newPipeRig(ingest.PipelineOptions{})
	// First result: the whole value.
	r.out(lnResult("A", 0.3, model{"opus": {10, 2, 100, 5, 0.3}}))
	// Interleaved sessions keep their own baselines; a new model counts
	// in full, an unchanged one is not listed.
	r.out(lnResult("B", 1.0, model{"haiku": {1, 1, 1, 1, 1.0}}))
	r.out(lnResult("A", 0.5, model{"opus": {15, 3, 100, 5, 0.4}, "haiku": {1, 0, 0, 0, 0.1}}))
	r.out(lnResult("A", 0.5, model{"opus": {15, 3, 100, 5, 0.4}, "haiku": {1, 0, 0, 0, 0.1}}))
	// Float noise below the previous value is no reset.
	r.out(lnResult("A", 0.5-1e-17, model{"opus": {15, 3, 100, 5, 0.4 - 1e-17}, "haiku": {1, 0, 0, 0, 0.1}}))
	// A token count went down: a reset, the whole value.
	r.out(lnResult("A", 0.6, model{"opus": {4, 3, 100, 5, 0.5}, "haiku": {1, 0, 0, 0, 0.1}}))
	// A model left out is unknown, no reset: its baseline is kept for
	// when it comes back.
	r.out(lnResult("A", 0.7, model{"opus": {5, 3, 100, 5, 0.7}}))
	r.out(lnResult("A", 0.8, model{"opus": {5, 3, 100, 5, 0.7}, "haiku": {2, 0, 0, 0, 0.2}}))
	// The total went down: a reset (a new session under the same id).
	r.out(lnResult("A", 0.1, model{"opus": {6, 3, 100, 5, 0.8}}))
	// No total_cost_usd: its baseline is kept; the models still count.
	r.out(lnResult("A", nil, model{"opus": {7, 3, 100, 5, 0.9}}))
	r.out(lnResult("A", 0.25, model{"opus": {7, 3, 100, 5, 0.9}}))
	ts := turns(r.rec)
	type want struct {
		session string
		reset   bool
		cost    float64
		delta   map[string][5]float64
	}
	wants := []want{
		{"A", false, 0.3, model{"opus": {10, 2, 100, 5, 0.3}}},
		{"B", false, 1.0, model{"haiku": {1, 1, 1, 1, 1.0}}},
		{"A", false, 0.2, model{"opus": {5, 1, 0, 0, 0.1}, "haiku": {1, 0, 0, 0, 0.1}}},
		{"A", false, 0, model{}},
		{"A", false, 0, model{}},
		{"A", true, 0.6, model{"opus": {4, 3, 100, 5, 0.5}, "haiku": {1, 0, 0, 0, 0.1}}},
		{"A", false, 0.1, model{"opus": {1, 0, 0, 0, 0.2}}},
		{"A", false, 0.1, model{"haiku": {1, 0, 0, 0, 0.1}}},
		{"A", true, 0.1, model{"opus": {6, 3, 100, 5, 0.8}}},
		{"A", false, 0, model{"opus": {1, 0, 0, 0, 0.1}}},
		{"A", false, 0.15, model{}},
	}
	if len(ts) != len(wants) {
		t.Fatalf("%d turns, want %d", len(ts), len(wants))
	}
	for i, w := range wants {
		tr := ts[i]
		if tr.SessionID != w.session || tr.Reset != w.reset || !near(tr.CostUSD, w.cost) || len(tr.Delta) != len(w.delta) {
			t.Fatalf("turn %d: %+v, want %+v", i, tr, w)
		}
		for _, d := range tr.Delta {
			v := w.delta[d.Model]
			if d.Tokens != (cost.Tokens{int64(v[0]), int64(v[1]), int64(v[2]), int64(v[3])}) || !near(d.CostUSD, v[4]) {
				t.Fatalf("turn %d: %s delta %+v, want %v", i, d.Model, d, v)
			}
		}
	}
	if n := violationCounts(r.stats)[ingest.ViolationOverCapacity]; n != 0 {
		t.Fatalf("%d over_capacity", n)
	}
}

// TestTurnSessionBound: beyond MaxSessions the least recently used
// session's baseline is forgotten, counted as over_capacity, and its next
// result counts in full.
func TestTurnSessionBound(t *testing.T) {
	m := func(in float64) map[string][5]float64 { return map[string][5]float64{"m": {in, 0, 0, 0, in / 100}} }
	r := newPipeRig(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{MaxSessions: 2}})
	r.out(lnResult("A", 0.1, m(10)), lnResult("B", 0.1, m(10)))
	r.out(lnResult("A", 0.2, m(20))) // A is now the most recent
	r.out(lnResult("C", 0.1, m(10))) // B goes
	r.out(lnResult("A", 0.3, m(30))) // A kept: a delta
	r.out(lnResult("B", 0.2, m(20))) // B forgotten: in full; C goes
	if n := violationCounts(r.stats)[ingest.ViolationOverCapacity]; n != 2 {
		t.Fatalf("%d over_capacity, want 2", n)
	}
	ts := turns(r.rec)
	if got := ts[4]; got.SessionID != "A" || !near(got.CostUSD, 0.1) || got.Delta[0].Tokens[0] != 10 {
		t.Fatalf("A after C: %+v", got)
	}
	if got := ts[5]; got.SessionID != "B" || got.Reset || !near(got.CostUSD, 0.2) || got.Delta[0].Tokens[0] != 20 {
		t.Fatalf("B forgotten: %+v", got)
	}
}

// TestTurnBaselinesRestore: the baselines travel in the TrackerState, so a
// restored Tracker gives the next result's delta only; a baseline that
// cannot be one is refused.
func TestTurnBaselinesRestore(t *testing.T) {
	m := func(in float64) map[string][5]float64 { return map[string][5]float64{"m": {in, 1, 0, 0, in / 100}} }
	r := newPipeRig(ingest.PipelineOptions{})
	r.out(lnResult("A", 0.1, m(10)), lnResult("B", 0.5, m(50)), lnResult("A", 0.2, m(20)))
	st := r.p.Tracker().Snapshot()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back ingest.TrackerState
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Sessions) != 2 || back.Sessions[0].ID != "B" || back.Sessions[1].ID != "A" {
		t.Fatalf("sessions %+v, want B then A (least recently used first)", back.Sessions)
	}
	r2 := newPipeRig(ingest.PipelineOptions{})
	if err := r2.p.Tracker().Restore(back, back.Now); err != nil {
		t.Fatal(err)
	}
	r2.out(lnResult("A", 0.35, m(35)))
	if ts := turns(r2.rec); len(ts) != 1 || ts[0].Reset || !near(ts[0].CostUSD, 0.15) || ts[0].Delta[0].Tokens != (cost.Tokens{15, 0, 0, 0}) {
		t.Fatalf("after restore: %+v", ts)
	}
	if err := r2.p.Tracker().Restore(back, back.Now); err == nil {
		t.Error("Restore on a Tracker holding baselines")
	}
	for name, spoil := range map[string]func(*ingest.TrackerState){
		"duplicate":      func(s *ingest.TrackerState) { s.Sessions = append(s.Sessions, s.Sessions[0]) },
		"negative cost":  func(s *ingest.TrackerState) { s.Sessions[0].CostUSD = -1 },
		"negative count": func(s *ingest.TrackerState) { s.Sessions[0].Models[0].Tokens[2] = -1 },
		"unnamed model":  func(s *ingest.TrackerState) { s.Sessions[0].Models[0].Model.Model = "" },
	} {
		var s ingest.TrackerState
		_ = json.Unmarshal(b, &s)
		spoil(&s)
		if err := ingest.NewTracker(ingest.TrackerOptions{}).Restore(s, s.Now); err == nil {
			t.Errorf("%s: restored", name)
		}
	}
}

// TestTurnFromEvent: a hand-made event without modelUsage (CodeBuddy's
// result lines) gives a turn of zero cost and no models, never a reset.
func TestTurnFromEvent(t *testing.T) {
	r := newClockRig(t, 0)
	for range 3 {
		r.ev(T0, streamjson.Event{Kind: streamjson.KindResult, SessionID: "cb", ResultSubtype: "success", HasCost: true, DurationMs: 5})
	}
	for _, tr := range turns(r.rec) {
		if tr.Reset || tr.CostUSD != 0 || len(tr.Delta) != 0 || tr.Subtype != "success" || tr.DurationMs != 5 {
			t.Fatalf("turn %+v", tr)
		}
	}
}

// costField names one cumulative value of a session: total_cost_usd
// (model ""), or a model's token count k (0-3) or cost (k = costK).
type costField struct {
	model string
	k     int
}

const costK = 4

// modelKeys are a modelUsage entry's numbers, in costField.k order.
var modelKeys = [...]string{"inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens", "costUSD"}

// fieldTotals sums the turns per session and value.
func fieldTotals(ts []ingest.Turn) map[string]map[costField]float64 {
	out := map[string]map[costField]float64{}
	for _, tr := range ts {
		m := out[tr.SessionID]
		if m == nil {
			m = map[costField]float64{}
			out[tr.SessionID] = m
		}
		m[costField{}] += tr.CostUSD
		for _, d := range tr.Delta {
			for k, v := range d.Tokens {
				m[costField{d.Model, k}] += float64(v)
			}
			m[costField{d.Model, costK}] += d.CostUSD
		}
	}
	return out
}

// turnField is what turn tr says value f grew by.
func turnField(tr ingest.Turn, f costField) float64 {
	if f.model == "" {
		return tr.CostUSD
	}
	for _, d := range tr.Delta {
		if d.Model == f.model {
			if f.k == costK {
				return d.CostUSD
			}
			return float64(d.Tokens[f.k])
		}
	}
	return 0
}

// costCorruptions are what a cost value can be replaced with: left out,
// null (both unknown, not bad) or a value of the wrong type or out of range
// (unknown and one bad_field).
var costCorruptions = []struct {
	name string
	v    any // nil: the key is left out
	bad  int64
}{
	{"absent", nil, 0}, {"null", json.RawMessage("null"), 0}, {"string", "12", 1}, {"bool", true, 1},
	{"object", jobj{"v": 1}, 1}, {"array", []int{1}, 1}, {"negative", -1, 1}, {"overflow", json.RawMessage("1e400"), 1},
	{"out of range", 1e300, 1},
}

// allModels, as a costField's model, stands for modelUsage itself.
const allModels = "*"

// corruptField returns a copy of the result line l with value f replaced
// by v, or left out; f.k < 0 replaces the whole modelUsage entry of
// f.model, or modelUsage itself (allModels).
func corruptField(l jobj, f costField, v any, absent bool) jobj {
	out := jobj{}
	maps.Copy(out, l)
	target := out
	key := "total_cost_usd"
	if f.model == allModels {
		key = "modelUsage"
	} else if f.model != "" {
		mu := jobj{}
		maps.Copy(mu, l["modelUsage"].(jobj))
		out["modelUsage"] = mu
		key = f.model
		if f.k >= 0 {
			entry := jobj{}
			maps.Copy(entry, mu[f.model].(jobj))
			mu[f.model] = entry
			target, key = entry, modelKeys[f.k]
		} else {
			target = mu
		}
	}
	if absent {
		delete(target, key)
	} else {
		target[key] = v
	}
	return out
}

// TestTurnBadCostField (issue 28): a total_cost_usd, costUSD or token count
// that is absent or bad is unknown, not 0: no reset, no turn counted twice.
// The line between two good ones loses that value's growth only until the
// next good line, which counts it since the last good one; every other
// value counts as usual; a bad value is one bad_field.
func TestTurnBadCostField(t *testing.T) {
	good := []jobj{
		lnResult("S", 0.25, map[string][5]float64{"opus": {100, 10, 1000, 50, 0.25}}),
		lnResult("S", 0.5, map[string][5]float64{"opus": {200, 20, 2000, 100, 0.5}}),
		lnResult("S", 0.75, map[string][5]float64{"opus": {300, 30, 3000, 150, 0.75}}),
	}
	fields := []costField{{}, {"opus", 0}, {"opus", 1}, {"opus", 2}, {"opus", 3}, {"opus", costK}}
	for _, f := range fields {
		for _, c := range costCorruptions {
			t.Run(fmt.Sprintf("%s/%d/%s", f.model, f.k, c.name), func(t *testing.T) {
				r := newPipeRig(ingest.PipelineOptions{})
				r.out(good[0], corruptField(good[1], f, c.v, c.v == nil), good[2])
				ts := turns(r.rec)
				if len(ts) != 3 {
					t.Fatalf("%d turns", len(ts))
				}
				for i, tr := range ts {
					if tr.Reset {
						t.Errorf("turn %d: a reset", i)
					}
				}
				for _, g := range fields {
					// Each value grows by a third of its last one per turn.
					third := [...]float64{100, 10, 1000, 50, 0.25}[g.k]
					if g.model == "" {
						third = 0.25
					}
					want := [3]float64{third, third, third}
					if g == f {
						want = [3]float64{third, 0, 2 * third}
					}
					for i, tr := range ts {
						if got := turnField(tr, g); !near(got, want[i]) {
							t.Errorf("turn %d: %v grew by %v, want %v", i, g, got, want[i])
						}
					}
				}
				if n := violationCounts(r.stats)[ingest.ViolationBadField]; n != c.bad {
					t.Errorf("%d bad_field, want %d", n, c.bad)
				}
			})
		}
	}
}

// TestTurnCorruptOneFieldProperty (issue 28): over generated sessions of
// cumulative result lines (growing values, models that join late, resets
// where every value goes down), corrupting one value of one line (left
// out, null, the wrong type, out of range; or a whole modelUsage entry, or
// modelUsage itself)
// never moves the session's totals by more than that line's own delta of
// that value, and never upwards; every other total, and every Reset, is
// as in the uncorrupted stream.
func TestTurnCorruptOneFieldProperty(t *testing.T) {
	names := []string{"opus", "sonnet", "haiku"}
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 28))
		type state struct {
			models map[string]*[5]float64
			order  []string
		}
		sessions := map[string]*state{}
		var lines []jobj
		for range 2 + rng.IntN(7) {
			id := []string{"S1", "S2"}[rng.IntN(2)]
			s := sessions[id]
			if s == nil {
				s = &state{models: map[string]*[5]float64{}}
				sessions[id] = s
			}
			canReset := len(s.order) > 0
			for _, m := range s.models {
				for _, v := range m[:costK] {
					canReset = canReset && v >= 2
				}
				canReset = canReset && m[costK]*1024 >= 2
			}
			if canReset && rng.IntN(6) == 0 {
				// Every value goes down: a new session under the same id.
				for _, m := range s.models {
					for k := range costK {
						m[k] = math.Floor(m[k] / 2)
					}
					m[costK] = float64(int(m[costK]*1024)/2) / 1024
				}
			} else {
				if len(s.order) == 0 || len(s.order) < len(names) && rng.IntN(4) == 0 {
					name := names[len(s.order)]
					s.models[name] = &[5]float64{float64(2 + rng.IntN(500)), float64(2 + rng.IntN(50)), float64(2 + rng.IntN(5000)),
						float64(2 + rng.IntN(100)), float64(2+rng.IntN(64)) / 1024}
					s.order = append(s.order, name)
				}
				for _, m := range s.models {
					for k := range costK {
						m[k] += float64(rng.IntN(3) * rng.IntN(300))
					}
					m[costK] += float64(rng.IntN(3)*rng.IntN(64)) / 1024 // binary fractions: sums are exact
				}
			}
			vals := map[string][5]float64{}
			total := 0.0
			for _, name := range s.order {
				vals[name] = *s.models[name]
				total += s.models[name][costK]
			}
			lines = append(lines, lnResult(id, total, vals))
		}
		at := rng.IntN(len(lines))
		id := lines[at]["session_id"].(string)
		var f costField
		switch rng.IntN(8) {
		case 0, 1: // total_cost_usd
		case 2: // modelUsage itself
			f = costField{allModels, -1}
		default:
			order := sessions[id].order
			f = costField{order[rng.IntN(len(order))], rng.IntN(costK+2) - 1} // -1: the whole entry
		}
		var c = costCorruptions[rng.IntN(len(costCorruptions))]
		if f.model != "" && f.model != allModels && f.k < 0 && c.v != nil {
			c.v, c.bad = "not a model", 1 // an entry that is no object (null included) is one bad_field
		}
		if _, ok := lines[at]["modelUsage"].(jobj)[f.model]; f.model != "" && f.model != allModels && !ok {
			continue // the model had not joined yet at that line
		}
		run := func(ls []jobj) ([]ingest.Turn, int64) {
			r := newPipeRig(ingest.PipelineOptions{})
			r.out(ls...)
			return turns(r.rec), violationCounts(r.stats)[ingest.ViolationBadField]
		}
		clean, cleanBad := run(lines)
		bad := slices.Clone(lines)
		bad[at] = corruptField(lines[at], f, c.v, c.v == nil)
		got, gotBad := run(bad)
		fail := func(format string, args ...any) {
			t.Fatalf("seed %d, line %d of %d, %v %s: %s\nlines: %v", seed, at, len(lines), f, c.name, fmt.Sprintf(format, args...), lines)
		}
		if len(got) != len(clean) {
			fail("%d turns, want %d", len(got), len(clean))
		}
		for i := range clean {
			if got[i].Reset != clean[i].Reset {
				fail("turn %d: Reset %v, want %v", i, got[i].Reset, clean[i].Reset)
			}
		}
		if gotBad-cleanBad != c.bad {
			fail("%d bad_field more, want %d", gotBad-cleanBad, c.bad)
		}
		hit := func(g costField) bool {
			return f.model == allModels && g.model != "" || g.model == f.model && (f.k < 0 || g.k == f.k)
		}
		ct, gt := fieldTotals(clean), fieldTotals(got)
		for sid, fields := range ct {
			for g, want := range fields {
				have := gt[sid][g]
				switch {
				case sid != id || !hit(g):
					if have != want {
						fail("session %s %v: total %v, want %v (untouched)", sid, g, have, want)
					}
				default:
					own := turnField(clean[at], g)
					if have > want || want-have > own {
						fail("session %s %v: total %v, uncorrupted %v, the line's own delta %v", sid, g, have, want, own)
					}
				}
			}
		}
	}
}

// TestTurnUnknownAcrossRestore: which values a baseline knows travels in
// the checkpoint, so a value unknown before a restart still counts its
// growth from the last line that gave it; a checkpoint of an older version
// (no "unknown") knew every value; a baseline that cannot be one is
// refused.
func TestTurnUnknownAcrossRestore(t *testing.T) {
	m := func(in, cost float64) map[string][5]float64 { return map[string][5]float64{"m": {in, 1, 0, 0, cost}} }
	r := newPipeRig(ingest.PipelineOptions{})
	r.out(lnResult("A", 0.25, m(10, 0.25)), corruptField(lnResult("A", 0.5, m(20, 0.5)), costField{"m", costK}, "x", false))
	b, err := json.Marshal(r.p.Tracker().Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var back ingest.TrackerState
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if u := back.Sessions[0].Models[0].Unknown; u != 0 {
		t.Fatalf("costUSD known once: Unknown %#x, want none (the first line gave it)", u)
	}
	r2 := newPipeRig(ingest.PipelineOptions{})
	if err := r2.p.Tracker().Restore(back, back.Now); err != nil {
		t.Fatal(err)
	}
	r2.out(lnResult("A", 0.75, m(30, 0.75)))
	if ts := turns(r2.rec); len(ts) != 1 || ts[0].Reset || ts[0].Delta[0].CostUSD != 0.5 || ts[0].Delta[0].Tokens[0] != 10 {
		t.Fatalf("after restore: %+v", ts)
	}

	// A value never given: unknown in the checkpoint, counted in full
	// when it comes.
	r = newPipeRig(ingest.PipelineOptions{})
	r.out(corruptField(lnResult("A", 0.25, m(10, 0.25)), costField{"m", 0}, nil, true))
	st := r.p.Tracker().Snapshot()
	if u := st.Sessions[0].Models[0].Unknown; u != 1 {
		t.Fatalf("inputTokens never given: Unknown %#x, want 1", u)
	}
	r2 = newPipeRig(ingest.PipelineOptions{})
	if err := r2.p.Tracker().Restore(st, st.Now); err != nil {
		t.Fatal(err)
	}
	r2.out(lnResult("A", 0.5, m(20, 0.5)))
	if ts := turns(r2.rec); len(ts) != 1 || ts[0].Delta[0].Tokens[0] != 20 || ts[0].Delta[0].CostUSD != 0.25 {
		t.Fatalf("after restore: %+v", ts)
	}

	// Before issue 28 a checkpoint had no "unknown": every value known.
	old := `{"now":0,"runs":[],"sessions":[{"id":"A","cost_usd":0.25,"has_cost":true,"models":[{"Model":"m","CostUSD":0.25,"Tokens":[10,1,0,0]}]}]}`
	if err := json.Unmarshal([]byte(old), &back); err != nil {
		t.Fatal(err)
	}
	r2 = newPipeRig(ingest.PipelineOptions{})
	if err := r2.p.Tracker().Restore(back, back.Now); err != nil {
		t.Fatal(err)
	}
	r2.out(lnResult("A", 0.5, m(20, 0.5)))
	if ts := turns(r2.rec); len(ts) != 1 || ts[0].Reset || ts[0].CostUSD != 0.25 || ts[0].Delta[0].Tokens != (cost.Tokens{10, 0, 0, 0}) {
		t.Fatalf("after an old checkpoint: %+v", ts)
	}
	for name, spoil := range map[string]func(*ingest.TrackerState){
		"unknown bits": func(s *ingest.TrackerState) { s.Sessions[0].Models[0].Unknown = 1 << 5 },
		"repeated model": func(s *ingest.TrackerState) {
			s.Sessions[0].Models = append(s.Sessions[0].Models, s.Sessions[0].Models[0])
		},
	} {
		var s ingest.TrackerState
		_ = json.Unmarshal([]byte(old), &s)
		spoil(&s)
		if err := ingest.NewTracker(ingest.TrackerOptions{}).Restore(s, s.Now); err == nil {
			t.Errorf("%s: restored", name)
		}
	}
}

// TestTurnModelBaselineBound: a session's baseline keeps at most
// cost.MaxSessionModels models, those the latest lines gave first; the
// ones forgotten count as over_capacity and, when they come back, in full.
func TestTurnModelBaselineBound(t *testing.T) {
	line := func(from, n int, in float64) jobj {
		ms := map[string][5]float64{}
		for i := from; i < from+n; i++ {
			ms[fmt.Sprintf("m%02d", i)] = [5]float64{in, 0, 0, 0, 0}
		}
		return lnResult("A", nil, ms)
	}
	r := newPipeRig(ingest.PipelineOptions{})
	per := streamjson.MaxResultModels
	lines := cost.MaxSessionModels/per + 1
	for i := range lines {
		r.out(line(i*per, per, 10))
	}
	over := int64(lines*per - cost.MaxSessionModels)
	if n := violationCounts(r.stats)[ingest.ViolationOverCapacity]; n != over {
		t.Fatalf("%d over_capacity, want %d", n, over)
	}
	// The first line's models went first; the last line's are kept.
	r.out(line(0, 1, 11), line((lines-1)*per, 1, 11))
	ts := turns(r.rec)
	if d := ts[len(ts)-2].Delta; len(d) != 1 || d[0].Tokens[0] != 11 {
		t.Errorf("a forgotten model came back: %+v, want in full", d)
	}
	if d := ts[len(ts)-1].Delta; len(d) != 1 || d[0].Tokens[0] != 1 {
		t.Errorf("a kept model: %+v, want its growth", d)
	}
}

// TestKnownBitsAgree: the decoder's ResultModel.Known and cost.Known
// number the values alike (ingest converts one to the other as is).
func TestKnownBitsAgree(t *testing.T) {
	for _, k := range cost.TokenTypes() {
		if streamjson.KnownTokens<<k != uint8(1)<<k || !cost.Known(streamjson.KnownTokens<<k).Tokens(k) {
			t.Errorf("token type %v: bits differ", k)
		}
	}
	if uint8(cost.KnownCost) != streamjson.KnownCost || uint8(cost.KnownAll) != streamjson.KnownAll {
		t.Errorf("cost bit %#x / %#x, all %#x / %#x", cost.KnownCost, streamjson.KnownCost, cost.KnownAll, streamjson.KnownAll)
	}
}
