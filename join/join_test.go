package join

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"go.opentelemetry.io/otel/trace"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
)

var (
	traceT = []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	otherT = []byte{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9}
	execID = []byte{0xee, 0, 0, 0, 0, 0, 0, 1}
)

func kvs(kv ...string) []*commonpb.KeyValue {
	var out []*commonpb.KeyValue
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, &commonpb.KeyValue{Key: kv[i], Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: kv[i+1]}}})
	}
	return out
}

func span(name string, id byte, tid, parent []byte, kv ...string) *tracepb.Span {
	return &tracepb.Span{Name: name, TraceId: tid, SpanId: []byte{id, 0, 0, 0, 0, 0, 0, 0}, ParentSpanId: parent, Attributes: kvs(kv...)}
}

func request(spans ...*tracepb.Span) *coltracepb.ExportTraceServiceRequest {
	return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}}}
}

// agentSpan is the traces sink's id scheme, stood in: the agent's index in
// the last byte, in trace traceT.
func agentSpan(_, _ string, index int) trace.SpanContext {
	var tid trace.TraceID
	copy(tid[:], traceT)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{0xa, 0, 0, 0, 0, 0, 0, byte(index)}})
}

type sent struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	calls []ingest.ModelCall
}

func (s *sent) fwd(rs []*tracepb.ResourceSpans) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rs {
		for _, ss := range r.GetScopeSpans() {
			s.spans = append(s.spans, ss.GetSpans()...)
		}
	}
}

func (s *sent) byName(name string) *tracepb.Span {
	for _, sp := range s.spans {
		if sp.GetName() == name {
			return sp
		}
	}
	return nil
}

func newJoiner(hold time.Duration, now *time.Time) (*Joiner, *sent) {
	out := new(sent)
	j := New(Options{AgentSpan: agentSpan, Spans: out.fwd, Hold: hold, Now: func() time.Time { return *now },
		Submit: func(c ingest.ModelCall) bool { out.calls = append(out.calls, c); return true }})
	return j, out
}

func named(j *Joiner, id string, index int, state ingest.AgentState) {
	r := &ingest.Run{TaskID: "w1", RunID: "r1", Workflow: true}
	j.Observe(ingest.Lifecycle{Kind: ingest.AgentStarted, Run: r, Agent: &ingest.Agent{Index: index, AgentID: id, State: state}})
}

