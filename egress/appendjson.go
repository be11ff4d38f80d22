package egress

import (
	"encoding/hex"
	"errors"
	"math"
	"math/bits"
	"strconv"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/cbc-otel/cbc-otel/internal/jsonnum"
	"github.com/cbc-otel/cbc-otel/internal/jsonplain"
)

// errInvalidUTF8 is what protojson refuses too: a string that is not UTF-8
// fails the export, as it did when spans went through protojson.
var errInvalidUTF8 = errors.New("otlpjson: string field contains invalid UTF-8")

// AppendRequest appends spans as one OTLP/JSON ExportTraceServiceRequest
// (no newline) to dst: byte for byte what MarshalRequest of the reference conversion (Request, reference_test.go)
// writes, encoded straight from the spans. Building the protobuf request,
// having protojson encode it and rewriting its ids was ~35 % of serve's CPU
// with --traces.file (~10 µs per event) and most of its garbage; this
// allocates nothing but dst's growth. On error dst's new bytes are garbage.
func AppendRequest(dst []byte, spans []sdktrace.ReadOnlySpan) ([]byte, error) {
	var (
		resBuf [4]*resource.Resource
		res    = resBuf[:0]
	)
	for _, s := range spans {
		if !containsRes(res, s.Resource()) {
			res = append(res, s.Resource())
		}
	}
	var (
		scopeBuf [4]instrumentation.Scope
		err      error
	)
	dst = append(dst, `{"resourceSpans":[`...)
	for ri, r := range res {
		if ri > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"resource":{`...)
		if r != nil {
			if dst, err = appendAttrsField(dst, "attributes", r.Attributes(), false); err != nil {
				return dst, err
			}
		}
		dst = append(dst, `},"scopeSpans":[`...)
		scopes := scopeBuf[:0]
		for _, s := range spans {
			if s.Resource() == r && !containsScope(scopes, s.InstrumentationScope()) {
				scopes = append(scopes, s.InstrumentationScope())
			}
		}
		for si, sc := range scopes {
			if si > 0 {
				dst = append(dst, ',')
			}
			if dst, err = appendScopeSpans(dst, r, sc, spans); err != nil {
				return dst, err
			}
		}
		dst = append(dst, ']')
		if r != nil && r.SchemaURL() != "" {
			dst = append(dst, `,"schemaUrl":`...)
			if dst, err = appendString(dst, r.SchemaURL()); err != nil {
				return dst, err
			}
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}"...), nil
}

func containsRes(rs []*resource.Resource, r *resource.Resource) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

func containsScope(ss []instrumentation.Scope, s instrumentation.Scope) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// appendScopeSpans appends the ScopeSpans of the spans of resource r and
// scope sc, in their order.
func appendScopeSpans(dst []byte, r *resource.Resource, sc instrumentation.Scope, spans []sdktrace.ReadOnlySpan) ([]byte, error) {
	var err error
	dst = append(dst, `{"scope":{`...)
	o := obj{dst: dst}
	o.str("name", sc.Name)
	o.str("version", sc.Version)
	dst = o.dst
	if o.err != nil {
		return dst, o.err
	}
	if dst, err = appendAttrsField(dst, "attributes", sc.Attributes.ToSlice(), o.n > 0); err != nil {
		return dst, err
	}
	dst = append(dst, `},"spans":[`...)
	first := true
	for _, s := range spans {
		if s.Resource() != r || s.InstrumentationScope() != sc {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		if dst, err = appendSpan(dst, s); err != nil {
			return dst, err
		}
	}
	dst = append(dst, ']')
	if sc.SchemaURL != "" {
		dst = append(dst, `,"schemaUrl":`...)
		if dst, err = appendString(dst, sc.SchemaURL); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// obj appends the fields of one JSON object in protojson's way: in
// declaration order, a field at its zero value left out. n counts the
// fields written, for the commas; err is the first failure.
type obj struct {
	dst []byte
	n   int
	err error
}

func (o *obj) key(k string) {
	if o.n > 0 {
		o.dst = append(o.dst, ',')
	}
	o.n++
	o.dst = append(o.dst, '"')
	o.dst = append(o.dst, k...)
	o.dst = append(o.dst, `":`...)
}

func (o *obj) str(k, v string) {
	if v == "" || o.err != nil {
		return
	}
	o.key(k)
	o.dst, o.err = appendString(o.dst, v)
}

// u64 is a 64-bit integer field: a string in proto3 JSON.
func (o *obj) u64(k string, v uint64) {
	if v == 0 {
		return
	}
	o.key(k)
	o.dst = append(o.dst, '"')
	o.dst = strconv.AppendUint(o.dst, v, 10)
	o.dst = append(o.dst, '"')
}

// u32 is a 32-bit integer or enum field: a number.
func (o *obj) u32(k string, v uint32) {
	if v == 0 {
		return
	}
	o.key(k)
	o.dst = strconv.AppendUint(o.dst, uint64(v), 10)
}

// traceState is the "traceState" field: the W3C header's text, written
// member by member (TraceState.String builds it on the heap, once per span).
func (o *obj) traceState(ts trace.TraceState) {
	if ts.Len() == 0 || o.err != nil {
		return
	}
	o.key("traceState")
	o.dst = append(o.dst, '"')
	first := true
	ts.Walk(func(k, v string) bool {
		if !first {
			o.dst = append(o.dst, ',')
		}
		first = false
		if o.dst, o.err = appendStringBody(o.dst, k); o.err != nil {
			return false
		}
		o.dst = append(o.dst, '=')
		o.dst, o.err = appendStringBody(o.dst, v)
		return o.err == nil
	})
	o.dst = append(o.dst, '"')
}

func (o *obj) id(k string, id []byte) {
	o.key(k)
	o.dst = append(o.dst, '"')
	o.dst = hex.AppendEncode(o.dst, id)
	o.dst = append(o.dst, '"')
}

func (o *obj) attrs(k string, kvs []attribute.KeyValue) {
	if o.err != nil {
		return
	}
	o.dst, o.err = appendAttrsField(o.dst, k, kvs, o.n > 0)
	if len(kvs) > 0 {
		o.n++
	}
}

func appendSpan(dst []byte, s sdktrace.ReadOnlySpan) ([]byte, error) {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	o := obj{dst: append(dst, '{')}
	o.id("traceId", tid[:])
	o.id("spanId", sid[:])
	o.traceState(sc.TraceState())
	if ps := s.Parent(); ps.SpanID().IsValid() {
		id := ps.SpanID()
		o.id("parentSpanId", id[:])
	}
	o.u32("flags", spanFlags(sc.TraceFlags(), s.Parent()))
	o.str("name", s.Name())
	o.u32("kind", uint32(spanKind(s.SpanKind())))
	o.u64("startTimeUnixNano", uint64(max(0, s.StartTime().UnixNano())))
	o.u64("endTimeUnixNano", uint64(max(0, s.EndTime().UnixNano())))
	o.attrs("attributes", s.Attributes())
	o.u32("droppedAttributesCount", uint32(max(0, s.DroppedAttributes())))
	if evs := s.Events(); len(evs) > 0 {
		o.key("events")
		o.dst = append(o.dst, '[')
		for i, ev := range evs {
			if i > 0 {
				o.dst = append(o.dst, ',')
			}
			e := obj{dst: append(o.dst, '{')}
			e.u64("timeUnixNano", uint64(max(0, ev.Time.UnixNano())))
			e.str("name", ev.Name)
			e.attrs("attributes", ev.Attributes)
			e.u32("droppedAttributesCount", uint32(max(0, ev.DroppedAttributeCount)))
			o.dst = append(e.dst, '}')
			if e.err != nil {
				return o.dst, e.err
			}
		}
		o.dst = append(o.dst, ']')
	}
	o.u32("droppedEventsCount", uint32(max(0, s.DroppedEvents())))
	if ls := s.Links(); len(ls) > 0 {
		o.key("links")
		o.dst = append(o.dst, '[')
		for i, l := range ls {
			if i > 0 {
				o.dst = append(o.dst, ',')
			}
			ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
			e := obj{dst: append(o.dst, '{')}
			e.id("traceId", ltid[:])
			e.id("spanId", lsid[:])
			e.traceState(l.SpanContext.TraceState())
			e.attrs("attributes", l.Attributes)
			e.u32("droppedAttributesCount", uint32(max(0, l.DroppedAttributeCount)))
			e.u32("flags", spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
			o.dst = append(e.dst, '}')
			if e.err != nil {
				return o.dst, e.err
			}
		}
		o.dst = append(o.dst, ']')
	}
	o.u32("droppedLinksCount", uint32(max(0, s.DroppedLinks())))
	o.key("status")
	st := obj{dst: append(o.dst, '{')}
	switch status := s.Status(); status.Code {
	case codes.Error:
		st.str("message", status.Description)
		st.u32("code", uint32(tracepb.Status_STATUS_CODE_ERROR))
	case codes.Ok:
		st.u32("code", uint32(tracepb.Status_STATUS_CODE_OK))
	}
	o.dst = append(st.dst, '}')
	if o.err == nil {
		o.err = st.err
	}
	return append(o.dst, '}'), o.err
}

// appendAttrsField appends `"k":[KeyValue...]` (after a comma if comma),
// or nothing for no attributes.
func appendAttrsField(dst []byte, k string, kvs []attribute.KeyValue, comma bool) ([]byte, error) {
	if len(kvs) == 0 {
		return dst, nil
	}
	if comma {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = append(dst, k...)
	dst = append(dst, `":[`...)
	var err error
	for i, kv := range kvs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '{')
		if kv.Key != "" {
			dst = append(dst, `"key":`...)
			if dst, err = appendString(dst, string(kv.Key)); err != nil {
				return dst, err
			}
			dst = append(dst, ',')
		}
		dst = append(dst, `"value":`...)
		if dst, err = appendValue(dst, kv.Value); err != nil {
			return dst, err
		}
		dst = append(dst, '}')
	}
	return append(dst, ']'), nil
}

// appendValue appends an AnyValue as anyValue builds it.
func appendValue(dst []byte, v attribute.Value) ([]byte, error) {
	var err error
	switch v.Type() {
	case attribute.BOOL:
		dst = appendBool(append(dst, `{"boolValue":`...), v.AsBool())
	case attribute.INT64:
		dst = appendInt(append(dst, `{"intValue":`...), v.AsInt64())
	case attribute.FLOAT64:
		dst = appendFloat(append(dst, `{"doubleValue":`...), v.AsFloat64())
	case attribute.STRING:
		dst, err = appendString(append(dst, `{"stringValue":`...), v.AsString())
	case attribute.BOOLSLICE:
		return appendArray(dst, v.AsBoolSlice(), func(dst []byte, x bool) ([]byte, error) {
			return appendBool(append(dst, `{"boolValue":`...), x), nil
		})
	case attribute.INT64SLICE:
		return appendArray(dst, v.AsInt64Slice(), func(dst []byte, x int64) ([]byte, error) {
			return appendInt(append(dst, `{"intValue":`...), x), nil
		})
	case attribute.FLOAT64SLICE:
		return appendArray(dst, v.AsFloat64Slice(), func(dst []byte, x float64) ([]byte, error) {
			return appendFloat(append(dst, `{"doubleValue":`...), x), nil
		})
	case attribute.STRINGSLICE:
		return appendArray(dst, v.AsStringSlice(), func(dst []byte, x string) ([]byte, error) {
			return appendString(append(dst, `{"stringValue":`...), x)
		})
	default:
		dst, err = appendString(append(dst, `{"stringValue":`...), v.String())
	}
	return append(dst, '}'), err
}

// appendArray appends an ArrayValue of elements each closed by a '}' after
// elem; an empty array has no values field.
func appendArray[T any](dst []byte, xs []T, elem func([]byte, T) ([]byte, error)) ([]byte, error) {
	dst = append(dst, `{"arrayValue":{`...)
	if len(xs) > 0 {
		dst = append(dst, `"values":[`...)
		var err error
		for i, x := range xs {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = elem(dst, x); err != nil {
				return dst, err
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, "}}"...), nil
}

func appendBool(dst []byte, b bool) []byte {
	if b {
		return append(dst, "true"...)
	}
	return append(dst, "false"...)
}

// appendInt appends an int64 as proto3 JSON does: a quoted string.
func appendInt(dst []byte, n int64) []byte {
	dst = append(dst, '"')
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, '"')
}

// appendFloat is protojson's number format: encoding/json's for finite
// values, quoted names for the others.
func appendFloat(dst []byte, n float64) []byte {
	switch {
	case math.IsNaN(n):
		return append(dst, `"NaN"`...)
	case math.IsInf(n, +1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(n, -1):
		return append(dst, `"-Infinity"`...)
	}
	return jsonnum.AppendFloat(dst, n)
}

// appendString is protojson's string escaping: only '"', '\\' and control
// characters are escaped (the common ones by letter); invalid UTF-8 is an
// error.
func appendString(dst []byte, s string) ([]byte, error) {
	dst, err := appendStringBody(append(dst, '"'), s)
	return append(dst, '"'), err
}

// appendStringBody is appendString without the quotes.
func appendStringBody(dst []byte, s string) ([]byte, error) {
	for len(s) > 0 {
		// Every key and most values of a span are plain: copied a word
		// at a time (byte by byte this loop was ~4 % of a replay with
		// --traces.file).
		i := jsonplain.Prefix(s)
		dst, s = append(dst, s[:i]...), s[i:]
		if len(s) == 0 {
			break
		}
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			return dst, errInvalidUTF8
		case r < ' ' || r == '"' || r == '\\':
			dst = append(dst, '\\')
			switch r {
			case '"', '\\':
				dst = append(dst, byte(r))
			case '\b':
				dst = append(dst, 'b')
			case '\f':
				dst = append(dst, 'f')
			case '\n':
				dst = append(dst, 'n')
			case '\r':
				dst = append(dst, 'r')
			case '\t':
				dst = append(dst, 't')
			default:
				dst = append(dst, 'u')
				dst = append(dst, "0000"[1+(bits.Len32(uint32(r))-1)/4:]...)
				dst = strconv.AppendUint(dst, uint64(r), 16)
			}
		default:
			dst = append(dst, s[:n]...)
		}
		s = s[n:]
	}
	return dst, nil
}
