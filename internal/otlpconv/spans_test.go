package otlpconv

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/cbc-otel/cbc-otel/clitelemetry"
	"github.com/cbc-otel/cbc-otel/internal/clicorpus"
)

// canonJSON renders an OTLP/JSON AnyValue (generic) in a form canonAttr
// renders attribute.Values in.
func canonJSON(v any) string {
	m, _ := v.(map[string]any)
	switch {
	case m == nil:
		return "empty"
	case m["stringValue"] != nil:
		return "s:" + m["stringValue"].(string)
	case m["boolValue"] != nil:
		return fmt.Sprint("b:", m["boolValue"])
	case m["intValue"] != nil:
		return "i:" + clicorpus.Str(m, "intValue")
	case m["doubleValue"] != nil:
		f, _ := strconv.ParseFloat(clicorpus.Str(m, "doubleValue"), 64)
		return "d:" + strconv.FormatFloat(f, 'g', -1, 64)
	case m["arrayValue"] != nil:
		var parts []string
		for _, e := range clicorpus.List(m["arrayValue"], "values") {
			parts = append(parts, canonJSON(e))
		}
		return "a:[" + strings.Join(parts, ",") + "]"
	case m["kvlistValue"] != nil:
		var parts []string
		for _, e := range clicorpus.List(m["kvlistValue"], "values") {
			parts = append(parts, clicorpus.Str(e, "key")+"="+canonJSON(clicorpus.Obj(e, "value")))
		}
		sort.Strings(parts)
		return "m:{" + strings.Join(parts, ",") + "}"
	}
	return "empty"
}

func canonAttr(v attribute.Value) string {
	switch v.Type() {
	case attribute.STRING:
		return "s:" + v.AsString()
	case attribute.BOOL:
		return fmt.Sprint("b:", v.AsBool())
	case attribute.INT64:
		return fmt.Sprint("i:", v.AsInt64())
	case attribute.FLOAT64:
		return "d:" + strconv.FormatFloat(v.AsFloat64(), 'g', -1, 64)
	case attribute.STRINGSLICE, attribute.BOOLSLICE, attribute.INT64SLICE, attribute.FLOAT64SLICE, attribute.SLICE:
		var parts []string
		switch v.Type() {
		case attribute.STRINGSLICE:
			for _, e := range v.AsStringSlice() {
				parts = append(parts, canonAttr(attribute.StringValue(e)))
			}
		case attribute.BOOLSLICE:
			for _, e := range v.AsBoolSlice() {
				parts = append(parts, canonAttr(attribute.BoolValue(e)))
			}
		case attribute.INT64SLICE:
			for _, e := range v.AsInt64Slice() {
				parts = append(parts, canonAttr(attribute.Int64Value(e)))
			}
		case attribute.FLOAT64SLICE:
			for _, e := range v.AsFloat64Slice() {
				parts = append(parts, canonAttr(attribute.Float64Value(e)))
			}
		default:
			for _, e := range v.AsSlice() {
				parts = append(parts, canonAttr(e))
			}
		}
		return "a:[" + strings.Join(parts, ",") + "]"
	case attribute.MAP:
		var parts []string
		for _, kv := range v.AsMap() {
			parts = append(parts, string(kv.Key)+"="+canonAttr(kv.Value))
		}
		sort.Strings(parts)
		return "m:{" + strings.Join(parts, ",") + "}"
	}
	return "empty"
}

func canonJSONAttrs(kvs []any) string {
	var parts []string
	for _, kv := range kvs {
		parts = append(parts, clicorpus.Str(kv, "key")+"="+canonJSON(clicorpus.Obj(kv, "value")))
	}
	return strings.Join(parts, ";")
}

func canonAttrs(kvs []attribute.KeyValue) string {
	var parts []string
	for _, kv := range kvs {
		parts = append(parts, string(kv.Key)+"="+canonAttr(kv.Value))
	}
	return strings.Join(parts, ";")
}

