package clitel

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Prices of claude-sonnet-4-5, the simulator's model, in USD per
// million tokens (Anthropic's list prices: input $3, output $15, prompt
// cache read $0.30, 5-minute cache write $3.75). The CLI prices its calls
// from such a table; fixed numbers keep the simulator's costs
// deterministic from its tokens.
const (
	priceInput      = 3.00
	priceOutput     = 15.00
	priceCacheRead  = 0.30
	priceCacheWrite = 3.75
)

// Span flags as the CLI sets them: sampled, and whether the parent is
// remote known (0x100) and true (0x200, the interaction under TRACEPARENT).
const (
	flagsLocal  = 0x101
	flagsRemote = 0x301
)

// mainCallMs is how long a main-conversation model call lasts at most: the
// stream shows only when its message was written.
const mainCallMs = 50

// Tokens are one call's tokens by type, in the order of cost.TokenType:
// input, output, cache_read, cache_creation.
type Tokens [4]int64

// Cost prices one call's tokens (the simulator has one model).
func Cost(tok Tokens) float64 {
	return (float64(tok[0])*priceInput + float64(tok[1])*priceOutput +
		float64(tok[2])*priceCacheRead + float64(tok[3])*priceCacheWrite) / 1e6
}

// Options says what a Recorder cannot know from the environment.
type Options struct {
	Seed      int64  // of span ids, trace ids (without TRACEPARENT) and prompt ids
	SessionID string // session.id, the main conversation's gen_ai.conversation.id
	Version   string // service.version: the CLI version pretended
	Model     string // of every call
	// Errors, if set, receives export errors, which never fail the
	// session (the CLI's do not either).
	Errors io.Writer
}

// Recorder records the spans and log events the CLI would export for one
// session and exports them. Only one goroutine may call it; a nil
// *Recorder records nothing, so a caller calls it unconditionally.
type Recorder struct {
	set       Settings
	o         Options
	rng       *rand.Rand // its own: the caller's ids stay what they were without telemetry
	sessionID string
	spans     *exportQueue[*tracepb.Span]     // nil: no spans
	logs      *exportQueue[*logspb.LogRecord] // nil: no log events
	seq       int64                           // event.sequence
	reqs      int                             // request ids
	turns     int64                           // interaction.sequence

	// The turn running.
	traceID     []byte
	interaction []byte // its span id; nil without spans
	promptID    string
	promptLen   int
	turnStart   int64
	mainFrom    int64 // when the next main call may start
}

// New starts the exporters set asks for; nil when it asks none.
func New(set Settings, o Options) *Recorder {
	if !set.Enabled() {
		return nil
	}
	var mu sync.Mutex // the two exporters warn from their goroutines
	warn := func(err error) {
		if o.Errors != nil {
			mu.Lock()
			fmt.Fprintf(o.Errors, "simulate: telemetry: %v\n", err)
			mu.Unlock()
		}
	}
	seed := uint64(o.Seed) ^ 0x7e1e7e1e
	c := &Recorder{set: set, o: o, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), sessionID: o.SessionID}
	if set.Spans {
		c.spans = startQueue(set.TracesURL, set.TracesProtocol, set.TracesHeaders, set.TracesInterval, warn, func(b []*tracepb.Span) proto.Message {
			return &coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{Resource: resource(o.Version),
				ScopeSpans: []*tracepb.ScopeSpans{{Scope: &commonpb.InstrumentationScope{Name: "com.anthropic.claude_code.tracing", Version: "1.0.0"}, Spans: b}}}}}
		})
	}
	if set.Logs {
		c.logs = startQueue(set.LogsURL, set.LogsProtocol, set.LogsHeaders, set.LogsInterval, warn, func(b []*logspb.LogRecord) proto.Message {
			return &collogs.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{Resource: resource(o.Version),
				ScopeLogs: []*logspb.ScopeLogs{{Scope: &commonpb.InstrumentationScope{Name: "com.anthropic.claude_code.events", Version: o.Version}, LogRecords: b}}}}}
		})
	}
	return c
}

