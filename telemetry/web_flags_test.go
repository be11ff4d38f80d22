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
)

func TestWebFlagsDefaults(t *testing.T) {
	m, err := parseMetricsFlags(t, true)
	if err != nil {
		t.Fatal(err)
	}
	if w := m.web; w.telemetryPath != "/metrics" || w.maxRequests != 40 || w.noExporterMetrics || w.systemdSocket {
		t.Errorf("defaults %+v", w)
	}
	m, err = parseMetricsFlags(t, true, "--web.max-requests=0", "--web.telemetry-path=/m")
	if err != nil || m.validate() != nil || m.web.maxRequests != 0 {
		t.Errorf("--web.max-requests=0 (no limit): %v, %v, %+v", err, m.validate(), m.web)
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
		observeRun(rt.sink(), "wf")
		base := "http://" + rt.listenAddr().String()
		body := httpGet(t, base+"/cbc/metrics")
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
		httpGet(t, base+"/healthz")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := rt.shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		cancel()
	}
}