// TestReadOnlySpansCorpus converts every recorded span and compares each
// field with the JSON.
func TestReadOnlySpansCorpus(t *testing.T) {
	total := 0
	for _, l := range clicorpus.Load(t) {
		if l.Path != "/v1/traces" {
			continue
		}
		req, err := clitelemetry.DecodeTraces(l.Body, clitelemetry.JSON)
		if err != nil {
			t.Fatal(err)
		}
		got := ReadOnlySpans(req.GetResourceSpans())
		g := clicorpus.Generic(t, l.Body)
		i := 0
		for _, rs := range clicorpus.List(g, "resourceSpans") {
			wantRes := canonJSONAttrs(clicorpus.List(clicorpus.Obj(rs, "resource"), "attributes"))
			for _, ss := range clicorpus.List(rs, "scopeSpans") {
				scope := clicorpus.Obj(ss, "scope")
				for _, js := range clicorpus.List(ss, "spans") {
					if i >= len(got) {
						t.Fatalf("%s: %d spans converted, want more", l.Name, len(got))
					}
					s := got[i]
					i++
					name := l.Name + "/" + clicorpus.Str(js, "spanId")
					check := func(field string, got, want any) {
						t.Helper()
						if fmt.Sprint(got) != fmt.Sprint(want) {
							t.Errorf("%s %s: got %v, want %v", name, field, got, want)
						}
					}
					check("resource", canonAttrs(s.Resource().Attributes()), wantRes)
					check("scope", s.InstrumentationScope().Name+"@"+s.InstrumentationScope().Version, clicorpus.Str(scope, "name")+"@"+clicorpus.Str(scope, "version"))
					check("name", s.Name(), clicorpus.Str(js, "name"))
					check("trace id", s.SpanContext().TraceID().String(), clicorpus.Str(js, "traceId"))
					check("span id", s.SpanContext().SpanID().String(), clicorpus.Str(js, "spanId"))
					wantParent := clicorpus.Str(js, "parentSpanId")
					if wantParent == "" {
						check("parent", s.Parent().IsValid(), false)
					} else {
						check("parent", s.Parent().SpanID().String(), wantParent)
						check("parent trace", s.Parent().TraceID().String(), clicorpus.Str(js, "traceId"))
						check("parent remote", s.Parent().IsRemote(), clicorpus.Num(js, "flags")&0x300 == 0x300)
					}
					check("flags", int64(s.SpanContext().TraceFlags()), clicorpus.Num(js, "flags")&0xff)
					check("kind", int64(s.SpanKind()), clicorpus.Num(js, "kind")) // INTERNAL..CONSUMER share 1..5
					check("start", s.StartTime().UnixNano(), clicorpus.Num(js, "startTimeUnixNano"))
					check("end", s.EndTime().UnixNano(), clicorpus.Num(js, "endTimeUnixNano"))
					check("attributes", canonAttrs(s.Attributes()), canonJSONAttrs(clicorpus.List(js, "attributes")))
					check("dropped attributes", int64(s.DroppedAttributes()), clicorpus.Num(js, "droppedAttributesCount"))
					check("dropped events", int64(s.DroppedEvents()), clicorpus.Num(js, "droppedEventsCount"))
					check("dropped links", int64(s.DroppedLinks()), clicorpus.Num(js, "droppedLinksCount"))
					wantCode := map[int64]codes.Code{0: codes.Unset, 1: codes.Ok, 2: codes.Error}[clicorpus.Num(clicorpus.Obj(js, "status"), "code")]
					check("status", s.Status().Code, wantCode)
					check("status message", s.Status().Description, clicorpus.Str(clicorpus.Obj(js, "status"), "message"))
					check("events", len(s.Events()), len(clicorpus.List(js, "events")))
					for k, je := range clicorpus.List(js, "events") {
						if k >= len(s.Events()) {
							break
						}
						e := s.Events()[k]
						check("event name", e.Name, clicorpus.Str(je, "name"))
						check("event time", e.Time.UnixNano(), clicorpus.Num(je, "timeUnixNano"))
						check("event attributes", canonAttrs(e.Attributes), canonJSONAttrs(clicorpus.List(je, "attributes")))
						check("event dropped", int64(e.DroppedAttributeCount), clicorpus.Num(je, "droppedAttributesCount"))
					}
					check("links", len(s.Links()), len(clicorpus.List(js, "links")))
					total++
				}
			}
		}
		if i != len(got) {
			t.Errorf("%s: %d spans converted, want %d", l.Name, len(got), i)
		}
	}
	if total == 0 {
		t.Fatal("no spans in the corpus")
	}
}

