package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/dashboards"
	"github.com/cbc-otel/cbc-otel/internal/realtool"
)

// TestSLOPageAlertFiresEndToEnd loads the SLO rules, rendered by the same
// code as the committed ones but with every window scaled by 1/60 (page:
// 5m/1h → 5s/1m, 30m/6h → 30s/6m), into a real Prometheus that scrapes
// `cbc-otel run` wrapping the simulator. It drives failed workflows one
// turn after another through the wrapper's stdin and waits until the page
// alert is firing in /api/v1/alerts: the exporter's metric names, the
// rules' PromQL and the burn-rate logic work together on live data.
func TestSLOPageAlertFiresEndToEnd(t *testing.T) {
	promBin := requirePrometheus(t)
	rules, err := dashboards.RenderRules(dashboards.RuleOptions{WindowScale: 1.0 / 60})
	if err != nil {
		t.Fatal(err)
	}
	bin := promBuildCLI(t)
	target := fmt.Sprintf("127.0.0.1:%d", realtool.FreePorts(t, 1)[0])

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := startScrapedWrapper(t, ctx, bin, target, "--dialect", "cbc", "--speed", "0.05", "--noise", "0")
	stdin, out := w.stdin, w.out
	prom := startPrometheusWithRules(t, promBin, target, rules)
	w.waitScraped(t, prom)

	// Drive failed workflows, one turn at a time, on a goroutine: the
	// simulator answers each user message with one run and a result line.
	send := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = stdin.Write(append(b, '\n'))
		return err
	}
	type obj = map[string]any
	if err := send(obj{"type": "control_request", "request_id": "init", "request": obj{"subtype": "initialize"}}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	driverDone := make(chan error, 1)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				driverDone <- nil
				return
			default:
			}
			n++
			if err := send(obj{"type": "user", "message": obj{"role": "user",
				"content": fmt.Sprintf("[[SCENARIO:failed]] alert e2e turn %d", n)}}); err != nil {
				driverDone <- fmt.Errorf("turn %d: writing stdin: %w", n, err)
				return
			}
			for {
				var m struct {
					Type string `json:"type"`
				}
				select {
				case line, ok := <-out.lines:
					if !ok {
						driverDone <- fmt.Errorf("turn %d: wrapper stdout ended", n)
						return
					}
					if json.Unmarshal(line, &m) != nil || m.Type != "result" {
						continue
					}
				case <-time.After(30 * time.Second):
					driverDone <- fmt.Errorf("turn %d: no result line within 30s", n)
					return
				}
				break
			}
		}
	}()
	defer func() {
		close(stop)
		out.drain()
	}()

	page := dashboards.AlertSLOPage
	start := time.Now()
	promPoll(t, 100*time.Second, page+" firing in /api/v1/alerts", func() (bool, string) {
		select {
		case err := <-driverDone:
			if err != nil {
				t.Fatalf("driving the simulator: %v", err)
			}
		default:
		}
		as, err := prom.alerts()
		if err != nil {
			return false, err.Error()
		}
		var states []string
		for _, a := range as {
			states = append(states, a.Labels["alertname"]+"="+a.State)
			if a.Labels["alertname"] == page && a.State == "firing" {
				if a.Labels["severity"] != dashboards.SeverityCritical || a.Labels["sloth_slo"] != dashboards.SLOName {
					t.Errorf("firing %s has labels %v", page, a.Labels)
				}
				if !strings.Contains(a.Annotations["runbook_url"], "#slo-burn-rate-page") {
					t.Errorf("firing %s has runbook_url %q", page, a.Annotations["runbook_url"])
				}
				return true, ""
			}
		}
		r5, _ := prom.query(`slo:sli_error:ratio_rate5m`)
		r1, _ := prom.query(`slo:sli_error:ratio_rate1h`)
		return false, fmt.Sprintf("alerts %v; ratio5m %v; ratio1h %v", states, r5, r1)
	})
	t.Logf("%s firing %v after Prometheus saw the wrapper", page, time.Since(start).Round(time.Second))

	// The recorded SLI says every terminal run failed; every rule evaluated
	// without error on the live data.
	if v, err := prom.scalar(`slo:sli_error:ratio_rate1h`); err != nil || v < 0.99 {
		t.Errorf("slo:sli_error:ratio_rate1h = %v (%v), want 1", v, err)
	}
	prom.requireRulesHealthy(t)
}
