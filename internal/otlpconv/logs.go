package otlpconv

import (
	"go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
)

// LoggerOptions are the options of the SDK Logger that emits the records
// of one OTLP scope: its version, schema URL and attributes (the name is
// Logger's first argument).
func LoggerOptions(sc *commonpb.InstrumentationScope, schemaURL string) []log.LoggerOption {
	return []log.LoggerOption{
		log.WithInstrumentationVersion(sc.GetVersion()),
		log.WithSchemaURL(schemaURL),
		log.WithInstrumentationAttributes(KeyValues(sc.GetAttributes())...),
	}
}

// LogRecord converts an OTLP log record: timestamps (0 left unset),
// severity, body, attributes and event name; and the span context its
// trace and span ids (each when of the right length) and flags make, with
// ok false when it has neither id. The SDK takes the ids from the context
// Emit gets (trace.ContextWithRemoteSpanContext).
func LogRecord(r *logspb.LogRecord) (rec log.Record, sc trace.SpanContext, ok bool) {
	if t := r.GetTimeUnixNano(); t != 0 {
		rec.SetTimestamp(Time(t))
	}
	if t := r.GetObservedTimeUnixNano(); t != 0 {
		rec.SetObservedTimestamp(Time(t))
	}
	rec.SetSeverity(log.Severity(r.GetSeverityNumber()))
	rec.SetSeverityText(r.GetSeverityText())
	if r.GetBody() != nil {
		rec.SetBody(Value(r.GetBody()))
	}
	rec.AddAttributes(KeyValues(r.GetAttributes())...)
	rec.SetEventName(r.GetEventName())
	if len(r.GetTraceId()) != 16 && len(r.GetSpanId()) != 8 {
		return rec, sc, false
	}
	var cfg trace.SpanContextConfig
	if len(r.GetTraceId()) == 16 {
		cfg.TraceID = trace.TraceID(r.GetTraceId())
	}
	if len(r.GetSpanId()) == 8 {
		cfg.SpanID = trace.SpanID(r.GetSpanId())
	}
	cfg.TraceFlags = trace.TraceFlags(r.GetFlags() & 0xff) //nolint:gosec // masked to a byte.
	return rec, trace.NewSpanContext(cfg), true
}