// TestReparent covers every way a CLI span meets (or misses) its agent.
func TestReparent(t *testing.T) {
	t0 := time.Unix(1_796_000_000, 0)
	cases := []struct {
		name string
		run  func(j *Joiner, now *time.Time)
		// wantParent is the parent's first byte after the join, per span
		// name; 0 means unchanged.
		wantParent map[string]byte
		unmatched  int64
		foreign    int64
	}{
		{"named before the span", func(j *Joiner, _ *time.Time) {
			named(j, "A1", 1, ingest.AgentRunning)
			j.Traces(context.Background(), request(span("llm", 1, traceT, execID, "agent_id", "A1")))
		}, map[string]byte{"llm": 0xa}, 0, 0},
		{"span before the stream names its agent", func(j *Joiner, now *time.Time) {
			j.Traces(context.Background(), request(span("llm", 1, traceT, execID, "agent_id", "A1")))
			*now = now.Add(4 * time.Second)
			j.Expire(*now, false)
			named(j, "A1", 1, ingest.AgentRunning)
		}, map[string]byte{"llm": 0xa}, 0, 0},
		{"never named: forwarded unchanged after the hold", func(j *Joiner, now *time.Time) {
			j.Traces(context.Background(), request(span("llm", 1, traceT, execID, "agent_id", "AX")))
			*now = now.Add(5 * time.Second)
			j.Expire(*now, false)
		}, map[string]byte{"llm": 0}, 1, 0},
		{"the CLI exits: everything held goes", func(j *Joiner, _ *time.Time) {
			j.Traces(context.Background(), request(span("llm", 1, traceT, execID, "agent_id", "AX")))
			j.Expire(t0, true)
		}, map[string]byte{"llm": 0}, 1, 0},
		{"nested spans keep their parent; main spans are left alone", func(j *Joiner, _ *time.Time) {
			named(j, "A1", 1, ingest.AgentRunning)
			j.Traces(context.Background(), request(
				span("tool", 2, traceT, execID, "agent_id", "A1", "tool_name", "Bash"),
				span("nested", 3, traceT, []byte{2, 0, 0, 0, 0, 0, 0, 0}, "gen_ai.conversation.id", "A1"),
				span("main", 4, traceT, []byte{7, 0, 0, 0, 0, 0, 0, 0}, "gen_ai.conversation.id", "S1"),
			))
		}, map[string]byte{"tool": 0xa, "nested": 0, "main": 0}, 0, 0},
		{"another trace cannot be re-parented", func(j *Joiner, _ *time.Time) {
			named(j, "A1", 1, ingest.AgentRunning)
			j.Traces(context.Background(), request(span("llm", 1, otherT, execID, "agent_id", "A1")))
		}, map[string]byte{"llm": 0}, 0, 1},
		{"a cached agent does not claim its id", func(j *Joiner, now *time.Time) {
			named(j, "A1", 1, ingest.AgentCached)
			j.Traces(context.Background(), request(span("llm", 1, traceT, execID, "agent_id", "A1")))
			*now = now.Add(time.Hour)
			j.Expire(*now, false)
		}, map[string]byte{"llm": 0}, 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := t0
			j, out := newJoiner(5*time.Second, &now)
			tc.run(j, &now)
			for name, want := range tc.wantParent {
				sp := out.byName(name)
				if sp == nil {
					t.Fatalf("span %q not forwarded", name)
				}
				got := sp.GetParentSpanId()[0]
				if want == 0 {
					if len(sp.GetLinks()) != 0 {
						t.Errorf("%s: unchanged span got links", name)
					}
					if got == 0xa {
						t.Errorf("%s: re-parented, want unchanged", name)
					}
					continue
				}
				if got != want {
					t.Errorf("%s: parent %x, want %x…", name, sp.GetParentSpanId(), want)
				}
				if l := sp.GetLinks(); len(l) != 1 || string(l[0].GetSpanId()) != string(execID) || str(l[0].GetAttributes(), "cbc.link.type") != LinkCLIParent {
					t.Errorf("%s: links %v, want one to the original parent", name, l)
				}
			}
			if got := j.Stats().Unmatched.Load(); got != tc.unmatched {
				t.Errorf("unmatched = %d, want %d", got, tc.unmatched)
			}
			if got := j.Stats().Foreign.Load(); got != tc.foreign {
				t.Errorf("foreign = %d, want %d", got, tc.foreign)
			}
		})
	}
}

// TestLauncher: the Workflow tool span is what launched the run of its
// tool_use_id; other tools are not.
func TestLauncher(t *testing.T) {
	now := time.Unix(0, 0)
	j, _ := newJoiner(0, &now)
	j.Traces(context.Background(), request(
		span("claude_code.tool", 5, traceT, nil, "tool_name", "Workflow", "tool_use_id", "toolu_1"),
		span("claude_code.tool", 6, traceT, nil, "tool_name", "Bash", "tool_use_id", "toolu_2"),
	))
	sc, ok := j.Launcher("toolu_1")
	if !ok || sc.SpanID()[0] != 5 || string(sc.TraceID().String()) != trace.TraceID(traceT).String() {
		t.Fatalf("launcher of toolu_1 = %v, %v", sc, ok)
	}
	if _, ok := j.Launcher("toolu_2"); ok {
		t.Error("a Bash tool launched a workflow")
	}
}

// TestHoldIsBounded: a flood of spans for agents never named holds at most
// maxHeld; the rest go at once, counted.
func TestHoldIsBounded(t *testing.T) {
	now := time.Unix(0, 0)
	j, out := newJoiner(time.Minute, &now)
	const n = maxHeld + 500
	for i := range n {
		j.Traces(context.Background(), request(span("llm", byte(i), traceT, execID, "agent_id", "ghost")))
	}
	if len(j.held) != maxHeld || len(out.spans) != 500 || j.Stats().HeldDropped.Load() != 500 {
		t.Fatalf("held %d, sent %d, dropped %d", len(j.held), len(out.spans), j.Stats().HeldDropped.Load())
	}
	j.Expire(now, true)
	if len(out.spans) != n {
		t.Errorf("forwarded %d spans in all, want %d", len(out.spans), n)
	}
}

