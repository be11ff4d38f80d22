package join

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
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
