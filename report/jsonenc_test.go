package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// writeJSONReference is WriteJSONSessions as it was before jsonenc.go:
// encoding/json over the contract's types. The encoder must match it byte
// for byte.
func writeJSONReference(w io.Writer, runs []ingest.Run, sessions []Session, stats *ingest.Stats) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for i := range runs {
		var v any
		if runs[i].Workflow {
			v = WorkflowOf(&runs[i])
		} else {
			v = TaskOf(&runs[i])
		}
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	for _, s := range sessions {
		if err := enc.Encode(s); err != nil {
			return err
		}
	}
	if stats != nil {
		return enc.Encode(StatsOf(stats))
	}
	return nil
}

// referenceLine is encoding/json's line for v.
func referenceLine(t testing.TB, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// assertSameJSON fails t unless WriteJSONSessions and the reference write
// the same bytes, or both fail.
func assertSameJSON(t testing.TB, runs []ingest.Run, sessions []Session, stats *ingest.Stats) {
	t.Helper()
	var got, want bytes.Buffer
	gotErr := WriteJSONSessions(&got, runs, sessions, stats)
	wantErr := writeJSONReference(&want, runs, sessions, stats)
	if (gotErr != nil) != (wantErr != nil) {
		t.Fatalf("error %v, encoding/json's %v", gotErr, wantErr)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("differs from encoding/json\n got: %q\nwant: %q", got.Bytes(), want.Bytes())
	}
}

// assertSameStats fails t unless appendStats writes encoding/json's line.
func assertSameStats(t testing.TB, s StatsLine) {
	t.Helper()
	got := append(appendStats(nil, &s), '\n')
	if want := referenceLine(t, s); !bytes.Equal(got, want) {
		t.Fatalf("stats differ from encoding/json\n got: %q\nwant: %q", got, want)
	}
}

// trickyStrings are what a string encoder gets wrong: escapes, control
// bytes, DEL, HTML characters (not escaped here), non-ASCII, invalid
// UTF-8 (lone continuation, truncated sequence, surrogate, overlong),
// U+2028/U+2029 and a real U+FFFD.
func trickyStrings() []string {
	return []string{
		"", "plain", `quote"in`, `back\slash`, "nl\nline", "cr\r", "tab\t", "bs\b", "ff\f",
		"\x00nul", "\x01\x1f\x7f", "<a href='x'>&amp;</a>", "héllo wörld", "日本語", "emoji 🎉",
		"bad\xffutf8", "\x80", "trunc\xe6\x97", "\xed\xa0\x80surrogate", "\xc0\xafoverlong",
		"ls\u2028ps\u2029", "\u2027\u202a", "repl\ufffd", "end\\", "\"", "\x1b[31mred\x1b[0m",
	}
}

// trickyFloats are at and around encoding/json's format cutoffs (1e-6,
// 1e21), the exponent clean-up (e-07 → e-7), negative zero, the extremes,
// and values JSON has not.
func trickyFloats() []float64 {
	return []float64{
		0, math.Copysign(0, -1), 0.1, 0.2 + 0.1, 1, -1, 1e-7, 1e-6, 9.999999e-7, 1e-5, 1.5e-10, 1e-100,
		1e20, 1e21, 1e22, 999999999999999999999, 123456789.123456789, 0.0123, 5e-324, math.MaxFloat64,
		-1e21, -1e-7, 1e-300, 2.5e-8, math.NaN(), math.Inf(1), math.Inf(-1),
	}
}

// jsonGen makes random runs, sessions and stats lines that reach every
// branch of the encoder: every optional field set and unset, slices nil,
// empty and full, tricky strings and floats.
type jsonGen struct {
	r      *rand.Rand
	strs   []string
	floats []float64
}

func newJSONGen(seed uint64) jsonGen {
	return jsonGen{r: rand.New(rand.NewPCG(seed, 2026)), strs: trickyStrings(), floats: trickyFloats()}
}

func (g jsonGen) str() string {
	switch g.r.IntN(5) {
	case 0:
		return ""
	case 1, 2:
		return g.strs[g.r.IntN(len(g.strs))]
	}
	// Random bytes biased to the interesting ones, and some whole runes.
	var b []byte
	for range g.r.IntN(12) {
		switch g.r.IntN(4) {
		case 0:
			b = append(b, byte(g.r.IntN(256)))
		case 1:
			const interesting = "\"\\\n\x00\x1f\x7f\x80\xbf\xc2\xe2\xed\xf0\xf4\xff<>&"
			b = append(b, interesting[g.r.IntN(len(interesting))])
		case 2:
			b = append(b, string([]rune{'é', '世', '\u2028', '\u2029', '\ufffd', '🎉', 0x10FFFF}[g.r.IntN(7)])...)
		default:
			b = append(b, byte('a'+g.r.IntN(26)))
		}
	}
	return string(b)
}

func (g jsonGen) float() float64 {
	switch g.r.IntN(4) {
	case 0:
		return g.floats[g.r.IntN(len(g.floats))]
	case 1:
		return math.Float64frombits(g.r.Uint64()) // any bit pattern, NaN included
	case 2:
		return (g.r.Float64() - 0.5) * math.Pow(10, float64(g.r.IntN(61)-30))
	}
	return g.r.Float64() / 100 // a plausible cost
}

func (g jsonGen) int64() int64 {
	switch g.r.IntN(5) {
	case 0:
		return 0
	case 1:
		return []int64{-1, 1, math.MaxInt64, math.MinInt64, 1796205994000}[g.r.IntN(5)]
	case 2:
		return g.r.Int64N(1000)
	case 3:
		return -g.r.Int64N(1 << 40)
	}
	return int64(g.r.Uint64())
}

func (g jsonGen) int() int { return int(int32(g.int64())) }

func (g jsonGen) tokens() cost.Tokens {
	var t cost.Tokens
	if g.r.IntN(3) > 0 {
		for i := range t {
			t[i] = g.int64()
		}
	}
	return t
}

// cost is unknown a third of the time; otherwise anything, models beyond
// cost.MaxModels included.
func (g jsonGen) cost() cost.Sum {
	var c cost.Sum
	if g.r.IntN(3) == 0 {
		return c
	}
	if g.r.IntN(4) > 0 {
		c.CostUSD = g.float()
	}
	c.Tokens = g.tokens()
	if g.r.IntN(2) == 0 {
		c.Calls = g.int64()
	}
	switch g.r.IntN(3) {
	case 0:
	case 1:
		c.Models = []cost.Model{}
	default:
		for range 1 + g.r.IntN(10) {
			c.Models = append(c.Models, cost.Model{Model: g.str(), CostUSD: g.float(), Tokens: g.tokens()})
		}
	}
	return c
}

func (g jsonGen) run() ingest.Run {
	r := ingest.Run{
		TaskID: g.str(), RunID: g.str(), SessionID: g.str(), TaskType: g.str(), Name: g.str(),
		Workflow: g.r.IntN(5) > 0, Status: ingest.RunStatus(g.r.IntN(5)),
		Start: g.int64(), End: g.int64(), Stalls: g.int(), SpawnDepth: g.int(), Reason: g.str(),
		Usage: streamjson.Usage{TotalTokens: g.int64(), ToolUses: g.int64(), DurationMs: g.int64()},
		Cost:  g.cost(),
	}
	if g.r.IntN(2) == 0 {
		r.Start, r.End = 1796205994000, 1796205994000+g.r.Int64N(1e7) // a duration
	}
	if g.r.IntN(3) == 0 {
		r.Parent = ingest.AgentRef{TaskID: g.str(), RunID: g.str(), Index: g.int(), AgentID: g.str(), Workflow: g.str(), Label: g.str()}
	}
	if g.r.IntN(3) == 0 {
		r.ParentLink = &ingest.AgentRef{TaskID: g.str(), RunID: g.str(), Index: -1, Workflow: g.str()}
	}
	if g.r.IntN(3) == 0 {
		r.Resumes = &ingest.AgentRef{TaskID: r.TaskID, RunID: g.str(), Index: -1}
	}
	if n := g.r.IntN(5); n > 0 {
		for range n - 1 { // n == 1: empty, not nil
			r.Phases = append(r.Phases, ingest.Phase{Index: g.int(), Title: g.str(), Start: g.int64(), End: g.int64(), Child: g.r.IntN(2) == 0})
		}
		if r.Phases == nil {
			r.Phases = []ingest.Phase{}
		}
	}
	if n := g.r.IntN(8); n > 0 {
		r.Agents = []ingest.Agent{}
		for range n - 1 {
			r.Agents = append(r.Agents, ingest.Agent{
				Index: g.int(), AgentID: g.str(), Label: g.str(), PhaseIndex: g.int(), State: ingest.AgentState(g.r.IntN(7)),
				Cached: g.r.IntN(2) == 0, Start: g.int64(), End: g.int64(), EndInferred: g.r.IntN(2) == 0,
				Tokens: g.int64(), Error: g.str(), Stalls: g.r.IntN(3), Cost: g.cost(),
			})
		}
	}
	return r
}

// finitePtr is nil or a finite float: a Session holding a NaN fails in
// both encoders (TestJSONSessionNotFinite).
func (g jsonGen) finitePtr() *float64 {
	if g.r.IntN(3) == 0 {
		return nil
	}
	f := g.float()
	if !isFinite(f) {
		f = 0
	}
	return &f
}

func (g jsonGen) session() Session {
	s := Session{Kind: "session", SessionID: g.str()}
	if g.r.IntN(4) == 0 {
		s.Kind = g.str()
	}
	if g.r.IntN(3) == 0 {
		return s
	}
	s.Cost.CostUSD = g.finitePtr()
	if g.r.IntN(3) > 0 {
		s.Cost.TokensByType = &TokensByType{g.int64(), g.int64(), g.int64(), g.int64()}
	}
	s.Cost.ModelCalls = g.int64()
	switch g.r.IntN(3) {
	case 0:
	case 1:
		s.Cost.Models = []ModelCost{}
	default:
		for range 1 + g.r.IntN(4) {
			s.Cost.Models = append(s.Cost.Models, ModelCost{Model: g.str(), CostUSD: g.finitePtr(),
				TokensByType: TokensByType{g.int64(), g.int64(), g.int64(), g.int64()}})
		}
	}
	return s
}

func (g jsonGen) counts() map[string]int64 {
	switch g.r.IntN(4) {
	case 0:
		return nil
	case 1:
		return map[string]int64{}
	}
	m := map[string]int64{}
	for range 1 + g.r.IntN(6) {
		m[g.str()] = g.int64()
	}
	return m
}

func (g jsonGen) stats() StatsLine {
	return StatsLine{Kind: "stats", Lines: g.int64(), Bytes: g.int64(), Rejected: g.counts(), Violations: g.counts(),
		DroppedBytes: g.int64(), IncompleteBytes: g.int64(), RejectedBytes: g.counts()}
}

// TestJSONMatchesEncodingJSONTable pins the cases one by one: each
// optional field set and unset, nil and empty slices, every tricky string
// in every string field and every tricky float in every cost.
func TestJSONMatchesEncodingJSONTable(t *testing.T) {
	base := func() ingest.Run {
		return ingest.Run{TaskID: "w1", RunID: "r1", SessionID: "s1", Workflow: true, Name: "review",
			Status: ingest.StatusCompleted, Start: 1_000, End: 61_000, InterruptLatencyMs: -1}
	}
	agent := ingest.Agent{Index: 1, AgentID: "a1", Label: "reader", PhaseIndex: 1, State: ingest.AgentDone, Start: 1_000, End: 2_000, Tokens: 10}
	withCost := func(f float64) cost.Sum {
		var c cost.Sum
		c.Add(cost.Model{Model: "m", CostUSD: f, Tokens: cost.Tokens{1, 2, 3, 4}}, 1)
		return c
	}
	cases := map[string]func(r *ingest.Run){
		"bare":               func(r *ingest.Run) {},
		"task":               func(r *ingest.Run) { r.Workflow, r.TaskType = false, "local_bash" },
		"no times":           func(r *ingest.Run) { r.Start, r.End = 0, 0 },
		"end before start":   func(r *ingest.Run) { r.End = 10 },
		"negatives":          func(r *ingest.Run) { r.Start, r.End, r.Stalls, r.SpawnDepth = -5, -1, -2, -3 },
		"cli duration":       func(r *ingest.Run) { r.Usage = streamjson.Usage{TotalTokens: 5, ToolUses: 2, DurationMs: 59_000} },
		"stalls":             func(r *ingest.Run) { r.Stalls = 2 },
		"stopped budget":     func(r *ingest.Run) { r.Status, r.Reason = ingest.StatusStopped, ingest.StopReasonBudget },
		"reason not stopped": func(r *ingest.Run) { r.Reason = "worker_restart" },
		"spawn depth":        func(r *ingest.Run) { r.SpawnDepth = 2 },
		"launched by, all": func(r *ingest.Run) {
			r.Parent = ingest.AgentRef{TaskID: "w0", RunID: "r0", Index: 3, AgentID: "A3", Label: "planner", Workflow: "outer"}
		},
		"launched by, minimal": func(r *ingest.Run) { r.Parent = ingest.AgentRef{TaskID: "w0", Index: -1} },
		"linked to an ended launcher": func(r *ingest.Run) {
			r.ParentLink = &ingest.AgentRef{TaskID: "t0", RunID: "r0", Index: -1}
		},
		"nested and linked": func(r *ingest.Run) {
			r.Parent, r.ParentLink = ingest.AgentRef{TaskID: "w0", Index: 2}, &ingest.AgentRef{TaskID: "t0", Index: -1}
		},
		"resumes": func(r *ingest.Run) { r.Resumes = &ingest.AgentRef{TaskID: "w1", RunID: "r0", Index: -1} },
		"nested task": func(r *ingest.Run) {
			r.Workflow, r.TaskType, r.SpawnDepth = false, "local_agent", 2
			r.Parent = ingest.AgentRef{TaskID: "t0", RunID: "r0", Index: -1}
			r.Resumes = &ingest.AgentRef{TaskID: "w1", RunID: "r0", Index: -1}
		},
		"task without run id":   func(r *ingest.Run) { r.Workflow, r.TaskType, r.RunID = false, "Bash", "" },
		"launched by, no task":  func(r *ingest.Run) { r.Parent = ingest.AgentRef{RunID: "r0", Index: 3} },
		"phases and agents nil": func(r *ingest.Run) { r.Phases, r.Agents = nil, nil },
		"phases and agents empty": func(r *ingest.Run) {
			r.Phases, r.Agents = []ingest.Phase{}, []ingest.Agent{}
		},
		"phases and agents": func(r *ingest.Run) {
			r.Phases = []ingest.Phase{{Index: 1, Title: "Gather", Start: 1, End: 2}, {Index: 2, Title: "Check"}, {Index: 3, Title: "▸ sub", Child: true}}
			a2 := agent
			a2.Index, a2.State, a2.Cached, a2.EndInferred, a2.Error, a2.Stalls = 2, ingest.AgentCached, true, true, "boom", 2
			r.Agents = []ingest.Agent{agent, a2}
		},
		"every agent state": func(r *ingest.Run) {
			for s := range ingest.AgentState(7) {
				a := agent
				a.State = s
				r.Agents = append(r.Agents, a)
			}
		},
		"cost": func(r *ingest.Run) { r.Cost = withCost(0.0123) },
		"cost zero usd, tokens only": func(r *ingest.Run) {
			r.Cost.Tokens = cost.Tokens{0, 1, 0, 0}
		},
		"cost calls only":   func(r *ingest.Run) { r.Cost.Calls = 1 },
		"cost models empty": func(r *ingest.Run) { r.Cost = withCost(1); r.Cost.Models = []cost.Model{} },
		"cost unknown with models": func(r *ingest.Run) {
			r.Cost.Models = []cost.Model{{Model: "m", CostUSD: 1}}
		},
		"cost tokens cancel": func(r *ingest.Run) { r.Cost.Tokens = cost.Tokens{5, -5, 0, 0} },
		"agent cost": func(r *ingest.Run) {
			a := agent
			a.Cost = withCost(math.NaN())
			a.Cost.Add(cost.Model{Model: "n", CostUSD: math.Inf(1)}, 1)
			r.Agents = []ingest.Agent{a, agent}
		},
	}
	for _, s := range trickyStrings() {
		cases[fmt.Sprintf("string %q", s)] = func(r *ingest.Run) {
			r.TaskID, r.RunID, r.SessionID, r.Name = s, s, s, s
			r.Phases = []ingest.Phase{{Title: s}}
			a := agent
			a.AgentID, a.Label, a.Error = s, s, s
			a.Cost = withCost(1)
			a.Cost.Models[0].Model = s
			r.Agents = []ingest.Agent{a}
			r.Parent = ingest.AgentRef{TaskID: "w0" + s, RunID: s, AgentID: s, Label: s, Workflow: s}
		}
		cases[fmt.Sprintf("task string %q", s)] = func(r *ingest.Run) { r.Workflow, r.TaskID, r.TaskType = false, s, s }
	}
	for _, f := range trickyFloats() {
		cases[fmt.Sprintf("float %v/%v", f, math.Signbit(f))] = func(r *ingest.Run) {
			r.Cost = withCost(f)
			a := agent
			a.Cost = withCost(-f)
			r.Agents = []ingest.Agent{a}
		}
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			r := base()
			edit(&r)
			assertSameJSON(t, []ingest.Run{r}, nil, nil)
		})
	}

	t.Run("sessions", func(t *testing.T) {
		c := costCollector()
		sessions := append(c.Sessions(), Session{Kind: "session"}, Session{Kind: "session", SessionID: "x",
			Cost: Cost{Models: []ModelCost{}, CostUSD: new(math.Copysign(0, -1))}})
		for _, f := range trickyFloats() {
			if isFinite(f) {
				sessions = append(sessions, Session{Kind: "session", SessionID: "f", Cost: Cost{CostUSD: new(f),
					Models: []ModelCost{{Model: "m", CostUSD: new(f)}, {Model: "n"}}}})
			}
		}
		for _, s := range trickyStrings() {
			sessions = append(sessions, Session{Kind: s, SessionID: s, Cost: Cost{TokensByType: &TokensByType{1, 2, 3, 4}, Models: []ModelCost{{Model: s}}}})
		}
		assertSameJSON(t, c.Runs, sessions, new(ingest.Stats))
	})
	t.Run("stats", func(t *testing.T) {
		assertSameStats(t, StatsOf(new(ingest.Stats)))
		assertSameStats(t, StatsLine{Kind: "stats"})
		m := map[string]int64{}
		for i, s := range trickyStrings() {
			m[s] = int64(i) - 3
		}
		assertSameStats(t, StatsLine{Kind: "stats", Lines: -1, Bytes: math.MaxInt64, Rejected: m, Violations: map[string]int64{"b": 1, "a": 2, "B": 3}})
		assertSameStats(t, StatsLine{Kind: "stats", DroppedBytes: 9, IncompleteBytes: -1, RejectedBytes: map[string]int64{"too_long": 5}})
		assertSameStats(t, StatsLine{Kind: "stats", RejectedBytes: map[string]int64{}})
	})
}