func num64(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func dbl(k string, v float64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}

// TestModelCalls: api_request events become model calls; other events do
// not; hostile numbers read as 0.
func TestModelCalls(t *testing.T) {
	rec := func(kv ...*commonpb.KeyValue) *logspb.LogRecord { return &logspb.LogRecord{Attributes: kv} }
	good := rec(append(kvs("event.name", "api_request", "agent_id", "A1", "model", "claude-sonnet-4-5", "session.id", "S1"),
		num64("input_tokens", 100), num64("output_tokens", 20), num64("cache_read_tokens", 7), dbl("cost_usd", 0.0006),
		&commonpb.KeyValue{Key: "cache_creation_tokens", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "3"}}})...)
	hostile := rec(append(kvs("event.name", "api_request", "model", "m\x1b[31m"), dbl("cost_usd", math.NaN()), num64("input_tokens", -5), dbl("output_tokens", math.Inf(1)))...)
	other := rec(kvs("event.name", "tool_result")...)
	now := time.Unix(0, 0)
	j, out := newJoiner(0, &now)
	j.Logs(context.Background(), &collogspb.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{
		ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{good, hostile, other}}}}}})
	if len(out.calls) != 2 {
		t.Fatalf("calls = %d, want 2", len(out.calls))
	}
	c := out.calls[0]
	if c.AgentID != "A1" || c.SessionID != "S1" || c.Cost.Model != "claude-sonnet-4-5" || c.Cost.CostUSD != 0.0006 ||
		c.Cost.Tokens != (cost.Tokens{100, 20, 7, 3}) {
		t.Errorf("call = %+v", c)
	}
	h := out.calls[1]
	if h.Cost.CostUSD != 0 || h.Cost.Tokens != (cost.Tokens{}) || h.Cost.Model == "m\x1b[31m" {
		t.Errorf("hostile call read as %+v", h)
	}
	if got := j.Stats().LogRecords.Load(); got != 3 {
		t.Errorf("log records = %d", got)
	}
}

// TestRunsSharingAgentIDs: spans and events of an agent id two runs share
// go to the run whose Workflow call they hang off, in whatever order the
// CLI's trace and log exporters deliver them.
func TestRunsSharingAgentIDs(t *testing.T) {
	now := time.Unix(0, 0)
	j, out := newJoiner(time.Minute, &now)
	for i, tool := range []string{"toolu_1", "toolu_2"} {
		r := &ingest.Run{TaskID: "w" + tool, RunID: "r", ToolUseID: tool, Workflow: true}
		j.Observe(ingest.Lifecycle{Kind: ingest.AgentStarted, Run: r, Agent: &ingest.Agent{Index: i + 1, AgentID: "A1", State: ingest.AgentRunning}})
	}
	exec1 := []byte{0xe1, 0, 0, 0, 0, 0, 0, 0}
	// The event first: its Workflow call's span is not known yet.
	rec := &logspb.LogRecord{SpanId: exec1, Attributes: append(kvs("event.name", "api_request", "agent_id", "A1"), dbl("cost_usd", 1))}
	j.Logs(context.Background(), &collogspb.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{
		ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{rec}}}}}})
	if len(out.calls) != 0 {
		t.Fatalf("call handed over before its run was known: %+v", out.calls)
	}
	j.Traces(context.Background(), request(
		&tracepb.Span{Name: "claude_code.tool.execution", TraceId: traceT, SpanId: exec1, Attributes: kvs("tool_use_id", "toolu_1")},
		span("llm", 1, traceT, exec1, "agent_id", "A1"),
	))
	if len(out.calls) != 1 || out.calls[0].ToolUseID != "toolu_1" {
		t.Fatalf("calls = %+v, want one of toolu_1", out.calls)
	}
	if p := out.byName("llm").GetParentSpanId(); p[7] != 1 {
		t.Errorf("span under agent %d, want the first run's (index 1)", p[7])
	}
}
