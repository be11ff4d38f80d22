package e2e

import (
	"bytes"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/internal/realtool"
)

// requirePushgateway returns Debian's Pushgateway (1.5), or the binary
// $PUSHGATEWAY_BIN names (an upstream build is called pushgateway).
func requirePushgateway(t *testing.T) string {
	t.Helper()
	return realtool.Find(t, "prometheus-pushgateway", "PUSHGATEWAY_BIN", "apt-get install -y --no-install-recommends prometheus-pushgateway")
}

// TestPushgatewayBatchJobs: batch jobs (`cbc-otel run --push.gateway URL
// --push.job J -- simulate`, exiting when their stdin ends) push to a real
// Pushgateway that a real Prometheus scrapes with honor_labels, as "Batch
// jobs" of docs/metrics.md says to. Prometheus sees each job's counts
// exactly, under job=J and instance=<host name>, without go_*/process_*
// series. A second run of the same job replaces the first's group:
// Prometheus shows the second run's counts, not the sum of both (no run
// counted twice, and none added up: the docs say so), and increase() does
// not see the first push (the docs warn of it). Another job name is a
// group of its own beside it.
func TestPushgatewayBatchJobs(t *testing.T) {
	promBin := requirePrometheus(t)
	pgBin := requirePushgateway(t)
	bin := promBuildCLI(t)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}

	pgAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(realtool.FreePorts(t, 1)[0]))
	gateway := "http://" + pgAddr
	// No --persistence.file: the groups live in this process only.
	startDaemon(t, "pushgateway", pgBin, []string{"--web.listen-address=" + pgAddr, "--log.level=warn"}, gateway+"/-/ready")
	dir := t.TempDir()
	prom := startPrometheusConfig(t, promBin, dir, fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: pushgateway
    honor_labels: true
    static_configs:
      - targets: [%q]
`, pgAddr))

	// batch runs one job: a workflow of each scenario, then stdin ends.
	batch := func(job string, scenarios ...string) {
		t.Helper()
		in := `{"type":"control_request","request_id":"init","request":{"subtype":"initialize"}}` + "\n"
		for i, s := range scenarios {
			in += fmt.Sprintf(`{"type":"user","message":{"role":"user","content":"[[SCENARIO:%s]] batch turn %d"}}`+"\n", s, i)
		}
		cmd := exec.Command(bin, "run", "--push.gateway", gateway, "--push.job", job, "--", bin, "simulate", "--speed", "0", "--noise", "0")
		cmd.Stdin = strings.NewReader(in)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("batch job %s: %v; stderr:\n%s", job, err, stderr.String())
		}
		if stderr.Len() > 0 {
			t.Errorf("batch job %s wrote to stderr (a push error?):\n%s", job, stderr.String())
		}
	}
	// expect waits until Prometheus has scraped exactly want (non-zero
	// terminal runs by job and status) and nothing else.
	expect := func(what string, want map[string]float64) {
		t.Helper()
		promPoll(t, 20*time.Second, what, func() (bool, string) {
			s, err := prom.query(`sum by (job, instance, status) (cbc_workflow_runs_total) > 0`)
			if err != nil {
				return false, err.Error()
			}
			got := map[string]float64{}
			for _, e := range s {
				if e.Metric["instance"] != host {
					return false, fmt.Sprintf("instance %q, want the host name %q: %v", e.Metric["instance"], host, e.Metric)
				}
				got[e.Metric["job"]+"/"+e.Metric["status"]] = e.Value
			}
			return maps.Equal(got, want), fmt.Sprintf("got %v, want %v", got, want)
		})
	}

	batch("ci-nightly", "failed", "failed", "completed")
	expect("the first run of ci-nightly", map[string]float64{"ci-nightly/failed": 2, "ci-nightly/completed": 1})
	// honor_labels keeps the pushed job: nothing is left under the scrape
	// job's name or moved to exported_job; the pusher's own runtime metrics
	// never reach the gateway.
	for _, q := range []string{
		`cbc_workflow_runs_total{exported_job!=""}`,
		`cbc_workflow_runs_total{job="pushgateway"}`,
		`{job="ci-nightly", __name__=~"(go|process)_.*"}`,
	} {
		if s, err := prom.query(q); err != nil || len(s) != 0 {
			t.Errorf("%s: %v (%v), want no series", q, s, err)
		}
	}
	// As docs/metrics.md warns, increase() does not see a group's first push:
	// the series starts at the run's totals.
	promPoll(t, 10*time.Second, "increase() over the first push", func() (bool, string) {
		s, err := prom.query(`sum(increase(cbc_workflow_runs_total{job="ci-nightly"}[1m]))`)
		if err != nil || len(s) != 1 {
			return false, fmt.Sprint(s, err)
		}
		if s[0].Value != 0 {
			t.Errorf("increase() over the first push = %v, docs/metrics.md says 0", s[0].Value)
		}
		return true, ""
	})
	first, err := prom.scalar(`push_time_seconds{job="ci-nightly"}`)
	if err != nil {
		t.Fatal(err)
	}

	// The second run of the same job on the same host: its push replaces
	// the group, so Prometheus sees 1 failed and 2 completed (the second
	// run's own counts), not 3 and 3.
	batch("ci-nightly", "completed", "failed", "completed")
	expect("the second run of ci-nightly replacing the first", map[string]float64{"ci-nightly/failed": 1, "ci-nightly/completed": 2})
	if s, err := prom.query(`push_time_seconds{job="ci-nightly"}`); err != nil || len(s) != 1 || !(s[0].Value > first) {
		t.Errorf("push_time_seconds{job=\"ci-nightly\"} = %v (%v): want one group, pushed after %v", s, err, first)
	}

	// Another job name is a group of its own; ci-nightly's stays as it was.
	batch("ci-weekly", "failed")
	expect("ci-weekly beside ci-nightly", map[string]float64{"ci-nightly/failed": 1, "ci-nightly/completed": 2, "ci-weekly/failed": 1})
	if s, err := prom.query(`count(push_time_seconds)`); err != nil || len(s) != 1 || s[0].Value != 2 {
		t.Errorf("count(push_time_seconds) = %v (%v), want 2 groups", s, err)
	}
}
