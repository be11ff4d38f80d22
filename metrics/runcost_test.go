package metrics

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/exposition"
	"github.com/cbc-otel/cbc-otel/ingest"
)

// runCostFamily and runCostUnknown are the families of a run's cost.
const (
	runCostFamily  = "cbc_workflow_run_cost_usd"
	runCostUnknown = "cbc_workflow_runs_cost_unknown_total"
)

// costedRun is a workflow run of name that made the given model calls
// (each call's cost; none: no telemetry joined) and ends with status.
func costedRun(task, name string, status ingest.RunStatus, calls ...float64) *ingest.Run {
	r := &ingest.Run{TaskID: task, RunID: "r-" + task, Workflow: true, Name: name, Status: status, Start: t0, End: t0 + 5000}
	for _, usd := range calls {
		r.Cost.Add(cost.Model{Model: "claude-test", CostUSD: usd, Tokens: cost.Tokens{10, 5, 0, 0}}, 1)
	}
	return r
}

// finish sends a run's life to m: started, finished (when terminal), and
// finalized n times.
func finish(m *Metrics, r *ingest.Run, finalized int) {
	m.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
	m.Observe(ingest.Lifecycle{Kind: ingest.RunFinished, Run: r})
	for range finalized {
		m.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: r})
	}
}

// histogramOf returns the one series of a histogram family with the given
// workflow label, or nil.
func histogramOf(t *testing.T, g prometheus.Gatherer, name, workflow string) *dto.Histogram {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "workflow" && l.GetValue() == workflow {
					return s.GetHistogram()
				}
			}
		}
	}
	return nil
}

// TestRunCostObserved: a finalized workflow run is observed once in
// cbc_workflow_run_cost_usd when its cost is known (a joined model call
// and a positive, finite sum), and counted in
// cbc_workflow_runs_cost_unknown_total otherwise; runs not counted in
// cbc_workflow_runs_total are in neither.
func TestRunCostObserved(t *testing.T) {
	cases := []struct {
		name      string
		run       *ingest.Run
		finalized int
		observed  float64 // the observation; 0: none
		unknown   float64
		le        float64 // the smallest bucket bound holding it (Inf: only +Inf)
	}{
		{name: "known", run: costedRun("t1", "wf", ingest.StatusCompleted, 0.30, 0.12), finalized: 1, observed: 0.42, le: 0.5},
		{name: "failed runs cost too", run: costedRun("t1", "wf", ingest.StatusFailed, 1.5), finalized: 1, observed: 1.5, le: 2},
		{name: "on a bound", run: costedRun("t1", "wf", ingest.StatusCompleted, 0.001), finalized: 1, observed: 0.001, le: 0.001},
		{name: "below the first bound", run: costedRun("t1", "wf", ingest.StatusStopped, 0.0002), finalized: 1, observed: 0.0002, le: 0.001},
		{name: "above the last bound", run: costedRun("t1", "wf", ingest.StatusCompleted, 250), finalized: 1, observed: 250, le: math.Inf(1)},
		{name: "finalized twice is observed once", run: costedRun("t1", "wf", ingest.StatusCompleted, 3), finalized: 2, observed: 3, le: 5},
		{name: "no telemetry joined", run: costedRun("t1", "wf", ingest.StatusCompleted), finalized: 1, unknown: 1},
		{name: "calls that cost $0 (unpriced)", run: costedRun("t1", "wf", ingest.StatusCompleted, 0, 0), finalized: 1, unknown: 1},
		{name: "a NaN cost", run: costedRun("t1", "wf", ingest.StatusCompleted, math.NaN()), finalized: 1, unknown: 1},
		{name: "an infinite cost", run: costedRun("t1", "wf", ingest.StatusCompleted, math.Inf(1)), finalized: 1, unknown: 1},
		{name: "abandoned without telemetry", run: costedRun("t1", "wf", ingest.StatusAbandoned), finalized: 2, unknown: 1},
		{name: "not finalized yet", run: costedRun("t1", "wf", ingest.StatusCompleted, 1), finalized: 0},
		{name: "finalized without a terminal status", run: costedRun("t1", "wf", ingest.StatusRunning, 1), finalized: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newTest(t, Options{})
			finish(m, c.run, c.finalized)
			h := histogramOf(t, m.Registry(), runCostFamily, "wf")
			switch {
			case c.observed == 0 && h != nil:
				t.Errorf("observed %d runs (sum %v), want none", h.GetSampleCount(), h.GetSampleSum())
			case c.observed != 0 && (h == nil || h.GetSampleCount() != 1 || !nearly(h.GetSampleSum(), c.observed)):
				t.Errorf("histogram %v, want one observation of %v", h, c.observed)
			case c.observed != 0:
				for _, b := range h.GetBucket() {
					if want := uint64(0); b.GetUpperBound() >= c.le {
						want = 1
						if b.GetCumulativeCount() != want {
							t.Errorf("bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
						}
					} else if b.GetCumulativeCount() != want {
						t.Errorf("bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
					}
				}
				if h.GetSchema() == 0 && len(h.GetPositiveSpan()) == 0 {
					t.Errorf("no native histogram")
				}
			}
			if got := series(t, m.Registry(), runCostUnknown)["workflow=wf"]; got != c.unknown {
				t.Errorf("%s = %v, want %v", runCostUnknown, got, c.unknown)
			}
		})
	}
}

// TestRunCostAddsUpToRuns is a property: whatever the mix of statuses,
// costs (none, $0, NaN, positive) and repeated or missing RunFinished
// events, once every run is finalized (once or twice), per workflow the
// runs observed plus those of unknown cost are the terminal runs counted,
// and the histogram's sum is the known costs' sum.
func TestRunCostAddsUpToRuns(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 1))
	for round := range 50 {
		m := newTest(t, Options{MaxWorkflows: 3})
		var wantSum float64
		for i := range 40 {
			name := fmt.Sprintf("wf-%d", rng.IntN(5)) // 5 names, cap 3: "other" too
			statuses := append(ingest.TerminalStatuses(), ingest.StatusRunning)
			var calls []float64
			for range rng.IntN(3) {
				calls = append(calls, []float64{0, 0.003, 0.5, 7, math.NaN()}[rng.IntN(5)])
			}
			r := costedRun(fmt.Sprintf("t%d", i), name, statuses[rng.IntN(len(statuses))], calls...)
			m.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
			finished := rng.IntN(3)
			for range finished {
				m.Observe(ingest.Lifecycle{Kind: ingest.RunFinished, Run: r})
			}
			for range 1 + rng.IntN(2) {
				m.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: r})
			}
			if usd, ok := runCost(&r.Cost); ok && finished > 0 && r.Status != ingest.StatusRunning {
				wantSum += usd
			}
		}
		runs := map[string]float64{}
		for k, v := range series(t, m.Registry(), "cbc_workflow_runs_total") {
			_, wf, _ := strings.Cut(k, "workflow=")
			runs[wf] += v
		}
		unknown := series(t, m.Registry(), runCostUnknown)
		observed := series(t, m.Registry(), runCostFamily)
		var sum float64
		for k, v := range observed {
			if strings.HasSuffix(k, "__sum") {
				sum += v
			}
		}
		if !nearly(sum, wantSum) {
			t.Fatalf("round %d: observed $%v in all, want $%v", round, sum, wantSum)
		}
		for wf, n := range runs {
			if got := observed["workflow="+wf] + unknown["workflow="+wf]; got != n {
				t.Fatalf("round %d, %s: observed %v + unknown %v, want runs_total %v", round, wf, observed["workflow="+wf], unknown["workflow="+wf], n)
			}
		}
	}
}

