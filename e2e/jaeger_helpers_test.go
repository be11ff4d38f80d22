package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/internal/realtool"
	"github.com/cbc-otel/cbc-otel/internal/testbin"
)

// jaegerConfig is TOOLING.md's loopback-only all-in-one configuration with
// every port chosen free, so that tests may run side by side.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces: {receivers: [otlp], processors: [batch], exporters: [jaeger_storage_exporter]}
  telemetry:
    metrics: {level: basic, readers: [{pull: {exporter: {prometheus: {host: 127.0.0.1, port: %d}}}}]}
extensions:
  jaeger_storage: {backends: {mem: {memory: {max_traces: 10000}}}}
  jaeger_query:
    storage: {traces: mem}
    enable_tracing: false
    http: {endpoint: 127.0.0.1:%d}
    grpc: {endpoint: 127.0.0.1:%d}
  healthcheckv2: {use_v2: true, http: {endpoint: 127.0.0.1:%d}}
receivers:
  otlp: {protocols: {grpc: {endpoint: 127.0.0.1:%d}, http: {endpoint: 127.0.0.1:%d}}}
processors:
  batch: {timeout: 200ms}
exporters:
  jaeger_storage_exporter: {trace_storage: mem}
`

// jaeger is a running Jaeger v2 all-in-one.
type jaeger struct {
	otlpGRPC, otlpHTTP, query string // host:port
}

// jaegerHint says how to get Jaeger v2 for the tests that need it.
const jaegerHint = "set JAEGER_BIN to a Jaeger v2 built by tools/jaeger/build.sh"

// startJaeger runs Jaeger on free loopback ports until the test ends and
// waits for its health check.
func startJaeger(t *testing.T, bin string) *jaeger {
	t.Helper()
	p := realtool.FreePorts(t, 6)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, p[0], p[1], p[2], p[3], p[4], p[5]), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "jaeger.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config="+cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 2<<10 {
				b = b[len(b)-2<<10:]
			}
			t.Logf("jaeger log (tail):\n%s", b)
		}
	})
	j := &jaeger{
		otlpGRPC: "127.0.0.1:" + strconv.Itoa(p[4]),
		otlpHTTP: "127.0.0.1:" + strconv.Itoa(p[5]),
		query:    "127.0.0.1:" + strconv.Itoa(p[1]),
	}
	health := fmt.Sprintf("http://127.0.0.1:%d/status", p[3])
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for {
		if resp, err := http.Get(health); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return j
			}
		}
		select {
		case <-tick.C:
		case <-exited:
			t.Fatal("jaeger exited during startup")
		case <-deadline:
			t.Fatal("jaeger not healthy after 60s")
		}
	}
}

// jaegerSpan is the part of Jaeger's /api/traces span we check.
type jaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"` // µs
	Duration  int64 `json:"duration"`  // µs
	Tags      []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
}

func (s jaegerSpan) tag(k string) (any, bool) {
	for _, t := range s.Tags {
		if t.Key == k {
			return t.Value, true
		}
	}
	return nil, false
}

func (s jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

type jaegerTrace struct {
	TraceID   string       `json:"traceID"`
	Spans     []jaegerSpan `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// waitTrace polls GET /api/traces/<id> until it holds want spans (Jaeger's
// batch processor stores them within a few hundred ms).
func (j *jaeger) waitTrace(t *testing.T, traceID string, want int) jaegerTrace {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	url := fmt.Sprintf("http://%s/api/traces/%s", j.query, traceID)
	var last jaegerTrace
	var lastErr error
	for {
		last, lastErr = jaegerGetTrace(ctx, url)
		if lastErr == nil && len(last.Spans) >= want {
			return last
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("trace %s: have %d spans, want %d (last error %v)", traceID, len(last.Spans), want, lastErr)
		}
	}
}

func jaegerGetTrace(ctx context.Context, url string) (jaegerTrace, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return jaegerTrace{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return jaegerTrace{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return jaegerTrace{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var body struct {
		Data []jaegerTrace `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return jaegerTrace{}, fmt.Errorf("decoding %s: %w", url, err)
	}
	if len(body.Data) == 0 {
		return jaegerTrace{}, fmt.Errorf("GET %s: no trace", url)
	}
	return body.Data[0], nil
}

// jaegerBuildCLI builds the cbc-otel binary once per test binary run.
func jaegerBuildCLI(t *testing.T) string {
	t.Helper()
	bin, err := testbin.Build(t.Context(), filepath.Join(t.TempDir(), "cbc-otel"))
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