// TestJSONSessionNotFinite: a hand-made Session with a NaN cost fails as
// encoding/json failed, after writing the lines before it.
func TestJSONSessionNotFinite(t *testing.T) {
	runs := costRuns()
	for _, s := range []Session{
		{Kind: "session", Cost: Cost{CostUSD: new(math.NaN())}},
		{Kind: "session", Cost: Cost{Models: []ModelCost{{Model: "m", CostUSD: new(math.Inf(-1))}}}},
	} {
		sessions := []Session{{Kind: "session", SessionID: "ok"}, s, {Kind: "session", SessionID: "after"}}
		assertSameJSON(t, runs, sessions, nil)
		var b bytes.Buffer
		if err := WriteJSONSessions(&b, runs, sessions, nil); err == nil || !strings.HasSuffix(b.String(), "\"ok\"}\n") {
			t.Errorf("error %v after %q", err, b.String())
		}
	}
}

// TestJSONMatchesEncodingJSONRandom compares the two encoders on
// thousands of random runs, sessions and stats lines.
func TestJSONMatchesEncodingJSONRandom(t *testing.T) {
	n := 5000
	if testing.Short() {
		n = 500
	}
	g := newJSONGen(22)
	for i := range n {
		runs := make([]ingest.Run, g.r.IntN(4))
		for j := range runs {
			runs[j] = g.run()
		}
		sessions := make([]Session, g.r.IntN(3))
		for j := range sessions {
			sessions[j] = g.session()
		}
		var stats *ingest.Stats
		if g.r.IntN(2) == 0 {
			stats = new(ingest.Stats)
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			assertSameJSON(t, runs, sessions, stats)
			assertSameStats(t, g.stats())
		})
		if t.Failed() {
			return
		}
	}
}