// resource is the CLI's resource; a new one per request, because the
// two exporters marshal concurrently.
func resource(version string) *resourcepb.Resource {
	return &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("host.arch", runtime.GOARCH), str("os.type", runtime.GOOS),
		str("service.name", "claude-code"), str("service.version", version)}}
}

// Shutdown is the CLI's flush at exit: whatever is queued is exported,
// within the shutdown timeout. The Recorder is not used afterwards.
func (c *Recorder) Shutdown() {
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.set.ShutdownTimeout)
	defer cancel()
	if c.spans != nil {
		c.spans.close()
	}
	if c.logs != nil {
		c.logs.close()
	}
	if c.spans != nil {
		c.spans.wait(ctx)
	}
	if c.logs != nil {
		c.logs.wait(ctx)
	}
}

func (c *Recorder) spanID() []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, c.rng.Uint64()|1) // never the invalid zero id
	return b
}

// uuid is a version-4 shaped UUID, as the CLI's prompt ids.
func (c *Recorder) uuid() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:], c.rng.Uint64())
	binary.BigEndian.PutUint64(b[8:], c.rng.Uint64())
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// BeginTurn opens the turn's interaction: in TRACEPARENT's trace, else in a
// trace of its own.
func (c *Recorder) BeginTurn(now int64, prompt string) {
	if c == nil {
		return
	}
	c.turns++
	c.turnStart, c.mainFrom = now, now
	c.promptID, c.promptLen = c.uuid(), len(prompt)
	c.traceID = append([]byte(nil), c.set.TraceID[:]...)
	if !c.set.HasParent() {
		binary.BigEndian.PutUint64(c.traceID, c.rng.Uint64()|1)
		binary.BigEndian.PutUint64(c.traceID[8:], c.rng.Uint64())
	}
	c.interaction = nil
	if c.spans != nil {
		c.interaction = c.spanID()
	}
}

// EndTurn ends the interaction span at now (the result line).
func (c *Recorder) EndTurn(now int64) {
	if c == nil || c.spans == nil {
		return
	}
	var parent []byte
	flags := uint32(flagsLocal)
	if c.set.HasParent() {
		parent, flags = append([]byte(nil), c.set.ParentSpanID[:]...), flagsRemote
	}
	c.spans.add(c.span("claude_code.interaction", c.interaction, parent, flags, c.turnStart, now, "interaction", c.sessionID,
		str("gen_ai.operation.name", "invoke_agent"), str("user_prompt", "<REDACTED>"), num("user_prompt_length", int64(c.promptLen)),
		num("interaction.sequence", c.turns), str("parent.source", "env"), num("queued_sends", 0),
		num("interaction.duration_ms", now-c.turnStart)))
}

// MainCall records a model call of the main conversation that ended at now
// with tok (what its assistant line shows) and stop_reason stop.
func (c *Recorder) MainCall(now int64, tok Tokens, stop string) {
	if c == nil {
		return
	}
	from := max(c.mainFrom, now-mainCallMs)
	c.modelCall(call{parent: c.interaction, active: c.interaction, from: from, to: now, tok: tok, stop: stop})
	c.mainFrom = now
}

// Workflow is a run's Workflow tool call, under which its agents' calls
// land.
type Workflow struct {
	// RunID is the wf_ id the CLI's Workflow tool result gives (which
	// the stream does not show): workflow.run_id of the agents' calls.
	RunID    string
	execSpan []byte // nil without spans
}

// WorkflowLaunched records the Workflow tool call toolUseID that launched
// task taskID at now: its tool span and the tool.execution under which
// every agent's calls land, which ends at once while the run goes on in
// the background. Nil without a Recorder.
func (c *Recorder) WorkflowLaunched(taskID, toolUseID string, now int64) *Workflow {
	if c == nil {
		return nil
	}
	return c.launch(taskID, toolUseID, now, c.interaction)
}

