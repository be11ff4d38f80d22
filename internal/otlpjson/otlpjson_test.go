package otlpjson

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func sample() *coltracepb.ExportTraceServiceRequest {
	return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
		TraceId: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, SpanId: []byte{0xa, 0xb, 0xc, 0xd, 0xe, 0xf, 0, 1},
		ParentSpanId: []byte{8, 7, 6, 5, 4, 3, 2, 1}, Name: "s", Kind: tracepb.Span_SPAN_KIND_INTERNAL,
		StartTimeUnixNano: 1796205994000123456, // beyond 2^53: kept as written
		Attributes:        []*commonpb.KeyValue{{Key: "n", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 1 << 60}}}},
		Links:             []*tracepb.Span_Link{{TraceId: make([]byte, 16), SpanId: []byte{1, 1, 1, 1, 1, 1, 1, 1}}},
	}}}}}}}
}

// TestRoundTrip: Marshal writes hex ids, enums as numbers and stable
// output; Unmarshal reads it back to the same message.
func TestRoundTrip(t *testing.T) {
	m := sample()
	b, err := Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"traceId":"0102030405060708090a0b0c0d0e0f10"`, `"spanId":"0a0b0c0d0e0f0001"`, `"parentSpanId":"0807060504030201"`,
		`"kind":1`, `"startTimeUnixNano":"1796205994000123456"`, `"intValue":"1152921504606846976"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	again, _ := Marshal(m)
	if string(again) != string(b) {
		t.Error("output not stable")
	}
	var back coltracepb.ExportTraceServiceRequest
	if err := Unmarshal(b, &back, protojson.UnmarshalOptions{}); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(m, &back) {
		t.Errorf("round trip changed the message:\n%v\n%v", m, &back)
	}
}

// TestUnmarshalRejects: ids of the wrong length, not hex or not strings are
// ErrBadID; an empty id is absent; anything after the document, or a
// document that is not JSON, is an error.
func TestUnmarshalRejects(t *testing.T) {
	span := func(ids string) string {
		return `{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"s"` + ids + `}]}]}]}`
	}
	for _, c := range []struct {
		name, doc string
		badID     bool
		ok        bool
	}{
		{"good", span(`,"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0a0b0c0d0e0f0001"`), false, true},
		{"snake_case names", span(`,"trace_id":"0102030405060708090a0b0c0d0e0f10","span_id":"0a0b0c0d0e0f0001"`), false, true},
		{"empty ids are absent", span(`,"traceId":"","parentSpanId":""`), false, true},
		{"short trace id", span(`,"traceId":"0102"`), true, false},
		{"span id of 16 bytes", span(`,"spanId":"0102030405060708090a0b0c0d0e0f10"`), true, false},
		{"base64, not hex", span(`,"traceId":"AQIDBAUGBwgJCgsMDQ4PEA=="`), true, false},
		{"a number", span(`,"spanId":7`), true, false},
		{"trailing data", span("") + `{}`, false, false},
		{"not JSON", `{"resourceSpans":`, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Unmarshal([]byte(c.doc), &coltracepb.ExportTraceServiceRequest{}, protojson.UnmarshalOptions{})
			if (err == nil) != c.ok || errors.Is(err, ErrBadID) != c.badID {
				t.Errorf("err %v; want ok %v, bad id %v", err, c.ok, c.badID)
			}
		})
	}
}

// FuzzUnmarshal: any input is decoded or refused without a panic; what is
// decoded encodes and decodes back to the same message.
func FuzzUnmarshal(f *testing.F) {
	b, _ := Marshal(sample())
	f.Add(b)
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"","spanId":"00"}]}]}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var m coltracepb.ExportTraceServiceRequest
		if Unmarshal(in, &m, protojson.UnmarshalOptions{DiscardUnknown: true}) != nil {
			return
		}
		out, err := Marshal(&m)
		if err != nil {
			t.Fatalf("a decoded message does not encode: %v", err)
		}
		var back coltracepb.ExportTraceServiceRequest
		if err := Unmarshal(out, &back, protojson.UnmarshalOptions{}); err != nil {
			t.Fatalf("re-decoding %s: %v", out, err)
		}
		if !proto.Equal(&m, &back) {
			t.Fatalf("round trip changed the message")
		}
		if doc, err := document(out); err != nil || !reflect.DeepEqual(doc, referenceMarshal(t, &m)) {
			t.Fatalf("Marshal differs from the reference (%v): %s", err, out)
		}
	})
}

