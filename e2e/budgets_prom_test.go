package e2e

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/dashboards"
)

// TestBudgetAlertsEndToEnd loads the rules of two budgets, one of each
// source, rendered with every window scaled by 1/60 (a day → 24 min, the
// lookback 1h → 1 min, `for:` 15m → 15 s), into a real Prometheus 2.42
// scraping a target whose cost counters grow by $1/s: the session cost
// (cbc_cost_usd_total) and a workflow's joined cost
// (cbc_workflow_cost_usd_total). The session budget, $1000 a day with the
// whole window as horizon, is far from spent but burns at 1.44× its rate:
// CbcCostBudgetBurn fires. The workflow budget, $5 a day, is spent within
// seconds: CbcCostBudgetExceeded fires. Both with their labels and their
// annotations expanded (the amount through a query template) by Prometheus
// itself, and every Budgets panel query gives a number.
func TestBudgetAlertsEndToEnd(t *testing.T) {
	promBin := requirePrometheus(t)
	rules, err := dashboards.RenderRules(dashboards.RuleOptions{WindowScale: 1.0 / 60, Budgets: []dashboards.Budget{
		{Name: "e2e-burn", Source: dashboards.BudgetSession, Window: 24 * time.Hour, AmountUSD: 1000, Horizon: 24 * time.Hour},
		{Name: "e2e-exceeded", Source: dashboards.BudgetWorkflow, Workflow: "e2e-review", Window: 24 * time.Hour, AmountUSD: 5},
	}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		usd := time.Since(start).Seconds() // $1/s on each counter
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# TYPE cbc_cost_usd_total counter\ncbc_cost_usd_total{model=\"claude-e2e\"} %g\n", usd)
		fmt.Fprintf(w, "# TYPE cbc_workflow_cost_usd_total counter\ncbc_workflow_cost_usd_total{workflow=\"e2e-review\"} %g\n", usd)
		fmt.Fprintf(w, "cbc_workflow_cost_usd_total{workflow=\"e2e-other\"} %g\n", 100*usd)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	prom := startPrometheusWithRules(t, promBin, ln.Addr().String(), rules)

	want := map[string]struct {
		budget, severity, anchor, amount string
	}{
		dashboards.AlertCostBudgetBurn:     {"e2e-burn", dashboards.SeverityWarning, "#cost-budget-burn", "1000.00 USD"},
		dashboards.AlertCostBudgetExceeded: {"e2e-exceeded", dashboards.SeverityCritical, "#cost-budget-exceeded", "5.00 USD"},
	}
	promPoll(t, 180*time.Second, "both budget alerts firing", func() (bool, string) {
		as, err := prom.alerts()
		if err != nil {
			return false, err.Error()
		}
		firing := 0
		var states []string
		for _, a := range as {
			name := a.Labels["alertname"]
			states = append(states, name+"{"+a.Labels["budget"]+"}="+a.State)
			w, ok := want[name]
			if !ok || a.State != "firing" {
				continue
			}
			if a.Labels["budget"] != w.budget || a.Labels["severity"] != w.severity || a.Labels["window"] != "1d" {
				t.Errorf("%s fires with labels %v, want budget %s, severity %s, window 1d", name, a.Labels, w.budget, w.severity)
			}
			if !strings.HasSuffix(a.Annotations["runbook_url"], w.anchor) || !strings.Contains(a.Annotations["description"], "over its amount of "+w.amount) {
				t.Errorf("%s annotations %v: want runbook %s and the amount %s", name, a.Annotations, w.anchor, w.amount)
			}
			firing++
		}
		return firing == len(want), fmt.Sprint(states)
	})
	t.Logf("both budget alerts firing %v after the target started", time.Since(start).Round(time.Second))

	// The workflow budget counts its workflow only: e2e-other's $100/s is
	// not in it (its spend is about the seconds since the start).
	if v, err := prom.scalar(`budget:cbc_budget_spend:usd{budget="e2e-exceeded"}`); err != nil || v > 2*time.Since(start).Seconds() {
		t.Errorf("e2e-exceeded spends %v (%v), want about %v", v, err, time.Since(start).Seconds())
	}
	// The Budgets row's record panels, as the dashboard queries them.
	for _, q := range []string{dashboards.RecordCostBudgetSpend, dashboards.RecordCostBudgetForecast, dashboards.RecordCostBudgetAmount,
		dashboards.RecordCostBudgetRemaining, dashboards.RecordCostBudgetBurnRate} {
		s, err := prom.byLabel(q, "budget")
		if err != nil || len(s) != 2 || math.IsNaN(s["e2e-burn"]) || math.IsNaN(s["e2e-exceeded"]) {
			t.Errorf("%s: %v (%v), want a number per budget", q, s, err)
		}
	}
	prom.requireRulesHealthy(t)
}

// requireRulesHealthy fails the test for every loaded rule whose last
// evaluation failed.
func (p *prometheusServer) requireRulesHealthy(t *testing.T) {
	t.Helper()
	health, err := p.ruleHealth()
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range health {
		if !strings.HasPrefix(h, "ok") && !strings.HasPrefix(h, "unknown") {
			t.Errorf("rule %s: %s", name, h)
		}
	}
}
