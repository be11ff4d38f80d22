package egress

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// reference is the traces file's encoding before AppendRequest: the
// protobuf request through protojson and the id rewrite.
func reference(spans []sdktrace.ReadOnlySpan) ([]byte, error) {
	return MarshalRequest(Request(spans))
}

// checkSame fails unless AppendRequest writes exactly the reference's bytes,
// or both refuse the spans.
func checkSame(t *testing.T, spans []sdktrace.ReadOnlySpan) {
	t.Helper()
	want, werr := reference(spans)
	got, gerr := AppendRequest([]byte("prefix kept:"), spans)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("errors differ: reference %v, AppendRequest %v", werr, gerr)
	}
	if werr != nil {
		return
	}
	got, ok := bytes.CutPrefix(got, []byte("prefix kept:"))
	if !ok {
		t.Fatalf("dst's bytes were not kept: %.40q", got)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Fatalf("bytes differ at %d:\n got …%s\nwant …%s", i, clip(got, i), clip(want, i))
	}
}

func clip(b []byte, i int) string {
	lo, hi := max(0, i-60), min(len(b), i+60)
	return string(b[lo:hi])
}

var (
	resA = resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
		attribute.String("service.name", "cbc-otel"), attribute.Int("pid", 42))
	resB     = resource.NewSchemaless(attribute.Bool("b", true))
	resEmpty = resource.Empty()
	scopeA   = instrumentation.Scope{Name: "github.com/cbc-otel/cbc-otel/traces", Version: "1.2.3"}
	scopeB   = instrumentation.Scope{Name: "b", SchemaURL: "https://example.com/s", Attributes: attribute.NewSet(attribute.String("k", "v"))}
	scopeNil = instrumentation.Scope{}
)

// edgeStrings are strings every escaping rule and the UTF-8 check meet.
var edgeStrings = []string{
	"", "plain", `quote " and \ backslash`, "ctl \x00\x01\x07\b\f\n\r\t\x1f\x7f", "é 世界 🎉", "\u2028\u2029 <>&",
	"\ufffd literal replacement", "bad \xff utf8", "cut \xe4\xb8", `"traceId":"AAAA"`, "/", strings.Repeat("x", 300),
}

// edgeFloats cover protojson's number formats.
var edgeFloats = []float64{0, math.Copysign(0, -1), 1, -1.5, 0.1, 1e-6, 9.99e-7, 1e-7, 1e20, 1e21, 123456789.125, math.MaxFloat64,
	math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1), math.Inf(-1)}

func randString(r *rand.Rand) string {
	if r.IntN(3) == 0 {
		return edgeStrings[r.IntN(len(edgeStrings))]
	}
	const alphabet = "abc xyz_.-/\"\\\n\té世🎉\x01"
	rs := []rune(alphabet)
	var sb strings.Builder
	for range r.IntN(12) {
		sb.WriteRune(rs[r.IntN(len(rs))])
	}
	return sb.String()
}

func randValue(r *rand.Rand, k string) attribute.KeyValue {
	switch r.IntN(9) {
	case 0:
		return attribute.Bool(k, r.IntN(2) == 0)
	case 1:
		return attribute.Int64(k, []int64{0, -1, 1, math.MaxInt64, math.MinInt64, r.Int64()}[r.IntN(6)])
	case 2:
		return attribute.Float64(k, edgeFloats[r.IntN(len(edgeFloats))])
	case 3:
		return attribute.BoolSlice(k, []bool{true, false, true}[:r.IntN(4)])
	case 4:
		return attribute.Int64Slice(k, []int64{7, -8, 0}[:r.IntN(4)])
	case 5:
		return attribute.Float64Slice(k, []float64{edgeFloats[r.IntN(len(edgeFloats))], 2.5}[:r.IntN(3)])
	case 6:
		return attribute.StringSlice(k, []string{randString(r), randString(r)}[:r.IntN(3)])
	default:
		return attribute.String(k, randString(r))
	}
}

func randAttrs(r *rand.Rand) []attribute.KeyValue {
	var kvs []attribute.KeyValue
	for range r.IntN(5) {
		kvs = append(kvs, randValue(r, randString(r)))
	}
	return kvs
}

func randSpanContext(r *rand.Rand) trace.SpanContext {
	var tid trace.TraceID
	var sid trace.SpanID
	if r.IntN(8) != 0 { // sometimes all zero: invalid, still written
		for i := range tid {
			tid[i] = byte(r.IntN(256))
		}
		for i := range sid {
			sid[i] = byte(r.IntN(256))
		}
	}
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(r.IntN(2)), Remote: r.IntN(2) == 0}
	if r.IntN(3) == 0 {
		ts, err := trace.ParseTraceState("vendor=x" + fmt.Sprint(r.IntN(9)) + ",o=1")
		if err == nil {
			cfg.TraceState = ts
		}
	}
	return trace.NewSpanContext(cfg)
}

