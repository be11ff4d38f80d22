package telemetry

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cbc-otel/cbc-otel/internal/oteltest"
)

// corpus is a recording with workflow runs: spans to export.
const corpus = "../testdata/corpus/claude-code-2.1.328/complete.ndjson"

// parseFlags registers mode's flags, parses args and validates them.
func parseFlags(t *testing.T, mode Mode, args ...string) *Flags {
	t.Helper()
	f := &Flags{Version: "test"}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs, mode)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	return f
}

// newTelemetry is New on f with a clean OTel environment, logging to the
// returned buffer.
func newTelemetry(t *testing.T, f *Flags) (*Telemetry, *oteltest.SyncBuffer) {
	t.Helper()
	oteltest.ClearEnv(t)
	logs := new(oteltest.SyncBuffer)
	tel, err := New(context.Background(), f, func(string) string { return "" }, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return tel, logs
}

// silentGateway is a Pushgateway that takes the request and never
// answers (until the test ends).
func silentGateway(t *testing.T) string {
	t.Helper()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(func() { close(stop); srv.Close() })
	return srv.URL
}

// TestShutdownWithoutStart: Shutdown is safe on a nil Telemetry and on one
// never started, in every mode: it returns at once, binds nothing and
// writes no output of a process that never ran (serve's file would
// replace the last good totals with unrestored ones).
func TestShutdownWithoutStart(t *testing.T) {
	if err := (*Telemetry)(nil).Shutdown(context.Background()); err != nil {
		t.Errorf("nil Telemetry: %v", err)
	}
	for _, mode := range []Mode{Wrapper, Demo, Sidecar, Batch} {
		dir := t.TempDir()
		file := filepath.Join(dir, "m.prom")
		args := []string{"--metrics.file", file, "--traces.file", filepath.Join(dir, "spans.jsonl")}
		if mode != Batch {
			args = append(args, "--web.listen-address", "127.0.0.1:0")
		}
		tel, _ := newTelemetry(t, parseFlags(t, mode, args...))
		began := time.Now()
		if err := tel.Shutdown(context.Background()); err != nil {
			t.Errorf("mode %d: %v", mode, err)
		}
		if d := time.Since(began); d > time.Second {
			t.Errorf("mode %d: took %v with nothing to flush", mode, d)
		}
		if tel.Addr() != nil {
			t.Errorf("mode %d: bound %v without Start", mode, tel.Addr())
		}
		if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("mode %d: metrics file written without Start (%v)", mode, err)
		}
	}
}

// TestShutdownTwice: the second Shutdown returns the first's error (the
// same value), at once, even with its context done, and says nothing
// again; the server is down after the first.
func TestShutdownTwice(t *testing.T) {
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	defer gw.Close()
	file := filepath.Join(t.TempDir(), "m.prom")
	tel, logs := newTelemetry(t, parseFlags(t, Wrapper, "--web.listen-address", "127.0.0.1:0", "--metrics.file", file, "--push.gateway", gw.URL))
	if err := tel.Start(context.Background(), StartOptions{}); err != nil {
		t.Fatal(err)
	}
	addr := tel.Addr()
	if addr == nil {
		t.Fatal("not listening after Start")
	}
	first := tel.Shutdown(context.Background())
	if first == nil || !strings.Contains(first.Error(), "push") {
		t.Fatalf("first Shutdown: %v, want the push's error", first)
	}
	said := logs.String()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	began := time.Now()
	if second := tel.Shutdown(done); second != first {
		t.Errorf("second Shutdown: %v, want the first's %v", second, first)
	}
	if d := time.Since(began); d > 100*time.Millisecond {
		t.Errorf("second Shutdown took %v", d)
	}
	if logs.String() != said {
		t.Errorf("second Shutdown logged:\n%s", strings.TrimPrefix(logs.String(), said))
	}
	if c, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
		c.Close()
		t.Error("server still listening after Shutdown")
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("metrics file: %v", err)
	}
}

