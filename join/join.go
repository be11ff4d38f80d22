// Package join joins the CLI's own OpenTelemetry telemetry (Claude Code's
// traces and log events, run --cli-telemetry.join) to the workflow runs the
// stream describes.
//
// The CLI's spans have no workflow, phase or agent span: a sub-agent's model
// and tool calls hang flat under the Workflow tool call. The keys to place
// them exist: a sub-agent's top-level spans carry agent_id, which is the
// stream's workflow_agent.agentId, and the Workflow tool span carries
// tool_use_id, which is task_started.tool_use_id. A Joiner learns both from
// the Tracker's lifecycle events (it is an ingest.Sink) and from the spans,
// and:
//
//   - re-parents each span carrying a known agent_id under that agent's
//     invoke_agent span, keeping the CLI's original parent as a link
//     (cbc.link.type=cli_parent); the spans nested below it (which carry
//     the agent only as gen_ai.conversation.id) keep their parent, already
//     in the agent's subtree;
//   - tells the traces sink which CLI span launched a run (Launcher), so the
//     workflow span becomes its child;
//   - turns each api_request log event into an ingest.ModelCall (cost and
//     tokens) for the pipeline;
//   - forwards everything: spans (re-parented or not), log records and
//     metrics.
//
// Trace ids: the CLI runs under a TRACEPARENT the wrapper chose, so its
// spans and ours share one trace per CLI process and only parents change.
// A span of another trace (the user gave the child a TRACEPARENT of their
// own) cannot be re-parented: it is forwarded as is and counted.
//
// Both paths are asynchronous: a span may arrive before the snapshot that
// names its agent. It is held, bounded, for the hold window, then
// forwarded unchanged and counted as unmatched. Nothing here blocks the
// caller: the CLI waits for the receiver's answer before it may exit.
package join

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"go.opentelemetry.io/otel/trace"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// Attribute keys and names of Claude Code's telemetry (2.1.334, beta).
const (
	keyAgentID        = "agent_id"
	keyConversationID = "gen_ai.conversation.id"
	keyToolUseID      = "tool_use_id"
	keyToolName       = "tool_name"
	spanTool          = "claude_code.tool"
	toolWorkflow      = "Workflow"
)

// LinkCLIParent is the cbc.link.type of the link from a re-parented CLI span
// to its original parent.
const LinkCLIParent = "cli_parent"

// Bounds. A workflow has dozens of agents; the CLI exports every second or
// so. These are far above that and keep the Joiner within a few MiB.
const (
	maxAgents    = 8192
	maxLaunchers = 4096
	maxHeld      = 4096
)