// TestReadOnlySpansFields covers what the corpus lacks: links, trace
// state, error status, every value type, remote and local parents, kinds,
// dropped counts, invalid spans.
func TestReadOnlySpansFields(t *testing.T) {
	tid := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	sid := []byte{1, 1, 1, 1, 1, 1, 1, 2}
	pid := []byte{1, 1, 1, 1, 1, 1, 1, 3}
	lsid := []byte{9, 9, 9, 9, 9, 9, 9, 9}
	sv := func(s string) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
	}
	iv := func(i int64) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: i}}
	}
	arr := func(vs ...*commonpb.AnyValue) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}
	}
	attrs := []*commonpb.KeyValue{
		{Key: "s", Value: sv("x")},
		{Key: "b", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: true}}},
		{Key: "i", Value: iv(-7)},
		{Key: "d", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 1.5}}},
		{Key: "bytes", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0, 1}}}},
		{Key: "strs", Value: arr(sv("a"), sv("b"))},
		{Key: "ints", Value: arr(iv(1), iv(2))},
		{Key: "mixed", Value: arr(sv("a"), iv(2))},
		{Key: "empty", Value: arr()},
		{Key: "map", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: []*commonpb.KeyValue{{Key: "k", Value: sv("v")}}}}}},
		{Key: "unset", Value: nil},
	}
	rs := []*tracepb.ResourceSpans{{
		Resource:  &resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name", Value: sv("claude-code")}}},
		SchemaUrl: "https://opentelemetry.io/schemas/1.26.0",
		ScopeSpans: []*tracepb.ScopeSpans{{
			Scope: &commonpb.InstrumentationScope{Name: "sc", Version: "1", Attributes: []*commonpb.KeyValue{{Key: "a", Value: sv("b")}}},
			Spans: []*tracepb.Span{
				{
					TraceId: tid, SpanId: sid, ParentSpanId: pid, TraceState: "k=v", Flags: 0x301,
					Name: "full", Kind: tracepb.Span_SPAN_KIND_CLIENT, StartTimeUnixNano: 10, EndTimeUnixNano: 20,
					Attributes: attrs, DroppedAttributesCount: 1, DroppedEventsCount: 2, DroppedLinksCount: 3,
					Events: []*tracepb.Span_Event{{Name: "e", TimeUnixNano: 15, Attributes: attrs[:1], DroppedAttributesCount: 4}},
					Links:  []*tracepb.Span_Link{{TraceId: tid, SpanId: lsid, TraceState: "l=w", Flags: 0x301, Attributes: attrs[2:3], DroppedAttributesCount: 5}},
					Status: &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "boom"},
				},
				{TraceId: tid, SpanId: lsid, ParentSpanId: sid, Flags: 0x100, Name: "local parent, no sampled flag", Kind: tracepb.Span_SPAN_KIND_SERVER,
					Status: &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK, Message: "ignored"}},
				{TraceId: make([]byte, 16), SpanId: sid, Name: "zero trace id: skipped"},
				{TraceId: tid, Name: "no span id: skipped"},
			},
		}},
	}}
	got := ReadOnlySpans(rs)
	if len(got) != 2 {
		t.Fatalf("%d spans, want 2", len(got))
	}
	scopeAttrs := got[0].InstrumentationScope().Attributes
	s := got[0]
	for _, c := range []struct {
		field     string
		got, want any
	}{
		{"name", s.Name(), "full"},
		{"trace id", s.SpanContext().TraceID(), trace.TraceID(tid)},
		{"trace state", s.SpanContext().TraceState().String(), "k=v"},
		{"sampled", s.SpanContext().IsSampled(), true},
		{"parent", s.Parent().SpanID(), trace.SpanID(pid)},
		{"parent remote", s.Parent().IsRemote(), true},
		{"kind", s.SpanKind(), trace.SpanKindClient},
		{"start", s.StartTime().UnixNano(), int64(10)},
		{"end", s.EndTime().UnixNano(), int64(20)},
		{"attributes", canonAttrs(s.Attributes()), "s=s:x;b=b:true;i=i:-7;d=d:1.5;bytes=empty;strs=a:[s:a,s:b];ints=a:[i:1,i:2];mixed=a:[s:a,i:2];empty=a:[];map=m:{k=s:v};unset=empty"},
		{"bytes", s.Attributes()[4].Value.AsByteSlice(), []byte{0, 1}},
		{"typed string slice", s.Attributes()[5].Value.Type(), attribute.STRINGSLICE},
		{"dropped", [3]int{s.DroppedAttributes(), s.DroppedEvents(), s.DroppedLinks()}, [3]int{1, 2, 3}},
		{"event", fmt.Sprint(s.Events()[0].Name, s.Events()[0].Time.UnixNano(), canonAttrs(s.Events()[0].Attributes), s.Events()[0].DroppedAttributeCount), "e15s=s:x4"},
		{"link", fmt.Sprint(s.Links()[0].SpanContext.SpanID(), s.Links()[0].SpanContext.TraceState().String(), s.Links()[0].SpanContext.IsRemote(), canonAttrs(s.Links()[0].Attributes), s.Links()[0].DroppedAttributeCount), "0909090909090909l=wtruei=i:-75"},
		{"status", s.Status().Code, codes.Error},
		{"status message", s.Status().Description, "boom"},
		{"resource", canonAttrs(s.Resource().Attributes()), "service.name=s:claude-code"},
		{"resource schema", s.Resource().SchemaURL(), "https://opentelemetry.io/schemas/1.26.0"},
		{"scope", fmt.Sprint(s.InstrumentationScope().Name, s.InstrumentationScope().Version, canonAttrs(scopeAttrs.ToSlice())), "sc1a=s:b"},
		{"2: parent local", got[1].Parent().IsRemote(), false},
		{"2: sampled without flags", got[1].SpanContext().IsSampled(), true},
		{"2: ok status", got[1].Status(), struct {
			Code        codes.Code
			Description string
		}{codes.Ok, ""}},
		{"2: kind", got[1].SpanKind(), trace.SpanKindServer},
	} {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s: got %v, want %v", c.field, c.got, c.want)
		}
	}
	b, _ := json.Marshal(s.Attributes()[9].Value)
	if !strings.Contains(string(b), `"k"`) {
		t.Errorf("map attribute %s", b)
	}
}
