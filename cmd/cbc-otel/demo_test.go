package main

import (
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
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
