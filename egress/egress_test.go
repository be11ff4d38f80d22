package egress

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/clitelemetry"
	"github.com/cbc-otel/cbc-otel/internal/clicorpus"
)

// forwardCorpus hands every recorded request of the CLI to e, as the join
// does, and returns how many spans, log records and metric points it
// handed.
func forwardCorpus(t *testing.T, e *Egress) (spans, records, points int64) {
	t.Helper()
	for _, l := range clicorpus.Load(t) {
		switch l.Path {
		case "/v1/traces":
			m, err := clitelemetry.DecodeTraces(l.Body, clitelemetry.JSON)
			if err != nil {
				t.Fatal(err)
			}
			spans += int64(clitelemetry.CountSpans(m.GetResourceSpans()))
			e.ForwardSpans(m.GetResourceSpans())
		case "/v1/logs":
			m, err := clitelemetry.DecodeLogs(l.Body, clitelemetry.JSON)
			if err != nil {
				t.Fatal(err)
			}
			records += int64(clitelemetry.CountLogRecords(m.GetResourceLogs()))
			e.ForwardLogs(m)
		case "/v1/metrics":
			m, err := clitelemetry.DecodeMetrics(l.Body, clitelemetry.JSON)
			if err != nil {
				t.Fatal(err)
			}
			points += int64(clitelemetry.CountDataPoints(m.GetResourceMetrics()))
			e.ForwardMetrics(m)
		}
	}
	if spans == 0 || records == 0 || points == 0 {
		t.Fatalf("corpus: %d spans, %d records, %d points", spans, records, points)
	}
	return spans, records, points
}

// TestEgressLossesEverySignal: spans, log records and metric points that a
// collector refuses are each said once, in the same words, by the same
// reporter, and counted in one Loss each; the file still gets every span.
func TestEgressLossesEverySignal(t *testing.T) {
	cleanEnv(t)
	s, addr := httpSink(t)
	s.fail = true
	var logBuf logBuffer
	file := filepath.Join(t.TempDir(), "spans.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e, err := New(ctx, Config{Endpoint: addr, Protocol: ProtocolHTTP, File: file, Forward: true,
		BatchInterval: 10 * time.Millisecond, Env: envOf(nil), Logger: newTestLogger(&logBuf)})
	if err != nil {
		t.Fatal(err)
	}
	spans, records, points := forwardCorpus(t, e)
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		n    int64
		path string
	}{"spans": {spans, "/v1/traces"}, "log records": {records, "/v1/logs"}, "metric points": {points, "/v1/metrics"}}
	losses := e.Losses()
	if len(losses) != len(want) {
		t.Fatalf("losses %v, want one per signal", losses)
	}
	for _, l := range losses {
		w := want[l.Signal]
		re := regexp.MustCompile(fmt.Sprintf(`^%d %s dropped, not delivered to %s%s \(http/protobuf\): HTTP 400 Bad Request, body: refused$`,
			w.n, l.Signal, regexp.QuoteMeta(addr), w.path))
		if !re.MatchString(l.String()) || l.Items != w.n || l.ExportErrors == 0 {
			t.Errorf("loss %q (items %d, errors %d), want %s", l, l.Items, l.ExportErrors, re)
		}
	}
	if lr, mp, ok := e.ForwardLost(); !ok || lr != records || mp != points {
		t.Errorf("ForwardLost = %d, %d, %v; want %d, %d, true", lr, mp, ok, records, points)
	}
	for _, line := range []string{"msg=\"trace export failed\"", "msg=\"forwarding the CLI's telemetry failed\" signal=logs", "msg=\"forwarding the CLI's telemetry failed\" signal=metrics"} {
		if n := len(logBuf.lines(line)); n != 1 {
			t.Errorf("%d lines %s, want 1 (the first failure; the next within ReportEvery): %s", n, line, logBuf.String())
		}
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var inFile int64
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		req, err := UnmarshalRequest(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		inFile += int64(clitelemetry.CountSpans(req.GetResourceSpans()))
	}
	if inFile != spans {
		t.Errorf("file holds %d spans, want %d", inFile, spans)
	}
}

// TestEgressForwardOff: without Config.Forward, or without an OTLP
// endpoint for spans, the CLI's logs and metrics go nowhere and nothing is
// counted as theirs; a nil Egress takes everything and does nothing.
func TestEgressForwardOff(t *testing.T) {
	cleanEnv(t)
	_, addr := httpSink(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"no Forward", Config{Endpoint: addr, Protocol: ProtocolHTTP}},
		{"spans to a file only", Config{Endpoint: "none", File: filepath.Join(t.TempDir(), "f"), Forward: true}},
		{"nil Egress", Config{Endpoint: "none", Forward: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Env = envOf(nil)
			e, err := New(ctx, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			forwardCorpus(t, e)
			if err := e.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if _, _, ok := e.ForwardLost(); ok {
				t.Error("ForwardLost ok without forwarding")
			}
			for _, l := range e.Losses() {
				if l.Signal != "spans" {
					t.Errorf("loss of a signal not forwarded: %s", l)
				}
			}
		})
	}
}

// TestHeadersCheckedForEverySignal: a malformed header list, which the
// SDK would drop with a log line (exporting without credentials), is
// refused for the forwarded signals as for spans, naming the variable.
func TestHeadersCheckedForEverySignal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_LOGS_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS"} {
		t.Run(name, func(t *testing.T) {
			cleanEnv(t)
			t.Setenv(name, "no-equals-sign")
			f, err := newForwarder(ctx, forwardConfig{Protocol: ProtocolHTTP, Endpoint: "127.0.0.1:1", Env: envOf(nil)})
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("newForwarder = %v, %v; want an error naming %s", f, err, name)
			}
			_ = f.Shutdown(ctx)
		})
	}
}