// Options configures a Joiner. Every func may be nil.
type Options struct {
	// AgentSpan returns the span context of the invoke_agent span of agent
	// index of run (task, run), as the traces sink exports it.
	AgentSpan func(task, run string, index int) trace.SpanContext
	// Submit hands a model call to the pipeline (ingest.CallQueue.Submit).
	Submit func(ingest.ModelCall) bool
	// Spans, Logs and Metrics forward what the CLI exported.
	Spans   func([]*tracepb.ResourceSpans)
	Logs    func(*collogspb.ExportLogsServiceRequest)
	Metrics func(*colmetricspb.ExportMetricsServiceRequest)
	// Hold is how long a span waits for the stream to name its agent; 0
	// forwards it at once.
	Hold time.Duration
	// Now is the clock of the hold; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Stats are the Joiner's counters.
type Stats struct {
	Spans       atomic.Int64 // spans received
	Reparented  atomic.Int64 // placed under an agent's invoke_agent span
	Unmatched   atomic.Int64 // carried an agent_id the stream never named within the hold
	Foreign     atomic.Int64 // in another trace than the run's: left alone
	HeldDropped atomic.Int64 // the hold was full: forwarded unchanged at once
	LogRecords  atomic.Int64
	ModelCalls  atomic.Int64 // api_request events handed to the pipeline
	CallsLost   atomic.Int64 // ... that the pipeline refused (its queue was full)
	DataPoints  atomic.Int64 // metric data points received
}

type agentKey struct {
	task, run string
	index     int
}

type heldSpan struct {
	res      *resourcepb.Resource
	resURL   string
	scope    *commonpb.InstrumentationScope
	scopeURL string
	span     *tracepb.Span
	agent    string
	tool     string // the tool_use_id its parent span carried; "" if unknown
	deadline time.Time
}

// Joiner joins the CLI's telemetry to the stream's runs. Observe is called
// from the pipeline's goroutine; Traces, Logs and Metrics from the
// receiver's; Launcher from the traces sink (the pipeline's goroutine).
type Joiner struct {
	opts  Options
	stats Stats

	mu sync.Mutex
	// agents maps an agent id to its latest agent; byTool maps the
	// tool_use_id of a run and an agent id to that run's agent. agentIds are
	// content-addressed: a workflow run twice reuses them, and only the
	// launching Workflow call tells the runs apart.
	agents     map[string]agentKey
	byTool     map[string]agentKey
	agentOrder [][2]string
	// execs maps the span id of a Workflow tool (and tool.execution) span
	// to its tool_use_id: a sub-agent's spans and events hang off it.
	execs     map[string]string
	execOrd   []string
	launchers map[string]trace.SpanContext
	launchOrd []string
	held      []heldSpan
	// calls are model calls of sub-agents whose active span (their
	// Workflow call's execution) has not been seen yet: the CLI's traces
	// and logs are exported apart, in either order.
	calls []heldCall
}

type heldCall struct {
	call     ingest.ModelCall
	span     string
	deadline time.Time
}

var _ ingest.Sink = (*Joiner)(nil)

// New returns a Joiner.
func New(opts Options) *Joiner {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Joiner{
		opts:      opts,
		agents:    make(map[string]agentKey),
		byTool:    make(map[string]agentKey),
		execs:     make(map[string]string),
		launchers: make(map[string]trace.SpanContext),
	}
}

// Stats returns the Joiner's counters.
func (j *Joiner) Stats() *Stats { return &j.stats }

// Observe implements ingest.Sink: it learns which agent id is which agent
// of which run, and releases the spans that waited for it.
func (j *Joiner) Observe(l ingest.Lifecycle) {
	if l.Kind != ingest.AgentStarted && l.Kind != ingest.AgentEnded {
		return
	}
	a := l.Agent
	if a == nil || a.AgentID == "" || a.State == ingest.AgentCached {
		// A cached agent carries the id of the run that computed it and
		// makes no calls of its own.
		return
	}
	k := agentKey{task: l.Run.TaskID, run: l.Run.RunID, index: a.Index}
	tk := l.Run.ToolUseID + "\x00" + a.AgentID
	j.mu.Lock()
	if old, ok := j.byTool[tk]; ok && old == k && j.agents[a.AgentID] == k {
		j.mu.Unlock()
		return
	}
	if _, ok := j.byTool[tk]; !ok {
		j.agentOrder = append(j.agentOrder, [2]string{a.AgentID, tk})
		if len(j.agentOrder) > maxAgents {
			old := j.agentOrder[0]
			if j.agents[old[0]] == j.byTool[old[1]] {
				delete(j.agents, old[0])
			}
			delete(j.byTool, old[1])
			j.agentOrder = j.agentOrder[1:]
		}
	}
	j.agents[a.AgentID] = k
	j.byTool[tk] = k
	var ready []heldSpan
	if len(j.held) > 0 {
		n := 0
		for _, h := range j.held {
			if h.agent == a.AgentID && (h.tool == "" || h.tool == l.Run.ToolUseID) {
				ready = append(ready, h)
				continue
			}
			j.held[n] = h
			n++
		}
		clear(j.held[n:])
		j.held = j.held[:n]
	}
	j.mu.Unlock()
	if len(ready) > 0 {
		j.forwardHeld(ready, true)
	}
}

// Launcher returns the CLI's span that launched the run of toolUseID (its
// Workflow tool call), for traces.Options.Launcher.
func (j *Joiner) Launcher(toolUseID string) (trace.SpanContext, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	sc, ok := j.launchers[toolUseID]
	return sc, ok
}

// Traces re-parents what it can of one export request and forwards it;
// spans of agents not yet named are held.
func (j *Joiner) Traces(_ context.Context, req *coltracepb.ExportTraceServiceRequest) {
	now := j.opts.Now()
	out := make([]*tracepb.ResourceSpans, 0, len(req.GetResourceSpans()))
	var ready []ingest.ModelCall
	j.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		kept := &tracepb.ResourceSpans{Resource: rs.GetResource(), SchemaUrl: rs.GetSchemaUrl()}
		for _, ss := range rs.GetScopeSpans() {
			ks := &tracepb.ScopeSpans{Scope: ss.GetScope(), SchemaUrl: ss.GetSchemaUrl()}
			for _, sp := range ss.GetSpans() {
				j.stats.Spans.Add(1)
				if j.place(sp, rs, ss, now, &ready) {
					ks.Spans = append(ks.Spans, sp)
				}
			}
			if len(ks.Spans) > 0 {
				kept.ScopeSpans = append(kept.ScopeSpans, ks)
			}
		}
		if len(kept.ScopeSpans) > 0 {
			out = append(out, kept)
		}
	}
	j.mu.Unlock()
	j.submit(ready)
	if len(out) > 0 && j.opts.Spans != nil {
		j.opts.Spans(out)
	}
}

