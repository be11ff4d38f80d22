package otlpconv

import (
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// OTLP span flags (trace.proto SpanFlags): the low byte is the W3C trace
// flags; these two tell whether the parent, or a link's span, is remote.
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// ReadOnlySpans converts OTLP spans into SDK spans, as the SDK's span
// exporters take them, keeping for each the resource, the scope, the ids
// and trace state, the parent (remote when the flags say so), kind, times,
// attributes, events, links with their attributes, status and the dropped
// counts. Spans whose trace or span id is invalid are skipped. A span whose
// flags carry no trace flags at all (an exporter that does not fill them)
// is marked sampled: it was recorded and exported.
//
// The spans share nothing with rs; ChildSpanCount is 0, as OTLP does not
// carry it.
func ReadOnlySpans(rs []*tracepb.ResourceSpans) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, r := range rs {
		res := Resource(r.GetResource(), r.GetSchemaUrl())
		for _, ss := range r.GetScopeSpans() {
			scope := Scope(ss.GetScope(), ss.GetSchemaUrl())
			for _, s := range ss.GetSpans() {
				sc := spanContext(s.GetTraceId(), s.GetSpanId(), s.GetTraceState(), s.GetFlags(), false)
				if !sc.IsValid() {
					continue
				}
				stub := tracetest.SpanStub{
					Name:                 s.GetName(),
					SpanContext:          sc,
					SpanKind:             spanKind(s.GetKind()),
					StartTime:            Time(s.GetStartTimeUnixNano()),
					EndTime:              Time(s.GetEndTimeUnixNano()),
					Attributes:           KeyValues(s.GetAttributes()),
					Status:               spanStatus(s.GetStatus()),
					DroppedAttributes:    int(s.GetDroppedAttributesCount()),
					DroppedEvents:        int(s.GetDroppedEventsCount()),
					DroppedLinks:         int(s.GetDroppedLinksCount()),
					Resource:             res,
					InstrumentationScope: scope,
				}
				if len(s.GetParentSpanId()) == 8 {
					remote := s.GetFlags()&(flagHasIsRemote|flagIsRemote) == flagHasIsRemote|flagIsRemote
					stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{
						TraceID:    sc.TraceID(),
						SpanID:     trace.SpanID(s.GetParentSpanId()),
						TraceFlags: sc.TraceFlags(),
						Remote:     remote,
					})
				}
				for _, e := range s.GetEvents() {
					stub.Events = append(stub.Events, sdktrace.Event{
						Name:                  e.GetName(),
						Attributes:            KeyValues(e.GetAttributes()),
						DroppedAttributeCount: int(e.GetDroppedAttributesCount()),
						Time:                  Time(e.GetTimeUnixNano()),
					})
				}
				for _, l := range s.GetLinks() {
					lsc := spanContext(l.GetTraceId(), l.GetSpanId(), l.GetTraceState(), l.GetFlags(), true)
					stub.Links = append(stub.Links, sdktrace.Link{
						SpanContext:           lsc,
						Attributes:            KeyValues(l.GetAttributes()),
						DroppedAttributeCount: int(l.GetDroppedAttributesCount()),
					})
				}
				out = append(out, stub.Snapshot())
			}
		}
	}
	return out
}

// spanContext builds the span context of OTLP ids, trace state and flags.
// link: the flags' remote bits say whether this span is remote (for a span
// they are about its parent).
func spanContext(tid, sid []byte, state string, flags uint32, link bool) trace.SpanContext {
	var cfg trace.SpanContextConfig
	if len(tid) == 16 {
		cfg.TraceID = trace.TraceID(tid)
	}
	if len(sid) == 8 {
		cfg.SpanID = trace.SpanID(sid)
	}
	cfg.TraceFlags = trace.TraceFlags(flags & 0xff) //nolint:gosec // masked to a byte.
	if flags&0xff == 0 && !link {
		cfg.TraceFlags = trace.FlagsSampled
	}
	if link {
		cfg.Remote = flags&(flagHasIsRemote|flagIsRemote) == flagHasIsRemote|flagIsRemote
	}
	if ts, err := trace.ParseTraceState(state); err == nil {
		cfg.TraceState = ts
	}
	return trace.NewSpanContext(cfg)
}

func spanKind(k tracepb.Span_SpanKind) trace.SpanKind {
	switch k {
	case tracepb.Span_SPAN_KIND_INTERNAL:
		return trace.SpanKindInternal
	case tracepb.Span_SPAN_KIND_SERVER:
		return trace.SpanKindServer
	case tracepb.Span_SPAN_KIND_CLIENT:
		return trace.SpanKindClient
	case tracepb.Span_SPAN_KIND_PRODUCER:
		return trace.SpanKindProducer
	case tracepb.Span_SPAN_KIND_CONSUMER:
		return trace.SpanKindConsumer
	}
	return trace.SpanKindUnspecified
}

// spanStatus maps OTLP's status codes (0 unset, 1 ok, 2 error), which are
// numbered unlike the API's codes.
func spanStatus(s *tracepb.Status) sdktrace.Status {
	switch s.GetCode() {
	case tracepb.Status_STATUS_CODE_OK:
		return sdktrace.Status{Code: codes.Ok}
	case tracepb.Status_STATUS_CODE_ERROR:
		return sdktrace.Status{Code: codes.Error, Description: s.GetMessage()}
	}
	return sdktrace.Status{Code: codes.Unset}
}