// launch records a Workflow tool call of the main conversation under span
// under. (Claude Code 2.1.335 nests a workflow only under a fork sub-agent,
// PROTOCOL.md "Nested runs"; the simulator records that call as the main
// conversation's too.)
func (c *Recorder) launch(taskID, toolUseID string, now int64, under []byte) *Workflow {
	// Derived, not drawn: a resumed run keeps its wf_ id.
	h := sha256.Sum256([]byte(c.sessionID + "\x00" + taskID))
	x := hex.EncodeToString(h[:])
	w := &Workflow{RunID: "wf_" + x[:8] + "-" + x[8:11]}
	if c.spans == nil {
		return w
	}
	conv := c.sessionID
	tool := c.spanID()
	w.execSpan = c.spanID()
	ids := func() []*commonpb.KeyValue {
		return []*commonpb.KeyValue{str("tool_use_id", toolUseID), str("gen_ai.tool.call.id", toolUseID)}
	}
	c.spans.add(c.span("claude_code.tool.execution", w.execSpan, tool, flagsLocal, now+1, now+11, "tool.execution", conv,
		append(ids(), num("duration_ms", 10), flag("success", true))...))
	c.spans.add(c.span("claude_code.tool", tool, under, flagsLocal, now, now+14, "tool", conv,
		append([]*commonpb.KeyValue{str("tool_name", "Workflow"), str("tool_name_safe", "Workflow"), str("gen_ai.operation.name", "execute_tool"),
			str("gen_ai.tool.name", "Workflow")}, append(ids(), num("duration_ms", 14))...)...))
	return w
}

// AgentCall records a model call of agent agentID of run w over [from, to]
// with tok, ending with stop_reason stop; errMsg non-empty makes it a
// rejected call (an ERROR span and an api_error event, no tokens). It
// returns the cost its api_request event said, and whether there was one.
func (c *Recorder) AgentCall(w *Workflow, agentID string, from, to int64, tok Tokens, stop, errMsg string) (usd float64, ok bool) {
	if c == nil || w == nil {
		return 0, false
	}
	usd = c.modelCall(call{agentID: agentID, wfRunID: w.RunID, parent: w.execSpan, active: w.execSpan, from: from, to: to,
		tok: tok, stop: stop, errMsg: errMsg})
	return usd, c.logs != nil && errMsg == ""
}

// call is one model call.
type call struct {
	agentID, wfRunID string // empty in the main conversation
	parent, active   []byte // the llm_request's parent; the span the log event names
	from, to         int64
	tok              Tokens
	stop             string
	errMsg           string // the call was rejected
}

