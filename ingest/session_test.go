// Tests of session cost: result lines' cumulative values turned into
// per-turn deltas (the rule in Turn's documentation), on the recordings and
// on the cases the recordings do not have: resets, a first result, float
// noise, a cost missing, the bound on sessions and a restore.
package ingest_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	models map[string]ingest.ModelUsage
}

func sumTurns(ts []ingest.Turn) map[string]*sums {
	out := map[string]*sums{}
	for _, tr := range ts {
		s := out[tr.SessionID]
		if s == nil {
			s = &sums{models: map[string]ingest.ModelUsage{}}
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
	// A model disappeared: a reset.
	r.out(lnResult("A", 0.7, model{"opus": {5, 3, 100, 5, 0.7}}))
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
		{"A", true, 0.7, model{"opus": {5, 3, 100, 5, 0.7}}},
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
			if d.Tokens != (ingest.Tokens{int64(v[0]), int64(v[1]), int64(v[2]), int64(v[3])}) || !near(d.CostUSD, v[4]) {
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
	if ts := turns(r2.rec); len(ts) != 1 || ts[0].Reset || !near(ts[0].CostUSD, 0.15) || ts[0].Delta[0].Tokens != (ingest.Tokens{15, 0, 0, 0}) {
		t.Fatalf("after restore: %+v", ts)
	}
	if err := r2.p.Tracker().Restore(back, back.Now); err == nil {
		t.Error("Restore on a Tracker holding baselines")
	}
	for name, spoil := range map[string]func(*ingest.TrackerState){
		"duplicate":      func(s *ingest.TrackerState) { s.Sessions = append(s.Sessions, s.Sessions[0]) },
		"negative cost":  func(s *ingest.TrackerState) { s.Sessions[0].CostUSD = -1 },
		"negative count": func(s *ingest.TrackerState) { s.Sessions[0].Models[0].Tokens[2] = -1 },
		"unnamed model":  func(s *ingest.TrackerState) { s.Sessions[0].Models[0].Model = "" },
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
