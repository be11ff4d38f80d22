package join

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/tap"
)

// TestChildEnv: the join's plumbing is ours, the switches the user's when
// set, TRACEPARENT theirs when they have one.
func TestChildEnv(t *testing.T) {
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	cases := []struct {
		name string
		base []string
		want map[string]string // "" value: must be absent
	}{
		{"nothing set", []string{"PATH=/bin"}, map[string]string{
			"PATH": "/bin", "CLAUDE_CODE_ENABLE_TELEMETRY": "1", "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1",
			"OTEL_TRACES_EXPORTER": "otlp", "OTEL_LOGS_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "otlp",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:7/v1/traces", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://127.0.0.1:7/v1/logs",
			"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf", "OTEL_LOGS_EXPORT_INTERVAL": "1000",
			"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "authorization=Bearer%20tok", "OTEL_EXPORTER_OTLP_LOGS_HEADERS": "authorization=Bearer%20tok",
			"OTEL_EXPORTER_OTLP_METRICS_HEADERS": "authorization=Bearer%20tok",
			"TRACEPARENT":                        "00-01000000000000000000000000000000-0200000000000000-01",
		}},
		{"cbc-otel's own export settings do not reach the child", []string{
			"OTEL_TRACES_EXPORTER=none", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=https://collector:4318/v1/traces",
			"OTEL_EXPORTER_OTLP_LOGS_PROTOCOL=grpc", "OTEL_EXPORTER_OTLP_ENDPOINT=https://collector:4318",
			"OTEL_EXPORTER_OTLP_TRACES_HEADERS=x-api-key=collector-key", "OTEL_EXPORTER_OTLP_HEADERS=x-team=agents",
		}, map[string]string{
			"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:7/v1/traces",
			"OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "http/protobuf",
			// the token, not the collector's key: that one is cbc-otel's
			"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "authorization=Bearer%20tok",
			"OTEL_EXPORTER_OTLP_HEADERS":        "x-team=agents",
			// the generic one stays: the per-signal ones win over it in the CLI
			"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318",
		}},
		{"the user's switches win", []string{
			"CLAUDE_CODE_ENABLE_TELEMETRY=", "OTEL_LOGS_EXPORT_INTERVAL=250", "TRACEPARENT=00-aa000000000000000000000000000000-bb00000000000000-01",
		}, map[string]string{
			"CLAUDE_CODE_ENABLE_TELEMETRY": "", "OTEL_LOGS_EXPORT_INTERVAL": "250",
			"TRACEPARENT": "00-aa000000000000000000000000000000-bb00000000000000-01",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := ChildEnv(tc.base, "http://127.0.0.1:7", "authorization=Bearer%20tok", parent)
			got := map[string][]string{}
			for _, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				got[k] = append(got[k], v)
			}
			for k, vs := range got {
				if len(vs) > 1 {
					t.Errorf("%s set %d times: %q", k, len(vs), vs)
				}
			}
			for k, want := range tc.want {
				if vs := got[k]; len(vs) != 1 || vs[0] != want {
					t.Errorf("%s = %q, want %q", k, vs, want)
				}
			}
		})
	}
}

// callSink keeps the model calls the pipeline emitted.
type callSink struct{ calls []ingest.ModelCall }

func (s *callSink) Observe(l ingest.Lifecycle) {
	if l.Kind == ingest.ModelCallSeen {
		s.calls = append(s.calls, *l.Call)
	}
}

// TestSessionOnACallQueue is the knot untied: the queue is made first and
// handed to the session and to a pipeline made after it (nothing of the
// session needs the pipeline); an api_request the Joiner reads reaches the
// pipeline's sinks, and StreamDone ends the calls once the stream is read,
// so that the pipeline closes. A session without a queue drops calls.
func TestSessionOnACallQueue(t *testing.T) {
	cq := ingest.NewCallQueue()
	s := NewSession(SessionOptions{Parent: MintParent(), Calls: cq, Hold: time.Minute})
	seen := new(callSink)
	p := ingest.NewPipeline(ingest.PipelineOptions{Calls: cq, Live: true,
		Tracker: ingest.TrackerOptions{Grace: time.Hour, Sinks: []ingest.Sink{seen}}})
	stdout := tap.NewTap(1 << 16)
	done := make(chan struct{})
	go func() { p.Consume(context.Background(), stdout, nil, time.Millisecond); close(done) }()
	rec := &logspb.LogRecord{Attributes: append(kvs("event.name", "api_request", "model", "claude-sonnet-4-5", "session.id", "S1"), dbl("cost_usd", 0.25))}
	s.Joiner.Logs(context.Background(), &collogspb.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{
		ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{rec}}}}}})
	stdout.Close()
	s.StreamDone(context.Background()) // waits for the stream, then ends the calls
	<-done
	if len(seen.calls) != 1 || seen.calls[0].Cost.CostUSD != 0.25 {
		t.Errorf("calls through the queue = %+v, want the one api_request", seen.calls)
	}
	if got := s.Joiner.Stats().CallsLost.Load(); got != 0 {
		t.Errorf("calls lost = %d", got)
	}

	none := NewSession(SessionOptions{Parent: MintParent()})
	none.Joiner.Logs(context.Background(), &collogspb.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{
		ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{rec}}}}}})
	if got := none.Joiner.Stats().CallsLost.Load(); got != 1 {
		t.Errorf("a session without a queue: calls lost = %d, want 1", got)
	}
	none.StreamDone(context.Background()) // nothing to wait for
}