// referenceMarshal is Marshal as it was: protojson's output decoded into a
// generic document, its ids rewritten, encoded again. The one-pass Marshal
// must mean the same document (key order aside).
func referenceMarshal(t *testing.T, m proto.Message) any {
	t.Helper()
	b, err := marshalOpts.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := document(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := convertIDs(doc, func(_ int, s string) (string, error) {
		raw, err := base64.StdEncoding.DecodeString(s)
		return hex.EncodeToString(raw), err
	}); err != nil {
		t.Fatal(err)
	}
	return doc
}

// trickySpans holds spans whose strings look like ids' keys, carry escapes,
// non-ASCII and whitespace, beside empty and full ids and events and links.
func trickySpans(rng *rand.Rand, n int) *coltracepb.ExportTraceServiceRequest {
	texts := []string{`"traceId":"AAAA"`, `{"spanId": "x"}`, "tab\there", "new\nline", `back\slash`, "é ü 日本", "\u2028", " spaced : out ", "traceId", "", `\"`}
	id := func(k int) []byte {
		if rng.IntN(5) == 0 {
			return nil
		}
		b := make([]byte, k)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	var spans []*tracepb.Span
	for range n {
		s := &tracepb.Span{TraceId: id(16), SpanId: id(8), ParentSpanId: id(8), Name: texts[rng.IntN(len(texts))],
			Kind: tracepb.Span_SpanKind(rng.IntN(5)), StartTimeUnixNano: rng.Uint64(), EndTimeUnixNano: rng.Uint64()}
		for range rng.IntN(4) {
			s.Attributes = append(s.Attributes, &commonpb.KeyValue{Key: texts[rng.IntN(len(texts))],
				Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: texts[rng.IntN(len(texts))]}}})
		}
		for range rng.IntN(2) {
			s.Links = append(s.Links, &tracepb.Span_Link{TraceId: id(16), SpanId: id(8)})
			s.Events = append(s.Events, &tracepb.Span_Event{Name: texts[rng.IntN(len(texts))], TimeUnixNano: rng.Uint64()})
		}
		s.Status = &tracepb.Status{Code: tracepb.Status_StatusCode(rng.IntN(3)), Message: texts[rng.IntN(len(texts))]}
		spans = append(spans, s)
	}
	return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}}}
}

// TestMarshalMatchesReference: the one-pass Marshal writes compact JSON
// (no whitespace outside strings) that means what the generic re-encoding
// meant, on the sample and on 200 requests of tricky spans; and reads back
// to the message it was made from.
func TestMarshalMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 1))
	msgs := []proto.Message{sample()}
	for i := range 200 {
		msgs = append(msgs, trickySpans(rng, 1+i%7))
	}
	for i, m := range msgs {
		b, err := Marshal(m)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		got, err := document(b)
		if err != nil {
			t.Fatalf("message %d: not JSON: %v\n%s", i, err, b)
		}
		if want := referenceMarshal(t, m); !reflect.DeepEqual(got, want) {
			t.Fatalf("message %d differs from the reference:\n got %s", i, b)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, b); err != nil || compact.String() != string(b) {
			t.Fatalf("message %d: not compact (%v):\n%s", i, err, b)
		}
		back := &coltracepb.ExportTraceServiceRequest{}
		if err := Unmarshal(b, back, protojson.UnmarshalOptions{}); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !proto.Equal(m, back) {
			t.Fatalf("message %d: round trip changed it", i)
		}
	}
}
