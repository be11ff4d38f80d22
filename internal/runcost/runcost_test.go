package runcost

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
)

func run(name string, usd float64, calls int64) ingest.Run {
	return ingest.Run{Workflow: true, Name: name, Cost: cost.Sum{CostUSD: usd, Calls: calls}}
}

// TestVerdicts is the table of what a run is judged against: only its
// workflow's earlier runs with a known cost, known from MinRuns of them.
func TestVerdicts(t *testing.T) {
	five := []ingest.Run{run("w", 0.1, 1), run("w", 0.2, 1), run("w", 0.3, 1), run("w", 0.4, 1), run("w", 0.5, 1)}
	for _, tc := range []struct {
		name string
		runs []ingest.Run
		want Verdict // of the last run
	}{
		{"first run: no baseline", []ingest.Run{run("w", 1, 1)}, Verdict{CostUSD: 1, CostKnown: true}},
		{"four earlier runs: not yet", append(slices.Clone(five[:4]), run("w", 9, 1)), Verdict{CostUSD: 9, CostKnown: true}},
		{"five earlier runs: over their p95", append(slices.Clone(five), run("w", 9, 1)),
			Verdict{CostUSD: 9, CostKnown: true, Base: Known{P95: 0.48, Median: 0.3, Runs: 5}, BaseKnown: true}},
		{"under the p95", append(slices.Clone(five), run("w", 0.2, 1)),
			Verdict{CostUSD: 0.2, CostKnown: true, Base: Known{P95: 0.48, Median: 0.3, Runs: 5}, BaseKnown: true}},
		{"another workflow's runs do not count", append(slices.Clone(five), run("v", 9, 1)), Verdict{CostUSD: 9, CostKnown: true}},
		{"unknown cost: baseline shown, nothing judged", append(slices.Clone(five), run("w", 0, 0)),
			Verdict{Base: Known{P95: 0.48, Median: 0.3, Runs: 5}, BaseKnown: true}},
		{"$0 from calls that price nothing is unknown, not free",
			append([]ingest.Run{run("w", 0, 3), run("w", 0, 3), run("w", 0, 3), run("w", 0, 3), run("w", 0, 3)}, run("w", 1, 1)),
			Verdict{CostUSD: 1, CostKnown: true}},
		{"an infinite cost is unknown", append(slices.Clone(five[:4]), run("w", math.Inf(1), 1), run("w", 1, 1)), Verdict{CostUSD: 1, CostKnown: true}},
		{"a task is not judged", append(slices.Clone(five), ingest.Run{Name: "w", Cost: cost.Sum{CostUSD: 9, Calls: 1}}), Verdict{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Verdicts(tc.runs)
			got := v[len(v)-1]
			got.Base.P95 = math.Round(got.Base.P95*1e9) / 1e9
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if got.Over() != (tc.want.CostKnown && tc.want.BaseKnown && tc.want.CostUSD > tc.want.Base.P95) {
				t.Errorf("Over() = %v", got.Over())
			}
		})
	}
}

// TestWindowSlides proves the baseline is the last Window costs: after
// Window cheap runs the dear ones before them are forgotten.
func TestWindowSlides(t *testing.T) {
	var b Baseline
	for range Window {
		b.add("w", 100)
	}
	for range Window {
		b.add("w", 1)
	}
	if k, ok := b.Of("w"); !ok || k.P95 != 1 || k.Median != 1 || k.Runs != Window {
		t.Errorf("Of = %+v %v, want p95 1 over %d runs", k, ok, Window)
	}
}

// TestBaselineProperties: for random streams of runs over many workflows
// (more than MaxWorkflows), every known baseline has median ≤ p95 ≤ the
// dearest cost it holds, its costs are at most Window, and b never holds
// more than MaxWorkflows workflows; the workflow just added to is never
// the one forgotten.
func TestBaselineProperties(t *testing.T) {
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var b Baseline
		nwf := 1 + rng.IntN(3*MaxWorkflows)
		for i := range 4000 {
			name := fmt.Sprintf("wf-%d", rng.IntN(nwf))
			usd := math.Exp(rng.NormFloat64()*3) * []float64{1e-6, 1, 1e6}[rng.IntN(3)]
			b.Run(&ingest.Run{Workflow: true, Name: name, Cost: cost.Sum{CostUSD: usd, Calls: 1}})
			if _, ok := b.wf[name]; !ok {
				t.Fatalf("seed %d step %d: %s forgotten right after its run", seed, i, name)
			}
			k, ok := b.Of(name)
			if ok && !(k.Median <= k.P95) {
				t.Fatalf("seed %d step %d: median %v > p95 %v", seed, i, k.Median, k.P95)
			}
			if ok && k.P95 > slices.Max(b.wf[name].costs) {
				t.Fatalf("seed %d step %d: p95 %v over the max", seed, i, k.P95)
			}
			w, c := b.Size()
			if w > MaxWorkflows || c > MaxWorkflows*Window {
				t.Fatalf("seed %d step %d: %d workflows, %d costs: past the bound", seed, i, w, c)
			}
			if n := len(b.wf[name].costs); n > Window || cap(b.wf[name].costs) > 2*Window {
				t.Fatalf("seed %d: %s holds %d costs (cap %d)", seed, name, n, cap(b.wf[name].costs))
			}
		}
	}
}

// TestQuantileMonotone: on any sorted sample, quantile is monotone in q
// and within the sample's range, whatever the values' magnitudes.
func TestQuantileMonotone(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		s := make([]float64, 1+rng.IntN(120))
		for i := range s {
			s[i] = math.Exp(rng.NormFloat64() * 20)
		}
		slices.Sort(s)
		prev := math.Inf(-1)
		for q := 0.0; q <= 1; q += 0.05 {
			v := quantile(s, q)
			if v < prev || v < s[0] || v > s[len(s)-1] {
				t.Fatalf("quantile(%v) = %v after %v on %v", q, v, prev, s)
			}
			prev = v
		}
	}
}

// TestBudgetText: the share is rounded away from 100% (a cap not reached
// never reads 100%, one passed never does either), and nothing shows
// without a cap.
func TestBudgetText(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		b    Budget
		want string
	}{
		{Budget{CapUSD: 1, SpendUSD: f(0.999)}, "$0.9990 of $1.0000 (99%)"},
		{Budget{CapUSD: 1, SpendUSD: f(1)}, "$1.0000 of $1.0000 (100%)"},
		{Budget{CapUSD: 1, SpendUSD: f(1.001)}, "$1.0010 of $1.0000 (101%: over)"},
		{Budget{CapUSD: 1}, "no cost reported yet, of $1.0000"},
		{Budget{SpendUSD: f(1)}, ""},
		{Budget{CapUSD: math.NaN(), SpendUSD: f(1)}, ""},
	} {
		if got := tc.b.Text(); got != tc.want {
			t.Errorf("%+v: Text() = %q, want %q", tc.b, got, tc.want)
		}
	}
}
