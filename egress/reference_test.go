package egress

// The reference conversion AppendRequest is held to: SDK spans → the OTLP
// protobuf message, which MarshalRequest (protojson) then encodes. Only the
// tests use it, so it lives here rather than in the binary.

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// Request converts SDK spans to an OTLP ExportTraceServiceRequest, grouped by
// resource and instrumentation scope in order of first appearance. (The
// SDK's own conversion lives in an internal package of otlptrace.) The
// traces file does not go through it (AppendRequest writes the same bytes
// straight from the spans); it is the reference AppendRequest is tested
// against.
func Request(spans []sdktrace.ReadOnlySpan) *collectortrace.ExportTraceServiceRequest {
	type scopeKey struct {
		res   *resource.Resource
		scope instrumentation.Scope
	}
	req := &collectortrace.ExportTraceServiceRequest{}
	byRes := map[*resource.Resource]*tracepb.ResourceSpans{}
	byScope := map[scopeKey]*tracepb.ScopeSpans{}
	for _, s := range spans {
		res := s.Resource()
		rs, ok := byRes[res]
		if !ok {
			rs = &tracepb.ResourceSpans{Resource: resourceProto(res)}
			if res != nil {
				rs.SchemaUrl = res.SchemaURL()
			}
			byRes[res] = rs
			req.ResourceSpans = append(req.ResourceSpans, rs)
		}
		k := scopeKey{res, s.InstrumentationScope()}
		ss, ok := byScope[k]
		if !ok {
			sc := s.InstrumentationScope()
			ss = &tracepb.ScopeSpans{
				Scope:     &commonpb.InstrumentationScope{Name: sc.Name, Version: sc.Version, Attributes: attrs(sc.Attributes.ToSlice())},
				SchemaUrl: sc.SchemaURL,
			}
			byScope[k] = ss
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		ss.Spans = append(ss.Spans, spanProto(s))
	}
	return req
}

func resourceProto(r *resource.Resource) *resourcepb.Resource {
	if r == nil {
		return &resourcepb.Resource{}
	}
	return &resourcepb.Resource{Attributes: attrs(r.Attributes())}
}

func spanProto(s sdktrace.ReadOnlySpan) *tracepb.Span {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	p := &tracepb.Span{
		TraceId:                tid[:],
		SpanId:                 sid[:],
		TraceState:             sc.TraceState().String(),
		Name:                   s.Name(),
		Kind:                   spanKind(s.SpanKind()),
		StartTimeUnixNano:      uint64(max(0, s.StartTime().UnixNano())),
		EndTimeUnixNano:        uint64(max(0, s.EndTime().UnixNano())),
		Attributes:             attrs(s.Attributes()),
		DroppedAttributesCount: uint32(max(0, s.DroppedAttributes())),
		DroppedEventsCount:     uint32(max(0, s.DroppedEvents())),
		DroppedLinksCount:      uint32(max(0, s.DroppedLinks())),
		Flags:                  spanFlags(sc.TraceFlags(), s.Parent()),
		Status:                 &tracepb.Status{},
	}
	if ps := s.Parent(); ps.SpanID().IsValid() {
		id := ps.SpanID()
		p.ParentSpanId = id[:]
	}
	switch st := s.Status(); st.Code {
	case codes.Error:
		p.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: st.Description}
	case codes.Ok:
		p.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}
	}
	for _, ev := range s.Events() {
		p.Events = append(p.Events, &tracepb.Span_Event{
			TimeUnixNano:           uint64(max(0, ev.Time.UnixNano())),
			Name:                   ev.Name,
			Attributes:             attrs(ev.Attributes),
			DroppedAttributesCount: uint32(max(0, ev.DroppedAttributeCount)),
		})
	}
	for _, l := range s.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		p.Links = append(p.Links, &tracepb.Span_Link{
			TraceId:                ltid[:],
			SpanId:                 lsid[:],
			TraceState:             l.SpanContext.TraceState().String(),
			Attributes:             attrs(l.Attributes),
			DroppedAttributesCount: uint32(max(0, l.DroppedAttributeCount)),
			Flags:                  spanFlags(l.SpanContext.TraceFlags(), l.SpanContext),
		})
	}
	return p
}

func attrs(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)})
	}
	return out
}

func anyValue(v attribute.Value) *commonpb.AnyValue {
	switch v.Type() {
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.STRING:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.AsString()}}
	case attribute.BOOLSLICE:
		var a []*commonpb.AnyValue
		for _, x := range v.AsBoolSlice() {
			a = append(a, &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: x}})
		}
		return arrayValue(a)
	case attribute.INT64SLICE:
		var a []*commonpb.AnyValue
		for _, x := range v.AsInt64Slice() {
			a = append(a, &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: x}})
		}
		return arrayValue(a)
	case attribute.FLOAT64SLICE:
		var a []*commonpb.AnyValue
		for _, x := range v.AsFloat64Slice() {
			a = append(a, &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: x}})
		}
		return arrayValue(a)
	case attribute.STRINGSLICE:
		var a []*commonpb.AnyValue
		for _, x := range v.AsStringSlice() {
			a = append(a, &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: x}})
		}
		return arrayValue(a)
	}
	// Types this package never produces (maps, bytes) are written as their
	// string form rather than dropped.
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.String()}}
}

func arrayValue(a []*commonpb.AnyValue) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: a}}}
}
