package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/golden"
	"github.com/cbc-otel/cbc-otel/internal/runcost"
)

// p95Runs are finalized runs in order: five of review ($0.10…$0.50), one
// dearer that the budget stopped, one cheaper, one whose cost is unknown,
// one of another workflow, and a plain task.
func p95Runs() []ingest.Run {
	var runs []ingest.Run
	add := func(id, name string, usd float64, st ingest.RunStatus) {
		r := ingest.Run{TaskID: id, Workflow: true, Name: name, Status: st, Start: costT0, End: costT0 + 1000, InterruptLatencyMs: -1}
		if usd > 0 {
			r.Cost.Add(costCall("claude-sonnet-4-5", usd, 100, 10, 0, 0), 1)
		}
		if st == ingest.StatusStopped {
			r.Reason = "budget"
		}
		runs = append(runs, r)
	}
	for i, usd := range []float64{0.1, 0.2, 0.3, 0.4, 0.5} {
		add("early"+string(rune('1'+i)), "review", usd, ingest.StatusCompleted)
	}
	add("dear", "review", 0.9, ingest.StatusStopped)
	add("cheap", "review", 0.2, ingest.StatusCompleted)
	add("unknown", "review", 0, ingest.StatusFailed)
	add("other", "deploy", 5, ingest.StatusCompleted)
	return append(runs, ingest.Run{TaskID: "t1", TaskType: "local_bash", Status: ingest.StatusCompleted})
}

func usd(v float64) *float64 { return &v }

// TestP95Golden pins the run lines of the waterfall and the rows of the
// step summary beside their workflow's p95 (of the runs before each), the
// dearer run marked, with the budget line of a session the cap stopped.
func TestP95Golden(t *testing.T) {
	runs := p95Runs()
	bu := &runcost.Budget{CapUSD: 2, SpendUSD: usd(2.0123)}
	var w bytes.Buffer
	if err := WriteWaterfall(&w, runs, nil, WaterfallOptions{Width: 80, Budget: bu}); err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, "testdata/p95.waterfall.golden", w.Bytes())
	golden.Assert(t, "testdata/step_summary.p95.golden", stepSummary(t, runs, nil, StepSummaryOptions{Budget: bu}))
	for _, want := range []string{
		"■ review  stopped  1.00s  0 tokens  0 tool uses  $0.9000  (over p95 $0.4800)  [task dear]",
		"✔ review  completed  1.00s  0 tokens  0 tool uses  $0.2000  (p95 $0.8000)  [task cheap]",
		"✔ review  completed  1.00s  0 tokens  0 tool uses  $0.5000  [task early5]",
		"✔ deploy  completed  1.00s  0 tokens  0 tool uses  $5.0000  [task other]",
		"stop reason: budget",
		"budget (--budget.max-cost-usd): $2.0123 of $2.0000 (101%: over)\n",
	} {
		if !strings.Contains(w.String(), want) {
			t.Errorf("waterfall lacks %q:\n%s", want, w.String())
		}
	}
}

// TestBudgetLine is the table of the budget line in both reports: the
// spend the cap weighs, the cap and the share used, the demo's marked as
// for show, a CLI that reports no cost said so, and no line without a cap.
func TestBudgetLine(t *testing.T) {
	for _, tc := range []struct {
		name      string
		b         *runcost.Budget
		waterfall string // "" : no line
		markdown  string
	}{
		{"no budget", nil, "", ""},
		{"no cap", &runcost.Budget{SpendUSD: usd(1)}, "", ""},
		{"under", &runcost.Budget{CapUSD: 1, SpendUSD: usd(0.4123)},
			"budget (--budget.max-cost-usd): $0.4123 of $1.0000 (41%)\n",
			"**Budget \\(--budget.max-cost-usd\\):** \\$0.4123 of \\$1.0000 \\(41%\\)\n"},
		{"over", &runcost.Budget{CapUSD: 0.5, SpendUSD: usd(0.75)},
			"budget (--budget.max-cost-usd): $0.7500 of $0.5000 (150%: over)\n",
			"**Budget \\(--budget.max-cost-usd\\):** \\$0.7500 of \\$0.5000 \\(150%: over\\)\n"},
		{"no cost reported", &runcost.Budget{CapUSD: 1},
			"budget (--budget.max-cost-usd): no cost reported yet, of $1.0000\n",
			"**Budget \\(--budget.max-cost-usd\\):** no cost reported yet, of \\$1.0000\n"},
		{"the demo's", &runcost.Budget{CapUSD: 0.25, SpendUSD: usd(0.1179), ShowOnly: true},
			"budget (the demo's, for show: nothing is stopped): $0.1179 of $0.2500 (47%)\n",
			"**Budget \\(the demo's, for show: nothing is stopped\\):** \\$0.1179 of \\$0.2500 \\(47%\\)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := costRuns()
			var w bytes.Buffer
			if err := WriteWaterfall(&w, runs, nil, WaterfallOptions{Budget: tc.b}); err != nil {
				t.Fatal(err)
			}
			md := string(stepSummary(t, runs, nil, StepSummaryOptions{Budget: tc.b}))
			for _, c := range []struct{ out, want, prefix string }{{w.String(), tc.waterfall, "budget"}, {md, tc.markdown, "**Budget"}} {
				if c.want == "" && strings.Contains(c.out, c.prefix) || c.want != "" && !strings.Contains(c.out, c.want) {
					t.Errorf("want %q in:\n%s", c.want, c.out)
				}
			}
		})
	}
}