// modelCall records a call's llm_request span and its api_request (or
// api_error) event, and returns its cost.
func (c *Recorder) modelCall(k call) float64 {
	c.reqs++
	reqID := fmt.Sprintf("req_sim_tel_%d", c.reqs)
	conv, ctxName, qs := c.sessionID, "interaction", "sdk"
	var who []*commonpb.KeyValue
	if k.agentID != "" {
		conv, ctxName, qs = k.agentID, "tool", "agent:builtin:workflow-subagent"
		who = []*commonpb.KeyValue{str("agent_id", k.agentID), str("workflow.run_id", k.wfRunID), str("workflow.name", "custom")}
	}
	dur := k.to - k.from
	usd := 0.0
	if k.errMsg == "" {
		usd = Cost(k.tok)
	}
	if c.spans != nil {
		attrs := append([]*commonpb.KeyValue{str("model", c.o.Model), str("gen_ai.system", "anthropic"), str("gen_ai.request.model", c.o.Model),
			str("gen_ai.operation.name", "chat"), str("llm_request.context", ctxName), str("speed", "normal"),
			str("query_source_safe", qs)}, who...)
		attrs = append(attrs, num("duration_ms", dur), num("attempt", 1), str("request_id", reqID))
		if k.errMsg == "" {
			attrs = append(attrs, num("input_tokens", k.tok[0]), num("output_tokens", k.tok[1]), num("cache_read_tokens", k.tok[2]),
				num("cache_creation_tokens", k.tok[3]), flag("success", true), str("gen_ai.response.id", reqID), str("stop_reason", k.stop),
				num("gen_ai.usage.input_tokens", k.tok[0]), num("gen_ai.usage.output_tokens", k.tok[1]),
				num("gen_ai.usage.cache_read.input_tokens", k.tok[2]), num("gen_ai.usage.cache_write.input_tokens", k.tok[3]),
				str("gen_ai.response.model", c.o.Model))
		} else {
			attrs = append(attrs, flag("success", false), num("status_code", 400), str("error", k.errMsg))
		}
		s := c.span("claude_code.llm_request", c.spanID(), k.parent, flagsLocal, k.from, k.to, "llm_request", conv, attrs...)
		if k.errMsg != "" {
			s.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: k.errMsg}
		}
		c.spans.add(s)
	}
	if c.logs == nil {
		return usd
	}
	event := "api_request"
	attrs := []*commonpb.KeyValue{str("model", c.o.Model)}
	if k.errMsg == "" {
		attrs = append(attrs, num("input_tokens", k.tok[0]), num("output_tokens", k.tok[1]), num("cache_read_tokens", k.tok[2]),
			num("cache_creation_tokens", k.tok[3]), num("cache_creation_5m_tokens", k.tok[3]), num("cache_creation_1h_tokens", 0),
			dbl("cost_usd", usd), num("cost_usd_micros", int64(usd*1e6+0.5)), num("duration_ms", dur), str("request_id", reqID))
	} else {
		event = "api_error"
		attrs = append(attrs, str("error", k.errMsg), str("status_code", "400"), num("duration_ms", dur), num("attempt", 1))
	}
	attrs = append(attrs, str("speed", "normal"), str("query_source", qs))
	if k.agentID != "" {
		attrs = append(append(attrs, str("agent.name", "workflow-subagent")), who...)
	}
	c.event(event, k.to, k.active, attrs...)
	return usd
}

// span builds one finished span in the turn's trace; the caller queues it.
func (c *Recorder) span(name string, id, parent []byte, flags uint32, from, to int64, typ, conv string, attrs ...*commonpb.KeyValue) *tracepb.Span {
	return &tracepb.Span{TraceId: c.traceID, SpanId: id, ParentSpanId: parent, Name: name, Kind: tracepb.Span_SPAN_KIND_INTERNAL,
		StartTimeUnixNano: uint64(from) * 1e6, EndTimeUnixNano: uint64(to) * 1e6, Flags: flags, Status: &tracepb.Status{},
		Attributes: append([]*commonpb.KeyValue{str("session.id", c.sessionID), str("anthropic.provider", "firstParty"),
			str("gen_ai.provider.name", "anthropic"), str("span.type", typ), str("gen_ai.conversation.id", conv)}, attrs...)}
}

// event queues one log event at ms, in the trace and under the span that
// was active (no span ids without spans).
func (c *Recorder) event(name string, ms int64, active []byte, attrs ...*commonpb.KeyValue) {
	c.seq++
	r := &logspb.LogRecord{TimeUnixNano: uint64(ms) * 1e6, ObservedTimeUnixNano: uint64(ms) * 1e6, Flags: 1,
		Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "claude_code." + name}},
		Attributes: append([]*commonpb.KeyValue{str("session.id", c.sessionID), str("anthropic.provider", "firstParty"),
			str("event.name", name), str("event.timestamp", time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")), num("event.sequence", c.seq), str("prompt.id", c.promptID)}, attrs...)}
	switch {
	case active != nil:
		r.TraceId, r.SpanId = c.traceID, active
	case c.set.HasParent(): // no spans of its own: the context TRACEPARENT gave
		r.TraceId, r.SpanId = c.traceID, append([]byte(nil), c.set.ParentSpanID[:]...)
	}
	c.logs.add(r)
}

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func num(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func dbl(k string, v float64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}

func flag(k string, v bool) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v}}}
}