// TestRunCostLabels: the run-cost families take the run's workflow label
// under the same rules as every workflow series: the cap and the
// allow-list fold into "other", the demo's label is on them, and a plain
// task is never observed.
func TestRunCostLabels(t *testing.T) {
	m := newTest(t, Options{MaxWorkflows: 1, WorkflowAllow: regexp.MustCompile(`^(first|second)$`),
		ConstLabels: prometheus.Labels{DemoLabel: "true"}})
	finish(m, costedRun("t1", "first", ingest.StatusCompleted, 1), 1)
	finish(m, costedRun("t2", "second", ingest.StatusCompleted, 2), 1) // over the cap
	finish(m, costedRun("t3", "secret-name", ingest.StatusCompleted), 1)
	finish(m, costedRun("t4", "", ingest.StatusCompleted, 4), 1)
	task := &ingest.Run{TaskID: "t5", TaskType: "local_bash", Status: ingest.StatusCompleted}
	task.Cost.Add(cost.Model{Model: "m", CostUSD: 8}, 1)
	m.Observe(ingest.Lifecycle{Kind: ingest.TaskStarted, Run: task})
	m.Observe(ingest.Lifecycle{Kind: ingest.TaskEnded, Run: task})
	m.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: task})

	got := series(t, m.Registry(), runCostFamily)
	want := map[string]float64{
		"demo=true,workflow=first": 1, "demo=true,workflow=first__sum": 1,
		"demo=true,workflow=other": 1, "demo=true,workflow=other__sum": 2,
		"demo=true,workflow=unknown": 1, "demo=true,workflow=unknown__sum": 4,
	}
	if len(got) != len(want) {
		t.Errorf("%s = %v, want %v", runCostFamily, got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s{%s} = %v, want %v", runCostFamily, k, got[k], v)
		}
	}
	unknown := series(t, m.Registry(), runCostUnknown)
	if unknown["demo=true,workflow=other"] != 1 || len(unknown) != 3 { // first, other, unknown (pre-created)
		t.Errorf("%s = %v, want other 1 and zeros for first and unknown", runCostUnknown, unknown)
	}
}

