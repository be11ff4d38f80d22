package clitelemetry

import (
	"testing"

	"github.com/cbc-otel/cbc-otel/internal/otlpconv"
)

// FuzzDecode feeds arbitrary bodies, as JSON and as protobuf, to every
// decoder and the converters behind them: none may panic, and what decodes
// has ids of the right length.
func FuzzDecode(f *testing.F) {
	// Small seeds in the corpus' shapes: whole recorded requests (~50 KB)
	// make the coverage-guided mutator crawl.
	for path, body := range map[string]string{
		"/v1/traces":  `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"claude-code"}}]},"scopeSpans":[{"scope":{"name":"s","version":"1"},"spans":[{"traceId":"0123456789abcdef0123456789abcdef","spanId":"1bfdc86fa5d80e7f","parentSpanId":"66148255fb722aaa","name":"n","kind":1,"startTimeUnixNano":"1","endTimeUnixNano":"2","attributes":[{"key":"d","value":{"intValue":3}},{"key":"a","value":{"arrayValue":{"values":[{"stringValue":"x"}]}}}],"events":[{"name":"e","timeUnixNano":"1","attributes":[{"key":"attempt","value":{"intValue":1}}]}],"status":{"code":2,"message":"m"},"links":[{"traceId":"0123456789abcdef0123456789abcdef","spanId":"1bfdc86fa5d80e7f"}],"flags":769}]}]}]}`,
		"/v1/logs":    `{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"claude-code"}}]},"scopeLogs":[{"scope":{"name":"s"},"logRecords":[{"timeUnixNano":"1","observedTimeUnixNano":"2","severityNumber":9,"body":{"stringValue":"b"},"attributes":[{"key":"event.name","value":{"stringValue":"api_request"}},{"key":"cost","value":{"doubleValue":0.5}},{"key":"m","value":{"kvlistValue":{"values":[{"key":"k","value":{"boolValue":true}}]}}}],"flags":1,"traceId":"0123456789abcdef0123456789abcdef","spanId":"fedcba9876543210"}]}]}]}`,
		"/v1/metrics": `{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"c","sum":{"aggregationTemporality":1,"isMonotonic":true,"dataPoints":[{"attributes":[{"key":"model","value":{"stringValue":"m"}}],"startTimeUnixNano":"1","timeUnixNano":"2","asDouble":1}]}},{"name":"h","histogram":{"aggregationTemporality":2,"dataPoints":[{"count":"2","sum":3,"bucketCounts":["1","1"],"explicitBounds":[1],"exemplars":[{"asInt":"1","traceId":"0123456789abcdef0123456789abcdef","spanId":"fedcba9876543210"}]}]}}]}]}]}`,
	} {
		f.Add([]byte(body))
		f.Add(toProtobuf(f, path, []byte(body)))
	}
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0123456789abcdef0123456789abcdef","spanId":"0123456789abcdef","links":[{"traceId":"00","spanId":""}]}]}]}]}`))
	f.Add([]byte(`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"traceId":"","spanId":"zz","body":{"kvlistValue":{"values":[{"key":"traceId","value":{"stringValue":"x"}}]}}}]}]}]}`))
	f.Add([]byte(`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"sum":{"aggregationTemporality":"AGGREGATION_TEMPORALITY_DELTA","dataPoints":[{"asInt":"9223372036854775807"}]}}]}]}]}`))
	f.Add([]byte{0x0a, 0x02, 0x12, 0x00})
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, enc := range []Encoding{JSON, Protobuf} {
			if tr, err := DecodeTraces(body, enc); err == nil {
				for _, s := range otlpconv.ReadOnlySpans(tr.GetResourceSpans()) {
					if !s.SpanContext().IsValid() {
						t.Fatalf("invalid span context %v", s.SpanContext())
					}
				}
			}
			if lg, err := DecodeLogs(body, enc); err == nil {
				for _, rl := range lg.GetResourceLogs() {
					for _, sl := range rl.GetScopeLogs() {
						for _, r := range sl.GetLogRecords() {
							if n := len(r.GetTraceId()); n != 0 && n != 16 {
								t.Fatalf("trace id of %d bytes", n)
							}
							_ = otlpconv.Value(r.GetBody())
						}
					}
				}
			}
			if m, err := DecodeMetrics(body, enc); err == nil {
				_, _ = otlpconv.ResourceMetrics(m.GetResourceMetrics())
			}
		}
	})
}
