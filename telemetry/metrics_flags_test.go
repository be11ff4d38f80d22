package telemetry

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/streamjson"

	"github.com/cbc-otel/cbc-otel/internal/oteltest"
)

// startMetrics builds the metrics side and starts its outputs, as New
// and Start do (a server that cannot start is logged, not returned).
func startMetrics(m *metricsFlags, stats *ingest.Stats, exemplar func(*ingest.Run) (string, string), log *slog.Logger) (*metricsRuntime, error) {
	rt, err := m.start(context.Background(), stats, exemplar, log)
	if err != nil {
		return nil, err
	}
	return rt, rt.serve(context.Background(), nil, false)
}

func parseMetricsFlags(t *testing.T, serve bool, args ...string) (*metricsFlags, error) {
	t.Helper()
	var m metricsFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	m.register(fs, serve)
	return &m, fs.Parse(args)
}

func TestMetricsFlagsRegister(t *testing.T) {
	m, err := parseMetricsFlags(t, true)
	if err != nil {
		t.Fatal(err)
	}
	if m.listen != "127.0.0.1:9478" || m.pushJob != "cbc-otel" || m.maxWorkflows != 200 || m.file != "" || m.pushURL != "" || m.webConfig != "" {
		t.Errorf("defaults = %+v", *m)
	}
	if m.flushTimeout != defaultFlushTimeout {
		t.Errorf("--push.timeout default %v, want %v", m.flushTimeout, defaultFlushTimeout)
	}
	if err := m.validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	m, err = parseMetricsFlags(t, true, "--web.listen-address", "", "--push.gateway", "http://pgw:9091", "--push.job", "nightly",
		"--metrics.file", filepath.Join(t.TempDir(), "m.prom"), "--metrics.max-workflows", "7", "--push.timeout", "1500ms")
	if err != nil {
		t.Fatal(err)
	}
	if m.listen != "" || m.pushURL != "http://pgw:9091" || m.pushJob != "nightly" || m.maxWorkflows != 7 || m.flushTimeout != 1500*time.Millisecond {
		t.Errorf("parsed = %+v", *m)
	}
	if m.enabled() != true {
		t.Error("enabled() false with a push gateway")
	}
	// replay: only the file and the cap.
	m, err = parseMetricsFlags(t, false, "--metrics.file", "x.prom", "--metrics.max-workflows", "3")
	if err != nil {
		t.Fatal(err)
	}
	if m.listen != "" || m.file != "x.prom" || m.maxWorkflows != 3 {
		t.Errorf("replay flags = %+v", *m)
	}
	for _, f := range []string{"--web.listen-address=:1", "--web.config.file=x", "--push.gateway=http://x", "--push.job=j", "--push.timeout=1s"} {
		if _, err := parseMetricsFlags(t, false, f); err == nil {
			t.Errorf("replay accepted %s", f)
		}
	}
}