// TestShutdownBounded: a collector that never answers (spans and the CLI's
// forwarded telemetry) and a Pushgateway that never answers hold Shutdown
// no longer than ShutdownBound, and what they cost is said.
func TestShutdownBounded(t *testing.T) {
	f := parseFlags(t, Wrapper, "--otlp.endpoint", oteltest.BlackHole(t), "--traces.flush-timeout", "300ms",
		"--push.gateway", silentGateway(t), "--push.timeout", "300ms")
	f.JoinCLI = true
	oteltest.ClearEnv(t)
	logs := new(oteltest.SyncBuffer)
	log := slog.New(slog.NewTextHandler(logs, nil))
	w, err := f.Wrap(context.Background(), WrapOptions{TapQueue: 1 << 20, Command: "claude"}, log)
	if err != nil {
		t.Fatal(err)
	}
	feed(t, w.StdoutTap())
	w.Finish(context.Background(), 10*time.Second, log)
	bound := w.Telemetry().ShutdownBound()
	began := time.Now()
	err = w.Shutdown(context.Background())
	took := time.Since(began)
	if took > bound+time.Second {
		t.Errorf("Shutdown took %v, bound %v", took, bound)
	}
	for _, want := range []string{"spans dropped, not delivered to", "push not delivered to"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no %q line:\n%s", want, logs.String())
		}
	}
	if err == nil {
		t.Error("Shutdown: no error for a push never answered")
	}
	t.Logf("Shutdown took %v (bound %v)", took, bound)
}

// TestLossesOnce: whatever calls Shutdown and however often, each loss is
// said in one line: spans per exporter, the push once.
func TestLossesOnce(t *testing.T) {
	tel, logs := newTelemetry(t, parseFlags(t, Wrapper, "--otlp.endpoint", oteltest.RefusedAddr(t), "--traces.flush-timeout", "2s",
		"--push.gateway", "http://"+oteltest.RefusedAddr(t), "--push.timeout", "2s"))
	if err := tel.Start(context.Background(), StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tel.Replay(context.Background(), []string{corpus}, nil, false); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		tel.Shutdown(context.Background())
	}
	for _, line := range []string{"spans dropped, not delivered to", "push not delivered to"} {
		if n := strings.Count(logs.String(), line); n != 1 {
			t.Errorf("%q said %d times, want once:\n%s", line, n, logs.String())
		}
	}
	if tel.Undelivered() == 0 {
		t.Error("no span counted as undelivered")
	}
}

// TestSelfMetricsCarryConstLabels: every collector of the process (the
// join's cbc_otel_cli_*, the spool writer's, the caller's) registers
// through the one registerer, so that under demo each of their series
// says demo="true", as the metrics sink's own do.
func TestSelfMetricsCarryConstLabels(t *testing.T) {
	f := parseFlags(t, Demo, "--web.listen-address=")
	f.JoinCLI = true
	oteltest.ClearEnv(t)
	log := slog.New(slog.DiscardHandler)
	own := prometheus.NewCounter(prometheus.CounterOpts{Name: "cbc_test_own_total", Help: "The caller's."})
	w, err := f.Wrap(context.Background(), WrapOptions{TapQueue: 1 << 20, Command: "claude",
		Spool:    SpoolFlags{Dir: t.TempDir(), Process: true},
		Register: func(r prometheus.Registerer) { r.MustRegister(own) }}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(context.Background())
	feed(t, w.StdoutTap())
	w.Finish(context.Background(), 10*time.Second, log)
	fams, err := w.Telemetry().metrics.gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, fam := range fams {
		for _, m := range fam.GetMetric() {
			if !hasLabel(m, "demo", "true") {
				t.Errorf("%s%v lacks demo=\"true\"", fam.GetName(), m.GetLabel())
			}
		}
		for _, p := range []string{"cbc_otel_cli_", "cbc_otel_spool_", "cbc_test_own_", "cbc_workflow_"} {
			if strings.HasPrefix(fam.GetName(), p) {
				seen[p] = true
			}
		}
	}
	if len(seen) != 4 {
		t.Errorf("families seen %v, want the join's, the spool's, the caller's and the sink's", seen)
	}
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// feed writes the corpus to the stdout tap of a wrapped child.
func feed(t *testing.T, w io.Writer) {
	t.Helper()
	b, err := os.ReadFile(corpus)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
}
