package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/dashboards"
)

// TestDemoLivePagesNobody scrapes `demo --live` with a real Prometheus
// that loads the shipped rules with every window scaled by 1/60 (the
// page's 5m/1h → 5s/1m). The demo fails and stops workflows on purpose:
// its series alone burn the budget well past the page threshold (the
// test computes that ratio itself), yet for the page's whole long window
// and beyond no alert of severity critical is pending or firing, because
// every series of the demo carries demo="true" and the rules leave it
// out. Before the demo was marked, the page fired within ~45 s.
func TestDemoLivePagesNobody(t *testing.T) {
	promBin := requirePrometheus(t)
	rules, err := dashboards.RenderRules(dashboards.RuleOptions{WindowScale: 1.0 / 60})
	if err != nil {
		t.Fatal(err)
	}
	bin := promBuildCLI(t)
	addr, demo, exited := startLiveDemo(t, bin)
	prom := startPrometheusWithRules(t, promBin, addr, rules)
	promPoll(t, 60*time.Second, "the demo's failed runs in Prometheus", func() (bool, string) {
		v, err := prom.scalar(`sum(cbc_workflow_runs_total{status="failed"})`)
		return err == nil && v > 0, fmt.Sprint(v, err)
	})
	// 75 s: the scaled page's long window (1m) full of the demo's runs,
	// and the rules evaluated every second all along.
	until := time.Now().Add(75 * time.Second)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	polls := 0
	for time.Now().Before(until) {
		select {
		case <-exited:
			t.Fatalf("demo --live exited by itself (%v)", demo.ProcessState)
		case <-tick.C:
		}
		as, err := prom.alerts()
		if err != nil {
			t.Fatal(err)
		}
		polls++
		for _, a := range as {
			if a.Labels["severity"] == dashboards.SeverityCritical {
				t.Fatalf("%s is %s on the demo's series: %v", a.Labels["alertname"], a.State, a.Labels)
			}
		}
	}
	// The demo alone burns the budget: its error ratio over the page's
	// scaled long window is above 14.4 × 1%.
	burn, err := prom.scalar(`sum(rate(cbc_workflow_runs_total{status=~"failed|abandoned"}[1m])) / sum(rate(cbc_workflow_runs_total{status=~"completed|failed|abandoned"}[1m]))`)
	if err != nil || !(burn > 14.4*0.01) {
		t.Fatalf("the demo's error ratio over 1m is %v (%v); want above the page's 0.144, or the test shows nothing", burn, err)
	}
	if v, err := prom.query(`slo:sli_error:ratio_rate1h`); err != nil || len(v) != 0 {
		t.Errorf("slo:sli_error:ratio_rate1h = %v (%v), want no sample: the demo's runs are not the SLO's", v, err)
	}
	t.Logf("demo error ratio %.2f (page threshold 0.144); no critical alert in %d polls over 75 s", burn, polls)
}