func TestMetricsFlagsValidate(t *testing.T) {
	dir := t.TempDir()
	webCfg := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(webCfg, []byte("basic_auth_users:\n  u: $2a$04$Nvxkfkha400Ryai4AUAgfO1WCtXRrpiRCdyust/1sdKEYtMRhCQIO\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badCfg := filepath.Join(dir, "bad.yml")
	if err := os.WriteFile(badCfg, []byte("nonsense: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	allowFile, badAllow, emptyAllow := filepath.Join(dir, "allow.txt"), filepath.Join(dir, "bad-allow.txt"), filepath.Join(dir, "empty-allow.txt")
	for p, body := range map[string]string{allowFile: "# ours\nreview\n\ndeploy-.*\n", badAllow: "review\n\n[z-a]\n", emptyAllow: "# none\n"} {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ok := metricsFlags{listen: ":9478", pushJob: "cbc-otel", maxWorkflows: 200, maxModels: 20, flushTimeout: defaultFlushTimeout}
	cases := []struct {
		name   string
		mod    func(*metricsFlags)
		errSub string // "" = valid
	}{
		{"defaults", func(*metricsFlags) {}, ""},
		{"disabled", func(m *metricsFlags) { m.listen = "" }, ""},
		{"loopback", func(m *metricsFlags) { m.listen = "127.0.0.1:0" }, ""},
		{"ipv6", func(m *metricsFlags) { m.listen = "[::1]:9478" }, ""},
		{"no port", func(m *metricsFlags) { m.listen = "localhost" }, "--web.listen-address"},
		{"bad port", func(m *metricsFlags) { m.listen = ":http-ish" }, "--web.listen-address"},
		{"port range", func(m *metricsFlags) { m.listen = ":70000" }, "--web.listen-address"},
		{"web config", func(m *metricsFlags) { m.webConfig = webCfg }, ""},
		{"web config missing", func(m *metricsFlags) { m.webConfig = filepath.Join(dir, "none.yml") }, "--web.config.file"},
		{"web config invalid", func(m *metricsFlags) { m.webConfig = badCfg }, "--web.config.file"},
		{"web config without listener", func(m *metricsFlags) { m.listen, m.webConfig = "", webCfg }, "needs --web.listen-address"},
		{"push", func(m *metricsFlags) { m.pushURL = "https://u:p@pgw.example:9091" }, ""},
		{"push no scheme", func(m *metricsFlags) { m.pushURL = "pgw:9091" }, "--push.gateway"},
		{"push empty job", func(m *metricsFlags) { m.pushURL, m.pushJob = "http://pgw:9091", "" }, "--push.job"},
		{"file", func(m *metricsFlags) { m.file = filepath.Join(dir, "m.prom") }, ""},
		{"file dir missing", func(m *metricsFlags) { m.file = filepath.Join(dir, "no", "m.prom") }, "--metrics.file"},
		{"cap zero", func(m *metricsFlags) { m.maxWorkflows = 0 }, "--metrics.max-workflows"},
		{"model cap zero", func(m *metricsFlags) { m.maxModels = 0 }, "--metrics.max-models"},
		{"allow regexp", func(m *metricsFlags) { m.workflowAllow = `review|deploy-.*` }, ""},
		{"allow bad regexp", func(m *metricsFlags) { m.workflowAllow = `review(` }, "--metrics.workflow-allow: error parsing regexp"},
		{"allow file", func(m *metricsFlags) { m.workflowAllow = allowFile }, ""},
		{"allow file bad line", func(m *metricsFlags) { m.workflowAllow = badAllow }, "--metrics.workflow-allow: " + badAllow + ":3:"},
		{"allow file no regexp", func(m *metricsFlags) { m.workflowAllow = emptyAllow }, "no regexp"},
		{"push timeout short", func(m *metricsFlags) { m.pushURL, m.flushTimeout = "http://pgw:9091", time.Millisecond }, ""},
		{"push timeout zero", func(m *metricsFlags) { m.flushTimeout = 0 }, "--push.timeout"},
		{"push timeout negative", func(m *metricsFlags) { m.flushTimeout = -time.Second }, "--push.timeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := ok
			c.mod(&m)
			err := m.validate()
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("validate: %q is more than one line", err)
			}
			if (m.allow != nil) != (m.workflowAllow != "" && err == nil) {
				t.Errorf("validate: compiled allow-list %v for %q", m.allow, m.workflowAllow)
			}
			switch {
			case c.errSub == "" && err != nil:
				t.Errorf("validate: %v", err)
			case c.errSub != "" && (err == nil || !strings.Contains(err.Error(), c.errSub)):
				t.Errorf("validate: %v, want an error about %s", err, c.errSub)
			}
		})
	}
}

func observeRun(sink ingest.Sink, name string) {
	r := &ingest.Run{Workflow: true, Name: name, Status: ingest.StatusCompleted, Start: 1000, End: 4000, Usage: streamjson.Usage{TotalTokens: 11}}
	sink.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
	sink.Observe(ingest.Lifecycle{Kind: ingest.RunFinished, Run: r})
	sink.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: r})
}

func TestMetricsRuntime(t *testing.T) {
	var mu sync.Mutex
	var pushedPath, pushedBody string
	pgw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		pushedPath, pushedBody = r.URL.Path, string(b)
		mu.Unlock()
	}))
	defer pgw.Close()
	file := filepath.Join(t.TempDir(), "final.prom")
	m, err := parseMetricsFlags(t, true, "--web.listen-address", "127.0.0.1:0", "--metrics.file", file, "--push.gateway", pgw.URL, "--push.job", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.validate(); err != nil {
		t.Fatal(err)
	}
	var logs oteltest.SyncBuffer
	stats := new(ingest.Stats)
	rt, err := startMetrics(m, stats, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if rt.listenAddr() == nil {
		t.Fatalf("no server: %s", logs.String())
	}
	observeRun(rt.sink(), "wf")
	base := "http://" + rt.listenAddr().String()
	body := oteltest.HTTPGet(t, base+"/metrics")
	for _, want := range []string{`cbc_workflow_runs_total{status="completed",workflow="wf"} 1`, `cbc_otel_build_info{goversion=`, "go_goroutines"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if oteltest.HTTPGet(t, base+"/readyz") == "" {
		t.Error("/readyz empty")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := rt.shutdown(ctx); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("metrics file: %v", err)
	}
	if !strings.Contains(string(b), `cbc_workflow_tokens_total{workflow="wf"} 11`) {
		t.Errorf("metrics file lacks the tokens:\n%s", b)
	}
	mu.Lock()
	if !strings.HasPrefix(pushedPath, "/metrics/job/e2e/instance/") || !strings.Contains(pushedBody, "cbc_workflow_runs_total") ||
		strings.Contains(pushedBody, "go_goroutines") {
		t.Errorf("push: path %q, body has runs: %v, has go_*: %v", pushedPath, strings.Contains(pushedBody, "cbc_workflow_runs_total"), strings.Contains(pushedBody, "go_goroutines"))
	}
	mu.Unlock()
	if c, err := net.DialTimeout("tcp", rt.listenAddr().String(), time.Second); err == nil {
		c.Close()
		t.Error("server still listening after shutdown")
	}
}

// TestMetricsRuntimeBindFailure: a busy port is logged and the process
// goes on; the file is still written.
func TestMetricsRuntimeBindFailure(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	file := filepath.Join(t.TempDir(), "m.prom")
	m, _ := parseMetricsFlags(t, true, "--web.listen-address", busy.Addr().String(), "--metrics.file", file)
	var logs oteltest.SyncBuffer
	rt, err := startMetrics(m, nil, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("start must not fail on a busy port: %v", err)
	}
	if rt.listenAddr() != nil {
		t.Error("listenAddr set without a server")
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), busy.Addr().String()) {
		t.Errorf("bind failure not logged at error: %s", logs.String())
	}
	observeRun(rt.sink(), "wf")
	if err := rt.shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("file not written: %v", err)
	}
	var nilRT *metricsRuntime
	if err := nilRT.shutdown(context.Background()); err != nil {
		t.Errorf("nil runtime shutdown: %v", err)
	}
}

