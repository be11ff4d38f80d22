package main

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/internal/oteltest"
)

// demo prints only URLs it goes on serving: with --hold every URL it
// printed answers after the summary; --cli-telemetry.join says why
// cbc_cost_usd_total stays 0 beside the joined costs.
func TestDemoSaysWhatItServes(t *testing.T) {
	t.Run("hold", func(t *testing.T) {
		addr := freeAddr(t)
		s := startBin(t, addr, "demo", "--simulate.speed", "0", "--hold", "--web.listen-address", addr)
		poll(t, 30*time.Second, "the summary, then serving", func() (bool, string) {
			return strings.Contains(s.stderr.String(), "until interrupted"), s.stderr.String()
		})
		urls := regexp.MustCompile(`http://\S+`).FindAllString(s.stderr.String(), -1)
		if len(urls) < 2 {
			t.Fatalf("demo --hold printed %q, want /metrics and the runs page", urls)
		}
		for _, u := range urls {
			resp, err := http.Get(u)
			if err != nil {
				t.Fatalf("%s printed, then: %v", u, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s printed, then: %s", u, resp.Status)
			}
		}
	})
	t.Run("cli-telemetry.join", func(t *testing.T) {
		out, err := exec.Command(wrapperBin, "demo", "--simulate.speed", "0", "--cli-telemetry.join", "--web.listen-address=127.0.0.1:0").CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"cbc_cost_usd_total, which counts the CLI's result lines, stays 0", "$0."} {
			if !strings.Contains(string(out), want) {
				t.Errorf("demo --cli-telemetry.join lacks %q:\n%s", want, out)
			}
		}
	})
}

// The demo shows a budget burning and stops nothing by it: its summary
// says the spend against --budget.show-usd, past it; in --live the runs
// page's line grows from one render to the next, every series keeps
// demo="true" (the rules leave those out: dashboards' TestRulesLeaveOutTheDemo
// and rules/tests budgets.yml, runcost.yml), no stop is counted, and no run
// stopped for the budget.
func TestDemoBudgetBurns(t *testing.T) {
	t.Run("summary", func(t *testing.T) {
		out, err := exec.Command(wrapperBin, "demo", "--simulate.speed", "0", "--cli-telemetry.join", "--budget.show-usd", "0.01").CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !regexp.MustCompile(`\nbudget \(the demo's, for show: nothing is stopped\): \$0\.\d{4} of \$0\.0100 \(\d+%: over\)\n`).Match(out) {
			t.Errorf("no budget line past the budget:\n%s", out)
		}
		if strings.Contains(string(out), "stop reason: budget") || strings.Contains(string(out), "interrupting it") {
			t.Errorf("the demo's budget stopped something:\n%s", out)
		}
	})
	t.Run("live page", func(t *testing.T) {
		addr := freeAddr(t)
		s := startBin(t, addr, "demo", "--live", "--simulate.speed", "0.02", "--pace", "10ms", "--cli-telemetry.join", "--web.listen-address", addr)
		line := regexp.MustCompile(`id="budget">budget \(the demo&#39;s, for show: nothing is stopped\): \$(\d+\.\d{4}) of \$0\.2500`)
		spent := func() float64 {
			resp, err := http.Get("http://" + addr + "/")
			if err != nil {
				return -1 // not up yet
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			m := line.FindStringSubmatch(string(b))
			if m == nil {
				return -1
			}
			v, _ := strconv.ParseFloat(m[1], 64)
			return v
		}
		var first float64
		poll(t, 30*time.Second, "a spend on the page", func() (bool, string) { first = spent(); return first > 0, fmt.Sprint(first) })
		poll(t, 30*time.Second, "the spend growing past the budget", func() (bool, string) {
			v := spent()
			return v > first && v > 0.25, fmt.Sprint(v)
		})
		for l := range strings.Lines(oteltest.HTTPGet(t, "http://"+addr+"/metrics")) {
			if strings.HasPrefix(l, "cbc_budget_stops_total") || !strings.HasPrefix(l, "#") && !strings.Contains(l, `demo="true"`) {
				t.Errorf("the demo's series: %s", l)
			}
		}
		if code := s.stop(t); code != 0 {
			t.Fatalf("exit %d after SIGTERM, want 0", code)
		}
	})
}
