package runspage

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/runcost"
)

// costedRun is a finalized-to-be run of workflow name that cost usd.
func costedRun(id, name string, usd float64) *ingest.Run {
	r := &ingest.Run{TaskID: id, Name: name, Status: ingest.StatusCompleted, Start: ms(0), End: ms(time.Second), InterruptLatencyMs: -1}
	r.Cost.Add(sonnet(usd, 100, 10), 1)
	return r
}

// section is the page's section of the run with task id.
func section(t *testing.T, page, id string) string {
	t.Helper()
	i := strings.Index(page, "task "+id+"<")
	if i < 0 {
		t.Fatalf("no run %s on the page", id)
	}
	s := page[strings.LastIndex(page[:i], "<section"):]
	return s[:strings.Index(s, "</section>")]
}

// TestPageRunCostBesideP95 pins a run's cost beside its workflow's p95:
// none before runcost.MinRuns earlier runs, then the p95 of the earlier
// runs of the same workflow only, marked when the run cost more; an open
// run beside the p95 of all finalized so far.
func TestPageRunCostBesideP95(t *testing.T) {
	p := newTestPage(Options{})
	for i, usd := range []float64{0.1, 0.2, 0.3, 0.4, 0.5} {
		finished(p, costedRun(fmt.Sprintf("early-%d", i), "review", usd))
	}
	finished(p, costedRun("dear", "review", 0.9))
	finished(p, costedRun("cheap", "review", 0.2))
	finished(p, costedRun("other", "deploy", 5)) // another workflow: no baseline of its own yet
	open := costedRun("open", "review", 0.05)
	open.Workflow, open.Status, open.End = true, ingest.StatusRunning, 0
	p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: open})

	got := render(t, p)
	for id, want := range map[string]string{
		"early-4": "· $0.5000 ·", // four runs before it: no p95 yet
		"dear":    `<span class="cost st-error">$0.9000 (over p95 $0.4800)</span>`,
		"cheap":   `<span class="cost">$0.2000 (p95 $0.8000)</span>`,
		"other":   "· $5.0000 ·",
		"open":    `<span class="cost">$0.0500 (p95 $0.7800)</span>`,
	} {
		if s := section(t, got, id); !strings.Contains(s, want) {
			t.Errorf("run %s lacks %q:\n%s", id, want, s)
		}
	}
}

// TestPageBudget pins the budget line: the spend against the cap read at
// each render (it grows between two), its meter, past the cap in red, the
// demo's marked as for show, and none without SetBudget.
func TestPageBudget(t *testing.T) {
	p := newTestPage(Options{})
	if strings.Contains(render(t, p), `id="budget"`) {
		t.Fatal("a budget line without SetBudget")
	}
	var cents atomic.Int64
	show := false
	p.SetBudget(func() runcost.Budget {
		b := runcost.Budget{CapUSD: 1, ShowOnly: show}
		if c := cents.Load(); c > 0 {
			usd := float64(c) / 100
			b.SpendUSD = &usd
		}
		return b
	})
	for _, tc := range []struct {
		cents int64
		show  bool
		want  []string
	}{
		{0, false, []string{`<p class="meta budget" id="budget">budget (--budget.max-cost-usd): no cost reported yet, of $1.0000<svg`, `class="spent" x="0" y="0" width="0.0"`}},
		{40, false, []string{`budget (--budget.max-cost-usd): $0.4000 of $1.0000 (40%)<svg`, `width="40.0"`}},
		{125, false, []string{`<p class="meta budget over" id="budget">`, `$1.2500 of $1.0000 (125%: over)`, `class="spent" x="0" y="0" width="100.0"`}},
		{60, true, []string{`budget (the demo&#39;s, for show: nothing is stopped): $0.6000 of $1.0000 (60%)`}},
	} {
		cents.Store(tc.cents)
		show = tc.show
		got := render(t, p)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%d¢: page lacks %q", tc.cents, w)
			}
		}
	}
}

// TestPageBaselineBounded: a page fed runs of ten times runcost's cap of
// workflows holds no more than the cap, and a run of each still renders.
func TestPageBaselineBounded(t *testing.T) {
	p := newTestPage(Options{Runs: 5})
	for i := range 10 * runcost.MaxWorkflows {
		finished(p, costedRun(fmt.Sprint(i), fmt.Sprintf("wf-%d", i), 1))
	}
	if w, c := p.base.Size(); w > runcost.MaxWorkflows || c > runcost.MaxWorkflows*runcost.Window {
		t.Errorf("the page's baseline holds %d workflows, %d costs", w, c)
	}
	if got := render(t, p); strings.Count(got, "<section") != 5 {
		t.Errorf("want the last 5 runs")
	}
}