// TestMetricsRuntimeShutdownBounded: a Pushgateway that hangs costs no
// more than the context; the error is returned, not fatal.
func TestMetricsRuntimeShutdownBounded(t *testing.T) {
	release := make(chan struct{})
	pgw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer pgw.Close()
	defer close(release)
	m, _ := parseMetricsFlags(t, false)
	m.pushURL, m.pushJob = pgw.URL, "j" // as run would set them
	rt, err := startMetrics(m, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	if err := rt.shutdown(ctx); err == nil || !strings.Contains(err.Error(), "push") {
		t.Errorf("shutdown with a hanging gateway: %v, want a push error", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("shutdown took %v", d)
	}
}

// TestMetricsRuntimePushTimeout: --push.timeout alone bounds a push to a
// gateway that never answers, and the metrics file is already complete on
// disk when the push begins, so a dead gateway cannot cost it.
func TestMetricsRuntimePushTimeout(t *testing.T) {
	file := filepath.Join(t.TempDir(), "m.prom")
	release := make(chan struct{})
	fileAtPush := make(chan string, 1)
	pgw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(file)
		if err != nil {
			b = []byte("no file: " + err.Error())
		}
		select {
		case fileAtPush <- string(b):
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer pgw.Close()
	defer close(release)
	const timeout = 300 * time.Millisecond
	m, err := parseMetricsFlags(t, true, "--web.listen-address", "", "--metrics.file", file,
		"--push.gateway", pgw.URL, "--push.timeout", timeout.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.validate(); err != nil {
		t.Fatal(err)
	}
	rt, err := startMetrics(m, new(ingest.Stats), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	observeRun(rt.sink(), "wf")
	began := time.Now()
	// No deadline on the context: the flag is the only bound.
	err = rt.shutdown(context.Background())
	took := time.Since(began)
	if err == nil || !strings.Contains(err.Error(), "push") {
		t.Errorf("shutdown with a hanging gateway: %v, want a push error", err)
	}
	if took < timeout || took > timeout+5*time.Second {
		t.Errorf("shutdown took %v with --push.timeout %v", took, timeout)
	}
	select {
	case got := <-fileAtPush:
		if !strings.Contains(got, `cbc_workflow_runs_total{status="completed",workflow="wf"} 1`) {
			t.Errorf("metrics file when the push began:\n%s", got)
		}
	default:
		t.Error("the gateway saw no push")
	}
}

// TestReplayMetricsFile: replay's flags give a file without the
// replaying process's runtime metrics.
func TestReplayMetricsFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "replay.prom")
	m, _ := parseMetricsFlags(t, false, "--metrics.file", file)
	rt, err := startMetrics(m, new(ingest.Stats), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	observeRun(rt.sink(), "wf")
	if err := rt.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(file)
	if !strings.Contains(string(b), "cbc_workflow_runs_total") || strings.Contains(string(b), "go_goroutines") {
		t.Errorf("replay file:\n%s", b)
	}
}