// TestRunCostExemplar: the observation carries the run's trace id (and
// workflow span id) as its exemplar, exposed in an OpenMetrics scrape on
// the bucket the cost falls in; an exemplar func that gives nothing valid
// leaves the observation without one.
func TestRunCostExemplar(t *testing.T) {
	m := newTest(t, Options{Exemplar: func(r *ingest.Run) (string, string) {
		if r.TaskID == "bad" {
			return "", ""
		}
		return "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	}})
	finish(m, costedRun("good", "flow-good", ingest.StatusCompleted, 0.7), 1)
	finish(m, costedRun("bad", "flow-bad", ingest.StatusCompleted, 0.7), 1)
	srv := httptest.NewServer(exposition.Handler(exposition.Options{Gatherer: m.Registry()}))
	defer srv.Close()
	om := get(t, srv.Client(), srv.URL+"/metrics", map[string]string{"Accept": "application/openmetrics-text;version=1.0.0"})
	var found bool
	for _, line := range strings.Split(om, "\n") {
		if !strings.HasPrefix(line, runCostFamily+"_bucket{") {
			continue
		}
		sample, ex, hasEx := strings.Cut(line, " # {")
		switch {
		case strings.Contains(sample, `workflow="flow-bad"`) && hasEx:
			t.Errorf("exemplar on a run without trace: %s", line)
		case strings.Contains(sample, `workflow="flow-good",le="1.0"} 1`):
			found = hasEx && strings.Contains(ex, `trace_id="0af7651916cd43dd8448eb211c80319c"`) &&
				strings.Contains(ex, `span_id="b7ad6b7169203331"`) && strings.Contains(ex, "} 0.7")
		case strings.Contains(sample, `workflow="flow-good"`) && hasEx:
			t.Errorf("exemplar on another bucket than the cost's: %s", line)
		}
	}
	if !found {
		t.Errorf("no trace_id exemplar of 0.7 on le=1:\n%s", grep(om, runCostFamily+"_bucket"))
	}
}

// TestRunCostBuckets: the classic buckets run from $0.001 to $100 on a
// 1-2-5 log scale: increasing, every neighbour within 2.5×, each bound a
// 1, 2 or 5 times a power of ten.
func TestRunCostBuckets(t *testing.T) {
	b := RunCostBuckets()
	if len(b) != 16 || b[0] != 0.001 || b[len(b)-1] != 100 {
		t.Fatalf("buckets %v, want 16 from 0.001 to 100", b)
	}
	for i, v := range b {
		mant := v / math.Pow(10, math.Floor(math.Log10(v)+1e-9))
		if m := math.Round(mant*1e6) / 1e6; m != 1 && m != 2 && m != 5 {
			t.Errorf("bound %v is not 1, 2 or 5 × 10^k", v)
		}
		if i > 0 && (v <= b[i-1] || v/b[i-1] > 2.5+1e-9) {
			t.Errorf("bounds %v → %v: not increasing within 2.5×", b[i-1], v)
		}
	}
}

// TestRunCostNativeBounded: over the classic range ($0.001 … $100) the
// native histogram keeps its full resolution (schema 3, factor 1.09: about
// 133 buckets); far beyond it (1e-6 … 1e6 USD) it keeps at most 160 buckets
// by lowering its resolution, and never resets: every observation stays
// counted.
func TestRunCostNativeBounded(t *testing.T) {
	for _, c := range []struct {
		lo, hi     float64 // decades
		wantSchema int32   // the most it may be lowered to
	}{{-3, 2, 3}, {-6, 6, 0}} {
		m := newTest(t, Options{})
		rng := rand.New(rand.NewPCG(31, 2))
		const n = 20_000
		for i := range n {
			usd := math.Pow(10, c.lo+(c.hi-c.lo)*rng.Float64())
			finish(m, costedRun(fmt.Sprint(i), "wf", ingest.StatusCompleted, usd), 1)
		}
		h := histogramOf(t, m.Registry(), runCostFamily, "wf")
		buckets := 0
		for _, s := range h.GetPositiveSpan() {
			buckets += int(s.GetLength())
		}
		if buckets == 0 || buckets > 160 || h.GetSampleCount() != n || h.GetSchema() < c.wantSchema {
			t.Errorf("1e%v … 1e%v USD: %d native buckets at schema %d, %d observations; want 1…160 at schema ≥ %d and %d",
				c.lo, c.hi, buckets, h.GetSchema(), h.GetSampleCount(), c.wantSchema, n)
		}
		t.Logf("1e%v … 1e%v USD: %d native buckets at schema %d", c.lo, c.hi, buckets, h.GetSchema())
	}
}