// TestJSONMatchesEncodingJSONRecordings compares the two on every
// recording of the corpus and the simulator, stats line included.
func TestJSONMatchesEncodingJSONRecordings(t *testing.T) {
	recs, err := filepath.Glob("../testdata/*/*.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob("../testdata/corpus/*/*.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rec := range append(recs, more...) {
		if strings.Contains(rec, ".expect") || strings.HasSuffix(rec, ".stdin.ndjson") {
			continue
		}
		n++
		runs, stats := replay(t, rec)
		c := Collector{Runs: runs}
		assertSameJSON(t, runs, c.Sessions(), stats)
	}
	if n < 10 {
		t.Fatalf("found %d recordings", n)
	}
}

// chunkWriter records the size of every Write; from the failAt-th one
// on, when failAt > 0, it fails with fail.
type chunkWriter struct {
	bytes.Buffer
	writes []int
	failAt int
	fail   error
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, len(p))
	if w.failAt > 0 && len(w.writes) >= w.failAt {
		return 0, w.fail
	}
	return w.Buffer.Write(p)
}

// TestJSONWritesInChunks: a report of many runs reaches w in chunks of at
// least jsonChunk bytes (not a write per line: replay's os.Stdout is
// unbuffered), still byte for byte encoding/json's; a small one in one
// write; and a failing write is the error returned.
func TestJSONWritesInChunks(t *testing.T) {
	runs, sessions := benchRuns()
	assertSameJSON(t, runs, sessions, new(ingest.Stats))
	var w chunkWriter
	if err := WriteJSONSessions(&w, runs, sessions, new(ingest.Stats)); err != nil {
		t.Fatal(err)
	}
	if n := w.Len(); len(w.writes) > n/jsonChunk+1 {
		t.Errorf("%d bytes in %d writes", n, len(w.writes))
	}
	for i, n := range w.writes[:len(w.writes)-1] {
		if n < jsonChunk {
			t.Errorf("write %d of %d: %d bytes", i, len(w.writes), n)
		}
	}
	var small chunkWriter
	if err := WriteJSONSessions(&small, runs[:3], sessions, new(ingest.Stats)); err != nil || len(small.writes) != 1 {
		t.Errorf("%d writes, error %v", len(small.writes), err)
	}
	for _, failAt := range []int{1, 2} {
		full := errors.New("disk full")
		w := chunkWriter{failAt: failAt, fail: full}
		if err := WriteJSONSessions(&w, runs, sessions, new(ingest.Stats)); !errors.Is(err, full) || len(w.writes) != failAt {
			t.Errorf("failing write %d: %d writes, error %v", failAt, len(w.writes), err)
		}
	}
}

// TestJSONEncoderKnowsEveryField fails when a field is added to a contract
// type: the encoder (jsonenc.go) and jsonGen must then learn it too, or
// the comparisons above would not see it.
func TestJSONEncoderKnowsEveryField(t *testing.T) {
	for typ, n := range map[reflect.Type]int{
		reflect.TypeFor[Workflow](): 20, reflect.TypeFor[Agent](): 13, reflect.TypeFor[Phase](): 5,
		reflect.TypeFor[LaunchedBy](): 6, reflect.TypeFor[Cost](): 4, reflect.TypeFor[ModelCost](): 3,
		reflect.TypeFor[TokensByType](): 4, reflect.TypeFor[Task](): 8, reflect.TypeFor[Session](): 3,
		reflect.TypeFor[StatsLine](): 8,
	} {
		if typ.NumField() != n {
			t.Errorf("%v has %d fields, the encoder knows %d: teach appendWorkflowRun and friends, and jsonGen", typ, typ.NumField(), n)
		}
	}
}

// FuzzJSONMatchesEncodingJSON puts the fuzzer's strings, floats and
// integers in every kind of field and compares the two encoders.
func FuzzJSONMatchesEncodingJSON(f *testing.F) {
	strs, floats := trickyStrings(), trickyFloats()
	for i, s := range strs {
		fl := floats[i%len(floats)]
		f.Add(s, strs[(i+1)%len(strs)], strs[(i+2)%len(strs)], fl, -fl, int64(i)-3)
	}
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, f1, f2 float64, n int64) {
		var sum cost.Sum
		sum.Add(cost.Model{Model: s2, CostUSD: f1, Tokens: cost.Tokens{n, 1, 0, -n}}, n)
		sum.Add(cost.Model{Model: s3, CostUSD: f2}, 1)
		r := ingest.Run{
			TaskID: s1, RunID: s2, SessionID: s3, Name: s1 + s2, Workflow: true, Status: ingest.RunStatus(uint64(n) % 5),
			Start: n, End: n + 1000, Stalls: int(n % 3), SpawnDepth: int(n % 4), Usage: streamjson.Usage{TotalTokens: n, DurationMs: n % 2},
			Parent: ingest.AgentRef{TaskID: s3, RunID: s1, Workflow: s2, Label: s3, AgentID: s1, Index: int(n)},
			Phases: []ingest.Phase{{Index: int(n), Title: s3, Start: n}},
			Agents: []ingest.Agent{
				{Index: 1, AgentID: s1, Label: s2, Error: s3, State: ingest.AgentState(uint64(n) % 7), EndInferred: n%2 == 0, Tokens: n, Stalls: int(n % 3), Cost: sum},
				{Index: 2, Label: s3 + s1, Cached: true},
			},
			Cost: sum,
		}
		task := ingest.Run{TaskID: s2, RunID: s3, TaskType: s1, Status: ingest.StatusFailed, SpawnDepth: int(n % 4),
			ParentLink: &ingest.AgentRef{TaskID: s1, RunID: s2, Index: -1, Workflow: s3}, Resumes: &ingest.AgentRef{TaskID: s2, RunID: s1}}
		sessions := []Session{{Kind: "session", SessionID: s1, Cost: CostOf(&sum)}, {Kind: s2, SessionID: s3}}
		if isFinite(f2) {
			sessions = append(sessions, Session{Kind: "session", SessionID: s2, Cost: Cost{CostUSD: &f2, Models: []ModelCost{{Model: s1, CostUSD: &f2}}}})
		}
		assertSameJSON(t, []ingest.Run{r, task}, sessions, new(ingest.Stats))
		assertSameStats(t, StatsLine{Kind: s3, Lines: n, Rejected: map[string]int64{s1: n, s2: 1, s3: -1}, Violations: map[string]int64{s2 + s1: 2}})
	})
}

// benchRuns is a task-heavy replay: workflow runs of 5-20 agents over 1-4
// phases, a third of them with the CLI's cost joined, and plain tasks.
func benchRuns() ([]ingest.Run, []Session) {
	r := rand.New(rand.NewPCG(1, 22))
	const t0 = 1796205994000
	var runs []ingest.Run
	for i := range 3000 {
		start := t0 + int64(i)*1000
		if i%10 == 9 {
			runs = append(runs, ingest.Run{TaskID: fmt.Sprintf("b%07x", r.Uint32()), TaskType: "local_bash",
				Status: ingest.StatusCompleted, Start: start, End: start + 400})
			continue
		}
		run := ingest.Run{TaskID: fmt.Sprintf("w%07x", r.Uint32()), RunID: fmt.Sprintf("run-%d", i), SessionID: "6f1c2a9e-3b7d-4c55-9e0a-0c3d2b1a4f77",
			Workflow: true, Name: "sim-review", Status: ingest.StatusCompleted, Start: start, End: start + 60_000 + r.Int64N(60_000),
			Usage: streamjson.Usage{TotalTokens: r.Int64N(200_000), ToolUses: r.Int64N(50), DurationMs: 55_000 + r.Int64N(5000)}}
		withCost := i%3 == 0
		phases := 1 + r.IntN(4)
		for p := range phases {
			run.Phases = append(run.Phases, ingest.Phase{Index: p + 1, Title: []string{"Gather", "Review", "Check", "Summarize"}[p],
				Start: start + int64(p)*10_000, End: start + int64(p+1)*10_000})
		}
		for a := range 5 + r.IntN(16) {
			ag := ingest.Agent{Index: a + 1, AgentID: fmt.Sprintf("agent-%d-%d", i, a), Label: fmt.Sprintf("reader:file-%d.go", a),
				PhaseIndex: 1 + a%phases, State: ingest.AgentDone, Start: start + int64(a)*100, End: start + int64(a)*100 + r.Int64N(50_000),
				Tokens: r.Int64N(20_000)}
			if a%7 == 6 {
				ag.State, ag.Error = ingest.AgentError, "tool failed: exit status 1"
			}
			if withCost {
				ag.Cost.Add(cost.Model{Model: "claude-sonnet-4-5", CostUSD: r.Float64() / 50,
					Tokens: cost.Tokens{r.Int64N(5000), r.Int64N(2000), r.Int64N(20_000), r.Int64N(1000)}}, 1+r.Int64N(5))
				if a%4 == 0 {
					ag.Cost.Add(cost.Model{Model: "claude-haiku-4-5", CostUSD: r.Float64() / 500, Tokens: cost.Tokens{r.Int64N(500), r.Int64N(200), 0, 0}}, 1)
				}
				for _, m := range ag.Cost.Models {
					run.Cost.Add(m, 0)
				}
				run.Cost.Calls += ag.Cost.Calls
			}
			run.Agents = append(run.Agents, ag)
		}
		runs = append(runs, run)
	}
	c := Collector{Runs: runs}
	c.Observe(ingest.Lifecycle{Kind: ingest.ModelCallSeen, Call: &ingest.ModelCall{SessionID: "s1", Scope: ingest.CallMain,
		Cost: cost.Model{Model: "claude-sonnet-4-5", CostUSD: 0.0123, Tokens: cost.Tokens{100, 20, 3000, 0}}}})
	return runs, c.Sessions()
}

// BenchmarkWriteJSON writes benchRuns' report with encoding/json (the
// reference, as before) and with the appender, to io.Discard (the
// encoding alone) and to /dev/null unbuffered (like replay's os.Stdout,
// where encoding/json wrote a line per syscall).
func BenchmarkWriteJSON(b *testing.B) {
	runs, sessions := benchRuns()
	stats := new(ingest.Stats)
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer devnull.Close()
	var out bytes.Buffer
	if err := WriteJSONSessions(&out, runs, sessions, stats); err != nil {
		b.Fatal(err)
	}
	for _, enc := range []struct {
		name  string
		write func(io.Writer, []ingest.Run, []Session, *ingest.Stats) error
	}{{"encoding-json", writeJSONReference}, {"append", WriteJSONSessions}} {
		for _, w := range []struct {
			name string
			w    io.Writer
		}{{"discard", io.Discard}, {"devnull", devnull}} {
			b.Run(enc.name+"/"+w.name, func(b *testing.B) {
				b.SetBytes(int64(out.Len()))
				b.ReportAllocs()
				for b.Loop() {
					if err := enc.write(w.w, runs, sessions, stats); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