func randTime(r *rand.Rand) time.Time {
	switch r.IntN(4) {
	case 0:
		return time.Time{} // before 1970: written as 0, left out
	case 1:
		return time.Unix(0, 0)
	}
	return time.Unix(0, r.Int64N(math.MaxInt64))
}

func randSpan(r *rand.Rand) sdktrace.ReadOnlySpan {
	st := tracetest.SpanStub{
		Name:                 randString(r),
		SpanContext:          randSpanContext(r),
		SpanKind:             trace.SpanKind(r.IntN(7)),
		StartTime:            randTime(r),
		EndTime:              randTime(r),
		Attributes:           randAttrs(r),
		DroppedAttributes:    r.IntN(3),
		DroppedEvents:        r.IntN(3),
		DroppedLinks:         r.IntN(3),
		ChildSpanCount:       r.IntN(3),
		Resource:             []*resource.Resource{resA, resB, resEmpty, nil}[r.IntN(4)],
		InstrumentationScope: []instrumentation.Scope{scopeA, scopeB, scopeNil}[r.IntN(3)],
		Status:               sdktrace.Status{Code: codes.Code(r.IntN(3)), Description: randString(r)},
	}
	if r.IntN(2) == 0 {
		st.Parent = randSpanContext(r)
	}
	for range r.IntN(3) {
		st.Events = append(st.Events, sdktrace.Event{Name: randString(r), Attributes: randAttrs(r), DroppedAttributeCount: r.IntN(2), Time: randTime(r)})
	}
	for range r.IntN(3) {
		st.Links = append(st.Links, sdktrace.Link{SpanContext: randSpanContext(r), Attributes: randAttrs(r), DroppedAttributeCount: r.IntN(2)})
	}
	return st.Snapshot()
}

// TestAppendRequestMatchesReference: for any spans (every attribute type,
// escaping, number format, optional field, resource and scope grouping)
// the traces file's bytes are those of the protojson path, and whatever
// that path refuses (invalid UTF-8) AppendRequest refuses too.
func TestAppendRequestMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 2))
	refused := 0
	for i := range 3000 {
		spans := make([]sdktrace.ReadOnlySpan, 1+r.IntN(6))
		for j := range spans {
			spans[j] = randSpan(r)
		}
		if _, err := reference(spans); err != nil {
			refused++
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { checkSame(t, spans) })
		if t.Failed() {
			return
		}
	}
	if refused == 0 || refused == 3000 {
		t.Errorf("%d of 3000 batches refused: the invalid-UTF-8 path or the normal one went untested", refused)
	}
}

// TestAppendRequestEdges names the cases one by one.
func TestAppendRequestEdges(t *testing.T) {
	base := tracetest.SpanStub{SpanContext: randSpanContext(rand.New(rand.NewPCG(1, 1))), Resource: resA, InstrumentationScope: scopeA}
	with := func(f func(*tracetest.SpanStub)) []sdktrace.ReadOnlySpan {
		s := base
		f(&s)
		return []sdktrace.ReadOnlySpan{s.Snapshot()}
	}
	cases := map[string][]sdktrace.ReadOnlySpan{
		"bare span":        with(func(*tracetest.SpanStub) {}),
		"nil resource":     with(func(s *tracetest.SpanStub) { s.Resource = nil }),
		"empty scope":      with(func(s *tracetest.SpanStub) { s.InstrumentationScope = scopeNil }),
		"scope attributes": with(func(s *tracetest.SpanStub) { s.InstrumentationScope = scopeB }),
		"empty key":        with(func(s *tracetest.SpanStub) { s.Attributes = []attribute.KeyValue{attribute.String("", "")} }),
		"empty slices": with(func(s *tracetest.SpanStub) {
			s.Attributes = []attribute.KeyValue{attribute.StringSlice("s", nil), attribute.BoolSlice("b", nil)}
		}),
		"ok status":          with(func(s *tracetest.SpanStub) { s.Status = sdktrace.Status{Code: codes.Ok} }),
		"error no message":   with(func(s *tracetest.SpanStub) { s.Status = sdktrace.Status{Code: codes.Error} }),
		"error with message": with(func(s *tracetest.SpanStub) { s.Status = sdktrace.Status{Code: codes.Error, Description: "boom\n\"x\""} }),
		"empty event":        with(func(s *tracetest.SpanStub) { s.Events = []sdktrace.Event{{}} }),
		"bare link":          with(func(s *tracetest.SpanStub) { s.Links = []sdktrace.Link{{}} }),
		"invalid utf8 name":  with(func(s *tracetest.SpanStub) { s.Name = "\xff" }),
		"invalid utf8 key":   with(func(s *tracetest.SpanStub) { s.Attributes = []attribute.KeyValue{attribute.Int("\xc3", 1)} }),
	}
	for i, f := range edgeFloats {
		cases[fmt.Sprint("float ", i)] = with(func(s *tracetest.SpanStub) { s.Attributes = []attribute.KeyValue{attribute.Float64("f", f)} })
	}
	for i, str := range edgeStrings {
		cases[fmt.Sprint("string ", i)] = with(func(s *tracetest.SpanStub) {
			s.Name = str
			s.Attributes = []attribute.KeyValue{attribute.String(str, str)}
		})
	}
	for name, spans := range cases {
		t.Run(name, func(t *testing.T) { checkSame(t, spans) })
	}
}