// place decides one span under j.mu: re-parented or left alone (true: send
// it now), or held (false).
func (j *Joiner) place(sp *tracepb.Span, rs *tracepb.ResourceSpans, ss *tracepb.ScopeSpans, now time.Time, ready *[]ingest.ModelCall) bool {
	attrs := sp.GetAttributes()
	if id := str(attrs, keyToolUseID); id != "" {
		j.rememberExec(sp.GetSpanId(), id)
		*ready = j.releaseCalls(string(sp.GetSpanId()), id, *ready)
		if sp.GetName() == spanTool && str(attrs, keyToolName) == toolWorkflow {
			j.rememberLauncher(id, sp)
		}
	}
	agent := str(attrs, keyAgentID)
	if agent == "" {
		return true // the main conversation, or nested below an agent's span
	}
	tool := j.execs[string(sp.GetParentSpanId())]
	if k, ok := j.agent(agent, tool); ok {
		j.reparent(sp, k)
		return true
	}
	if j.opts.Hold <= 0 {
		j.stats.Unmatched.Add(1)
		return true
	}
	if len(j.held) >= maxHeld {
		j.stats.HeldDropped.Add(1)
		return true
	}
	j.held = append(j.held, heldSpan{res: rs.GetResource(), resURL: rs.GetSchemaUrl(), scope: ss.GetScope(),
		scopeURL: ss.GetSchemaUrl(), span: sp, agent: agent, tool: tool, deadline: now.Add(j.opts.Hold)})
	return false
}

// agent finds the agent of id in the run its Workflow call tool launched;
// with tool unknown, the latest agent of that id. Under j.mu.
func (j *Joiner) agent(id, tool string) (agentKey, bool) {
	if tool != "" {
		k, ok := j.byTool[tool+"\x00"+id]
		return k, ok
	}
	k, ok := j.agents[id]
	return k, ok
}

// rememberExec records that span id carries tool_use_id tool. Under j.mu.
func (j *Joiner) rememberExec(id []byte, tool string) {
	if _, ok := j.execs[string(id)]; ok {
		return
	}
	j.execOrd = append(j.execOrd, string(id))
	if len(j.execOrd) > maxLaunchers {
		delete(j.execs, j.execOrd[0])
		j.execOrd = j.execOrd[1:]
	}
	j.execs[string(id)] = tool
}

// releaseCalls appends to out the held calls that waited for span, now
// known to run under Workflow call tool. Under j.mu.
func (j *Joiner) releaseCalls(span, tool string, out []ingest.ModelCall) []ingest.ModelCall {
	if len(j.calls) == 0 {
		return out
	}
	n := 0
	for _, h := range j.calls {
		if h.span == span {
			h.call.ToolUseID = tool
			out = append(out, h.call)
			continue
		}
		j.calls[n] = h
		n++
	}
	clear(j.calls[n:])
	j.calls = j.calls[:n]
	return out
}

// call hands c to the pipeline once it knows which Workflow call c ran
// under: at once when span (its active span) is known or none, else when
// that span arrives or the hold ends.
func (j *Joiner) call(c ingest.ModelCall, span []byte, now time.Time) {
	j.mu.Lock()
	tool, known := j.execs[string(span)]
	if known || c.AgentID == "" || len(span) == 0 || j.opts.Hold <= 0 || len(j.calls) >= maxHeld {
		j.mu.Unlock()
		c.ToolUseID = tool
		j.submit([]ingest.ModelCall{c})
		return
	}
	j.calls = append(j.calls, heldCall{call: c, span: string(span), deadline: now.Add(j.opts.Hold)})
	j.mu.Unlock()
}

