package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/internal/realtool"
)

// TestDemoLivePanels is the first hour's next step, with a real Prometheus:
// `demo --live` keeps workflows coming, Prometheus scrapes it every second,
// and the overview dashboard's rate() and histogram_quantile() panels of
// runs, durations, tokens and agents give numbers, not empty results or
// NaN. SIGINT then ends the demo with exit 0.
func TestDemoLivePanels(t *testing.T) {
	promBin := requirePrometheus(t)
	bin := promBuildCLI(t)
	addr, demo, exited := startLiveDemo(t, bin)
	prom := startPrometheus(t, promBin, addr)

	queries := overviewPanelQueries(t)
	if len(queries) < 5 {
		t.Fatalf("found %d panel queries in the overview dashboard, want the rate and quantile panels", len(queries))
	}
	t.Logf("%d panel queries", len(queries))
	for _, q := range queries {
		promPollNumber(t, prom, q)
	}
	stopLiveDemo(t, demo, exited)
}

// promPollNumber waits until q gives at least one sample that is a number
// (not NaN, not infinite).
func promPollNumber(t *testing.T, prom *prometheusServer, q string) {
	t.Helper()
	promPoll(t, 90*time.Second, "a number from "+q, func() (bool, string) {
		s, err := prom.query(q)
		if err != nil {
			return false, err.Error()
		}
		for _, v := range s {
			if !math.IsNaN(v.Value) && !math.IsInf(v.Value, 0) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d samples, none a number: %v", len(s), s)
	})
}

// stopLiveDemo sends demo SIGINT and requires it to exit 0 within 30 s.
func stopLiveDemo(t *testing.T, demo *exec.Cmd, exited <-chan struct{}) {
	t.Helper()
	demo.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("demo --live did not stop after SIGINT")
	}
	if code := demo.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("demo --live exited %d after SIGINT, want 0", code)
	}
}

// overviewPanelQueries returns the overview dashboard's rate() and
// histogram_quantile() queries of the metrics a demo always moves, with
// the dashboard's variables set to match everything and its rate interval
// to a few scrapes.
func overviewPanelQueries(t *testing.T) []string {
	t.Helper()
	exprs := overviewExprs(t)
	moved := regexp.MustCompile(`cbc_workflow_(runs_total|runs_started_total|duration_seconds|tokens_total|agent_duration_seconds)\b`)
	vars := strings.NewReplacer("$__rate_interval", "10s", "$job", ".*", "$namespace", ".*", "$pod", ".*", "$workflow", ".*")
	var out []string
	for _, e := range exprs {
		if moved.MatchString(e) && (strings.Contains(e, "rate(") || strings.Contains(e, "histogram_quantile(")) {
			q := vars.Replace(e)
			if !strings.Contains(q, "$") {
				out = append(out, q)
			}
		}
	}
	return out
}

// overviewExprs returns every query expression of the overview dashboard.
func overviewExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../dashboards/overview.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["expr"].(string); ok {
				exprs = append(exprs, e)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(dash)
	return exprs
}

// startLiveDemo starts `demo --live` (fast: --simulate.speed 0.05, --pace 100ms) on
// a free loopback port, with extra flags, killed at the test's end and its stderr logged if
// the test failed. It returns the listen address, the command and a
// channel closed when it exits.
func startLiveDemo(t *testing.T, bin string, extra ...string) (string, *exec.Cmd, <-chan struct{}) {
	t.Helper()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(realtool.FreePorts(t, 1)[0]))
	logs := &promLockedBuffer{}
	demo := exec.Command(bin, append([]string{"demo", "--live", "--simulate.speed", "0.05", "--pace", "100ms", "--tracker.grace", "200ms", "--web.listen-address", addr}, extra...)...)
	demo.Stderr = logs
	if err := demo.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { demo.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			demo.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("demo stderr:\n%s", logs.String())
		}
	})
	return addr, demo, exited
}