// FuzzAppendRequest: any name, attribute string, integer and float give
// the reference's bytes.
func FuzzAppendRequest(f *testing.F) {
	for i, s := range edgeStrings {
		f.Add(s, s, int64(i), edgeFloats[i%len(edgeFloats)], uint64(i))
	}
	f.Fuzz(func(t *testing.T, name, val string, n int64, x float64, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 0))
		s := tracetest.SpanStub{
			Name: name, SpanContext: randSpanContext(r), Parent: randSpanContext(r), Resource: resA, InstrumentationScope: scopeA,
			StartTime:  time.Unix(0, n),
			Attributes: []attribute.KeyValue{attribute.String(val, name), attribute.Int64("n", n), attribute.Float64("x", x), attribute.StringSlice(name, []string{val})},
			Events:     []sdktrace.Event{{Name: val, Time: time.Unix(0, n), Attributes: []attribute.KeyValue{attribute.Float64Slice("x", []float64{x})}}},
			Status:     sdktrace.Status{Code: codes.Error, Description: val},
		}
		checkSame(t, []sdktrace.ReadOnlySpan{s.Snapshot(), randSpan(r)})
	})
}

// TestExporterLineMatchesReference: the file exporter's lines are the
// reference's, batch after batch through the reused buffer, and a refused
// batch leaves no partial line behind.
func TestExporterLineMatchesReference(t *testing.T) {
	var out bytes.Buffer
	e := newWriterExporter(&out)
	r := rand.New(rand.NewPCG(7, 7))
	var want bytes.Buffer
	for range 50 {
		spans := []sdktrace.ReadOnlySpan{randSpan(r), randSpan(r), randSpan(r)}
		b, werr := reference(spans)
		err := e.ExportSpans(context.Background(), spans)
		if (err != nil) != (werr != nil) {
			t.Fatalf("exporter error %v, reference %v", err, werr)
		}
		if werr == nil {
			want.Write(b)
			want.WriteByte('\n')
		}
	}
	if !bytes.Equal(out.Bytes(), want.Bytes()) {
		t.Fatalf("exporter wrote %d bytes, reference %d, not the same", out.Len(), want.Len())
	}
}

// benchSpans is a batch like serve's: task spans with a dozen attributes.
func benchSpans(n int) []sdktrace.ReadOnlySpan {
	r := rand.New(rand.NewPCG(9, 9))
	spans := make([]sdktrace.ReadOnlySpan, n)
	for i := range spans {
		s := tracetest.SpanStub{
			Name: "task tool_use", SpanContext: randSpanContext(r), Parent: randSpanContext(r), SpanKind: trace.SpanKindInternal,
			StartTime: time.Unix(1700000000, int64(i)), EndTime: time.Unix(1700000001, int64(i)), Resource: resA, InstrumentationScope: scopeA,
			Attributes: []attribute.KeyValue{
				attribute.String("cbc.session.id", "0b7c5a1e-3f0e-4c1b-9d55-6f2a1e0d9c11"), attribute.String("cbc.task.id", fmt.Sprint("task-", i)),
				attribute.String("cbc.task.description", "Run the test suite and fix failures"), attribute.String("cbc.task.status", "completed"),
				attribute.Int64("cbc.task.tokens.input", 12345), attribute.Int64("cbc.task.tokens.output", 678), attribute.Float64("cbc.task.cost.usd", 0.0123),
				attribute.Int64("cbc.task.tool_uses", 7), attribute.String("cbc.agent", "general-purpose"), attribute.Bool("cbc.task.nested", false),
			},
			Status: sdktrace.Status{Code: codes.Ok},
		}
		spans[i] = s.Snapshot()
	}
	return spans
}

// BenchmarkTracesFileEncode compares the traces file's encoding with the
// protojson path it replaced, per span.
func BenchmarkTracesFileEncode(b *testing.B) {
	spans := benchSpans(512)
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = AppendRequest(buf[:0], spans); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans)), "ns/span")
	})
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reference(spans); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans)), "ns/span")
	})
}

// TestAppendRequestAllocations: once the buffer has grown, a batch costs
// no allocation per span (a trace state's text was one, through
// TraceState.String); only the scope's attribute set is copied, once per
// scope.
func TestAppendRequestAllocations(t *testing.T) {
	spans := benchSpans(64)
	buf, err := AppendRequest(nil, spans)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(50, func() { buf, _ = AppendRequest(buf[:0], spans) }); n > 1 {
		t.Errorf("%v allocations per batch of %d spans, want ≤ 1", n, len(spans))
	}
}