func (j *Joiner) submit(cs []ingest.ModelCall) {
	for _, c := range cs {
		if j.opts.Submit == nil || !j.opts.Submit(c) {
			j.stats.CallsLost.Add(1)
		}
	}
}

func (j *Joiner) rememberLauncher(id string, sp *tracepb.Span) {
	var tid trace.TraceID
	var sid trace.SpanID
	if len(sp.GetTraceId()) != len(tid) || len(sp.GetSpanId()) != len(sid) {
		return
	}
	copy(tid[:], sp.GetTraceId())
	copy(sid[:], sp.GetSpanId())
	if _, ok := j.launchers[id]; !ok {
		j.launchOrd = append(j.launchOrd, id)
		if len(j.launchOrd) > maxLaunchers {
			delete(j.launchers, j.launchOrd[0])
			j.launchOrd = j.launchOrd[1:]
		}
	}
	j.launchers[id] = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.FlagsSampled, Remote: true})
}

// reparent moves sp under the invoke_agent span of k, linking its original
// parent. A span of another trace is left as it is.
func (j *Joiner) reparent(sp *tracepb.Span, k agentKey) {
	if j.opts.AgentSpan == nil {
		j.stats.Unmatched.Add(1)
		return
	}
	parent := j.opts.AgentSpan(k.task, k.run, k.index)
	tid := parent.TraceID()
	if !parent.IsValid() || string(sp.GetTraceId()) != string(tid[:]) {
		j.stats.Foreign.Add(1)
		return
	}
	if old := sp.GetParentSpanId(); len(old) > 0 {
		sp.Links = append(sp.Links, &tracepb.Span_Link{TraceId: sp.GetTraceId(), SpanId: old,
			Attributes: []*commonpb.KeyValue{{Key: "cbc.link.type", Value: &commonpb.AnyValue{
				Value: &commonpb.AnyValue_StringValue{StringValue: LinkCLIParent}}}}})
	}
	sid := parent.SpanID()
	sp.ParentSpanId = append([]byte(nil), sid[:]...)
	j.stats.Reparented.Add(1)
}

// Expire forwards, unchanged, the held spans whose hold ended by now (all
// of them when all is set: the CLI is gone). Call it now and then.
func (j *Joiner) Expire(now time.Time, all bool) {
	j.mu.Lock()
	var due []heldSpan
	n := 0
	for _, h := range j.held {
		if all || !now.Before(h.deadline) {
			due = append(due, h)
			continue
		}
		j.held[n] = h
		n++
	}
	clear(j.held[n:])
	j.held = j.held[:n]
	var calls []ingest.ModelCall
	n = 0
	for _, h := range j.calls {
		if all || !now.Before(h.deadline) {
			calls = append(calls, h.call) // its run unknown: the Tracker takes the latest agent of its id
			continue
		}
		j.calls[n] = h
		n++
	}
	clear(j.calls[n:])
	j.calls = j.calls[:n]
	j.mu.Unlock()
	j.submit(calls)
	if len(due) > 0 {
		j.stats.Unmatched.Add(int64(len(due)))
		j.forwardHeld(due, false)
	}
}

// Run calls Expire every tick until ctx is done, then forwards what is
// still held.
func (j *Joiner) Run(ctx context.Context, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			j.Expire(j.opts.Now(), false)
		case <-ctx.Done():
			j.Expire(j.opts.Now(), true)
			return
		}
	}
}

// forwardHeld re-parents (when matched) and forwards held spans, grouped
// back under their resource and scope.
func (j *Joiner) forwardHeld(hs []heldSpan, matched bool) {
	var out []*tracepb.ResourceSpans
	for _, h := range hs {
		if matched {
			j.mu.Lock()
			k, ok := j.agent(h.agent, h.tool)
			j.mu.Unlock()
			if ok {
				j.reparent(h.span, k)
			}
		}
		out = append(out, &tracepb.ResourceSpans{Resource: h.res, SchemaUrl: h.resURL,
			ScopeSpans: []*tracepb.ScopeSpans{{Scope: h.scope, SchemaUrl: h.scopeURL, Spans: []*tracepb.Span{h.span}}}})
	}
	if j.opts.Spans != nil {
		j.opts.Spans(out)
	}
}

// str is the string value of key in attrs, or "".
func str(attrs []*commonpb.KeyValue, key string) string {
	for _, kv := range attrs {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}
