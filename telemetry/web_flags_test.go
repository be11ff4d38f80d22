package telemetry

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"

	"github.com/cbc-otel/cbc-otel/internal/oteltest"
)

func TestWebFlagsDefaults(t *testing.T) {
	m, err := parseMetricsFlags(t, true)
	if err != nil {
		t.Fatal(err)
	}
	if w := m.web; w.telemetryPath != "/metrics" || w.maxRequests != 40 || w.noExporterMetrics || w.systemdSocket || w.pprof {
		t.Errorf("defaults %+v", w)
	}
	m, err = parseMetricsFlags(t, true, "--web.max-requests=0", "--web.telemetry-path=/m")
	if err != nil || m.validate() != nil || m.web.maxRequests != 0 {
		t.Errorf("--web.max-requests=0 (no limit): %v, %v, %+v", err, m.validate(), m.web)
	}
}

// startWeb parses args as run's metrics flags, validates them and starts
// the runtime, which must be listening.
func startWeb(t *testing.T, args ...string) *metricsRuntime {
	t.Helper()
	m, err := parseMetricsFlags(t, true, args...)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.validate(); err != nil {
		t.Fatal(err)
	}
	rt, err := startMetrics(m, new(ingest.Stats), nil, slog.New(slog.DiscardHandler))
	if err != nil || rt.listenAddr() == nil {
		t.Fatalf("start: %v, addr %v", err, rt.listenAddr())
	}
	return rt
}

// stopWeb shuts rt down within 10 s.
func stopWeb(t *testing.T, rt *metricsRuntime) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// TestWebTelemetryPathAndExporterMetrics: the metrics are at
// --web.telemetry-path (/metrics is then 404) and, with
// --web.disable-exporter-metrics, without go_* and process_*.
func TestWebTelemetryPathAndExporterMetrics(t *testing.T) {
	for _, disable := range []bool{false, true} {
		args := []string{"--web.listen-address", "127.0.0.1:0", "--web.telemetry-path", "/cbc/metrics"}
		if disable {
			args = append(args, "--web.disable-exporter-metrics")
		}
		rt := startWeb(t, args...)
		observeRun(rt.sink(), "wf")
		base := "http://" + rt.listenAddr().String()
		body := oteltest.HTTPGet(t, base+"/cbc/metrics")
		if !strings.Contains(body, `cbc_workflow_runs_total{status="completed",workflow="wf"} 1`) {
			t.Errorf("%s lacks the runs:\n%s", "/cbc/metrics", body)
		}
		for _, fam := range []string{"go_goroutines", "process_"} {
			if strings.Contains(body, fam) == disable && (fam == "go_goroutines" || runtime.GOOS == "linux") {
				t.Errorf("disable=%v: %s present: %v", disable, fam, !disable)
			}
		}
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("old path /metrics: %s, want 404", resp.Status)
		}
		oteltest.HTTPGet(t, base+"/healthz")
		stopWeb(t, rt)
	}
}

// TestWebEnablePprof: /debug/pprof/ on the listen address is 404 by
// default and the profiles' index with --web.enable-pprof (its auth and
// TLS are exposition's TestServePprof).
func TestWebEnablePprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		args := []string{"--web.listen-address", "127.0.0.1:0"}
		if on {
			args = append(args, "--web.enable-pprof")
		}
		rt := startWeb(t, args...)
		resp, err := http.Get("http://" + rt.listenAddr().String() + "/debug/pprof/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[on]; resp.StatusCode != want {
			t.Errorf("--web.enable-pprof=%v: /debug/pprof/ %s, want %d", on, resp.Status, want)
		}
		stopWeb(t, rt)
	}
}
