package main

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cbc-otel/cbc-otel/internal/oteltest"
)

// demo --live keeps workflows coming with /metrics up: two scrapes see the
// runs counter grow, and SIGINT ends it cleanly (exit 0) with every outcome
// of the scenarios counted.
func TestDemoLiveCountersGrow(t *testing.T) {
	addr := freeAddr(t)
	s := startBin(t, addr, "demo", "--live", "--simulate.speed", "0.02", "--pace", "10ms", "--web.listen-address", addr)
	sum := func(m map[string]float64) (n float64) {
		for _, v := range m {
			n += v
		}
		return n
	}
	// runs waits until the runs counter, by status, satisfies ok.
	runs := func(ok func(map[string]float64) bool) map[string]float64 {
		t.Helper()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(30 * time.Second)
		for {
			m, err := s.metric("cbc_workflow_runs_total", "status")
			if err == nil && ok(m) {
				return m
			}
			select {
			case <-tick.C:
			case <-deadline:
				t.Fatalf("cbc_workflow_runs_total stayed at %v (last error %v)", m, err)
			case <-s.exited:
				t.Fatalf("demo --live exited by itself (%v)", s.cmd.ProcessState)
			}
		}
	}
	first := runs(func(m map[string]float64) bool { return sum(m) > 0 })
	// Then more, and every outcome the scenarios make: completed (also
	// cached, mixed), failed, stopped (interrupted by the driver).
	runs(func(m map[string]float64) bool {
		return sum(m) > sum(first) && m["completed"] > 0 && m["failed"] > 0 && m["stopped"] > 0
	})
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("demo --live did not stop after SIGINT")
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit %d after SIGINT, want 0", code)
	}
}

// demo --live dates everything it emits at the wall clock: it paces the
// simulator's script by --simulate.speed instead of stretching its clock. Run for
// several workflows of every scenario (mixed has Bash and agent side
// tasks), no span starts before the demo did or ends after the receiver
// got it, no run on the page starts after the page's own clock, and the
// runs' durations (one workflow at a time) add up to no more than the wall
// time that passed; every series on /metrics has demo="true". At --simulate.speed 0.1 a clock scaled by 1/speed would run ten
// times ahead and fail every one of these.
func TestDemoLiveOnTheWallClock(t *testing.T) {
	oteltest.ClearEnv(t)
	const slack = 50 * time.Millisecond
	rcv, otlp := oteltest.StartReceiver(t)
	addr := freeAddr(t)
	began := time.Now()
	s := startBin(t, addr, "demo", "--live", "--simulate.dialect", "claude", "--simulate.speed", "0.1", "--pace", "20ms", "--tracker.grace", "100ms",
		"--web.listen-address", addr, "--otlp.endpoint", otlp)
	page := regexp.MustCompile(`page at (\S+ \S+Z)`)
	started := regexp.MustCompile(`started (\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ)`)
	parse := func(s string) time.Time {
		v, err := time.Parse("2006-01-02 15:04:05Z", s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	checks, sums := 0, 0
	poll(t, 60*time.Second, "every scenario's outcome, twice", func() (bool, string) {
		runs, err := s.metric("cbc_workflow_runs_total", "status")
		if err != nil {
			return false, err.Error()
		}
		// Durations: the sum of the finished runs' is at most the wall time
		// since the demo began (they run one after another).
		elapsed := time.Since(began).Seconds()
		if sum := durationSum(t, addr); sum > elapsed+slack.Seconds() {
			t.Fatalf("the runs took %.3f s in all, in %.3f s of wall time", sum, elapsed)
		} else if sum > 0 {
			sums++
		}
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if m := page.FindSubmatch(b); m != nil {
			now := parse(string(m[1]))
			for _, st := range started.FindAllSubmatch(b, -1) {
				at := parse(string(st[1]))
				checks++
				if at.After(now) || at.Before(began.Truncate(time.Second)) {
					t.Fatalf("a run on the page started at %v; the demo began at %v, the page is at %v", at, began, now)
				}
			}
		}
		return runs["completed"] >= 4 && runs["failed"] >= 2 && runs["stopped"] >= 2, fmt.Sprint(runs)
	})
	if checks == 0 || sums == 0 {
		t.Errorf("%d run starts on the runs page and %d duration sums checked, want some of each", checks, sums)
	}
	// Every series is marked as the demo's, which the shipped alert rules
	// leave out (dashboards/rules/tests/demo.yml).
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, "#") && !strings.Contains(line, `demo="true"`) {
			t.Errorf("a series of the demo without demo=\"true\": %s", line)
		}
	}
	if code := s.stop(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	reqs, _, arrived := rcv.Received()
	spans, bash := 0, 0
	var lead time.Duration // the most any span ended after its request arrived
	for i, req := range reqs {
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					spans++
					start, end := time.Unix(0, int64(sp.StartTimeUnixNano)), time.Unix(0, int64(sp.EndTimeUnixNano))
					if strings.Contains(strings.ToLower(sp.Name), "bash") {
						bash++
					}
					lead = max(lead, end.Sub(arrived[i]))
					switch {
					case start.Before(began.Add(-slack)):
						t.Errorf("span %q starts %v before the demo began", sp.Name, began.Sub(start))
					case end.After(arrived[i].Add(slack)):
						t.Errorf("span %q ends %v after its export arrived", sp.Name, end.Sub(arrived[i]))
					case end.Before(start):
						t.Errorf("span %q ends before it starts", sp.Name)
					}
				}
			}
		}
	}
	t.Logf("%d spans (%d of Bash tasks) in %d exports over %v, none later than its export by more than %v; %d page starts checked",
		spans, bash, len(reqs), time.Since(began).Round(time.Millisecond), lead, checks)
	if spans == 0 || bash == 0 {
		t.Errorf("%d spans, %d of Bash tasks: want both", spans, bash)
	}
}

// durationSum is the sum of cbc_workflow_duration_seconds on addr's
// /metrics (0 when it cannot be read).
func durationSum(t *testing.T, addr string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, m := range fams["cbc_workflow_duration_seconds"].GetMetric() {
		sum += m.GetHistogram().GetSampleSum()
	}
	return sum
}

// TestDemoJoinSeriesMarked: the collectors registered beside the metrics
// sink's own (the CLI-telemetry join's, the spool's) carry the demo label
// too, so that no series of a demo reaches an alert rule.
func TestDemoJoinSeriesMarked(t *testing.T) {
	oteltest.ClearEnv(t)
	addr := freeAddr(t)
	s := startBin(t, addr, "demo", "--hold", "--simulate.speed", "0", "--cli-telemetry.join", "--web.listen-address", addr)
	// Stopped while it drives the simulator, the demo exits 1: wait for
	// --hold's word that every scenario ran.
	poll(t, 60*time.Second, "the demo holding", func() (bool, string) {
		return strings.Contains(s.stderr.String(), "until interrupted"), s.stderr.String()
	})
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	if !strings.Contains(body, "\ncbc_otel_cli_spans_total{") {
		t.Fatalf("no cbc_otel_cli_spans_total series:\n%s", body)
	}
	for line := range strings.Lines(body) {
		if !strings.HasPrefix(line, "#") && !strings.Contains(line, `demo="true"`) {
			t.Errorf("a series of the demo without demo=\"true\": %s", line)
		}
	}
	if code := s.stop(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
}
