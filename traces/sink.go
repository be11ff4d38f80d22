package traces

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/safetext"
)

// ScopeName is the instrumentation scope of every span the Sink makes.
const ScopeName = "github.com/cbc-otel/cbc-otel/traces"

// Bounds on exported text. Status messages are short by contract; previews
// are already bounded by ingest, the bound here holds whatever the source.
const (
	maxStatusLen  = 256
	maxPreviewLen = 512
	maxLinkTasks  = 4096
)

// Options configures a Sink.
type Options struct {
	// Parent, when valid, is the span the workflow and task spans become
	// children of (a W3C TRACEPARENT from the environment, see
	// ParentFromEnv). Their trace id is then the parent's; span ids stay
	// deterministic. The parent's sampled flag is honoured.
	Parent trace.SpanContext
	// CapturePreviews exports resultPreview, promptPreview and summary as
	// attributes. Off by default: they are user and model text. They only
	// exist when the pipeline decodes them (streamjson.DecodeOptions.KeepPreviews).
	CapturePreviews bool
	// Launcher, when set, finds the CLI's own span that launched a run (its
	// Workflow tool call, by the run's tool_use_id; run
	// --cli-telemetry.join): the workflow span becomes its child. A run it
	// does not know hangs off Parent as before.
	Launcher func(toolUseID string) (trace.SpanContext, bool)
	// HoldAgents exports agent spans when their run is finalized rather
	// than when they end, so that what arrives during the grace window
	// (the CLI's cost of each agent) is on them.
	HoldAgents bool
}

// dropCounter is what a TracerProvider may offer about lost spans; Provider
// does.
type dropCounter interface {
	Dropped() float64
	ExportErrors() float64
}

type runKey struct{ task, run string }

// Sink turns the Tracker's lifecycle events into spans: one trace per
// workflow run, invoke_workflow → workflow_phase → invoke_agent, and one
// invoke_task span per plain background task. Every time comes from the
// events, every id from the stream (see TraceID and SpanID), so a replay
// exports the same spans as the live run did.
//
// Agent spans are exported when the agent ends; phase and workflow spans when
// the run is finalized (after the grace window), because only then are their
// times final. An agent whose start or end time is unknown when it ends is
// held until the run is finalized, when the run's times fill the gap.
//
// Like every Sink, it is called from the one goroutine that feeds the
// Tracker; Dropped and ExportErrors may be called from anywhere.
type Sink struct {
	tracer   trace.Tracer
	counts   dropCounter
	parent   trace.SpanContext
	previews bool
	launcher func(string) (trace.SpanContext, bool)
	hold     bool

	// deferred holds, per open run, the agents that ended without both
	// times; they are exported at RunFinalized.
	deferred map[runKey][]int
	// lastRun maps a task id to its latest run id, so that a child task's
	// parent_task_id can become a link to that run's root span.
	lastRun   map[string]string
	lastOrder []string
	// roots maps a nested run to the top-level run whose trace it joins
	// (ingest.Run.Parent); bounded like lastRun.
	roots     map[runKey]runKey
	rootOrder []runKey
	kv        []attribute.KeyValue // scratch of common

	// What every span costs beyond the SDK's own work, kept down: the ids
	// of the last run and phase asked for (two SHA-256 sums saved per
	// agent span), the parent context of the last span (its agents share
	// a phase, its phases the workflow), the span kind option made once,
	// and scratch for the options (a variadic slice passed through an
	// interface is allocated at every call).
	runMemo   runIDMemo
	phaseMemo phaseIDMemo
	lastPCtx  parentMemo
	kindOpt   trace.SpanStartOption
	startOpts [3]trace.SpanStartOption
	endOpts   [1]trace.SpanEndOption
}

// runIDMemo is TraceID and the workflow span id of one (task, run).
type runIDMemo struct {
	task, run string
	tid       trace.TraceID
	sid       trace.SpanID
}

// phaseIDMemo is the span id of one phase of one (task, run).
type phaseIDMemo struct {
	task, run string
	index     int
	sid       trace.SpanID
}

// parentMemo is the context parentCtx made last, and for which span.
type parentMemo struct {
	tid trace.TraceID
	sid trace.SpanID
	ctx context.Context
}

var _ ingest.Sink = (*Sink)(nil)

// New returns a Sink creating spans with tp. For deterministic ids tp must
// use an IDGenerator (Setup's Provider does; in tests build the SDK provider
// with sdktrace.WithIDGenerator(NewIDGenerator())); otherwise ids are
// whatever tp generates.
func New(tp trace.TracerProvider, opts Options) *Sink {
	s := &Sink{
		tracer:   tp.Tracer(ScopeName),
		parent:   opts.Parent,
		previews: opts.CapturePreviews,
		launcher: opts.Launcher,
		hold:     opts.HoldAgents,
		deferred: make(map[runKey][]int),
		lastRun:  make(map[string]string),
		roots:    make(map[runKey]runKey),
		kv:       make([]attribute.KeyValue, 0, 24),
		kindOpt:  trace.WithSpanKind(trace.SpanKindInternal),
	}
	if c, ok := tp.(dropCounter); ok {
		s.counts = c
	}
	return s
}

// Dropped returns how many spans were lost (queue full, failed export, or
// still queued when shutdown's deadline passed), when tp is a Provider;
// else 0.
func (s *Sink) Dropped() float64 {
	if s == nil || s.counts == nil {
		return 0
	}
	return s.counts.Dropped()
}

// ExportErrors returns how many export calls failed, when tp is a Provider;
// else 0.
func (s *Sink) ExportErrors() float64 {
	if s == nil || s.counts == nil {
		return 0
	}
	return s.counts.ExportErrors()
}

// IDs returns the trace id and root span id r is exported with: IDs(r),
// except that the trace id is the parent's when Options.Parent is set.
// It writes nothing (metrics' Exemplar calls it): the Sink's own paths use
// the remembered ids instead.
func (s *Sink) IDs(r *ingest.Run) (trace.TraceID, trace.SpanID) {
	tid, ok := s.chainTraceID(r.TaskID, r.RunID)
	if !ok {
		tid = TraceID(r.TaskID, r.RunID)
	}
	return tid, SpanID(r.TaskID, r.RunID, kindWorkflow, 0)
}

// ownIDs returns TraceID(task, run) and the run's workflow span id: pure
// functions of the pair, remembered for the last pair asked (the spans of a
// run are exported one after the other).
func (s *Sink) ownIDs(task, run string) (trace.TraceID, trace.SpanID) {
	m := &s.runMemo
	if !m.sid.IsValid() || m.task != task || m.run != run {
		*m = runIDMemo{task: task, run: run, tid: TraceID(task, run), sid: SpanID(task, run, kindWorkflow, 0)}
	}
	return m.tid, m.sid
}

// workflowSpanID is SpanID(task, run, kindWorkflow, 0).
func (s *Sink) workflowSpanID(task, run string) trace.SpanID {
	_, sid := s.ownIDs(task, run)
	return sid
}

// phaseSpanID is SpanID(task, run, kindPhase, index), remembered for the
// last phase asked (a run's agents end phase after phase).
func (s *Sink) phaseSpanID(task, run string, index int) trace.SpanID {
	m := &s.phaseMemo
	if !m.sid.IsValid() || m.index != index || m.task != task || m.run != run {
		*m = phaseIDMemo{task: task, run: run, index: index, sid: SpanID(task, run, kindPhase, index)}
	}
	return m.sid
}

// AgentSpanContext returns the span context of the invoke_agent span of
// agent index of run (task, run), as a Sink with Options.Parent parent
// exports it: what the CLI's own spans of that agent are re-parented
// under. It needs no Sink: under the join the parent is always valid (the
// user's or a minted one), and then every span of the Sink is in its
// trace, with its flags.
func AgentSpanContext(parent trace.SpanContext, task, run string, index int) trace.SpanContext {
	tid, flags := TraceID(task, run), trace.FlagsSampled
	if parent.IsValid() {
		tid, flags = parent.TraceID(), parent.TraceFlags()
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    tid,
		SpanID:     SpanID(task, run, kindAgent, index),
		TraceFlags: flags,
	})
}

// Exemplar returns IDs as hex strings, for metric exemplars.
func (s *Sink) Exemplar(r *ingest.Run) (traceID, spanID string) {
	t, sp := s.IDs(r)
	return t.String(), sp.String()
}

func (s *Sink) traceID(task, run string) trace.TraceID {
	if tid, ok := s.chainTraceID(task, run); ok {
		return tid
	}
	tid, _ := s.ownIDs(task, run)
	return tid
}

// chainTraceID is the trace id of (task, run) when it is not its own: the
// parent's, or its chain root's.
func (s *Sink) chainTraceID(task, run string) (trace.TraceID, bool) {
	if s.parent.IsValid() {
		return s.parent.TraceID(), true
	}
	if root, ok := s.roots[runKey{task, run}]; ok {
		return TraceID(root.task, root.run), true
	}
	return trace.TraceID{}, false
}

// nested records that r joins the trace of its chain's root: a nested
// run's spans hang under the agent that launched it, a resumed run's under
// its first run. Every event of r says so again, so a sink restored from a
// checkpoint learns it too.
func (s *Sink) nested(r *ingest.Run) {
	p := &r.Parent
	if p.TaskID == "" {
		p = r.Resumes
	}
	if p == nil || p.TaskID == "" {
		return // not nested: no map lookup on every event of every run
	}
	k := runKey{r.TaskID, r.RunID}
	if _, ok := s.roots[k]; ok {
		return
	}
	s.roots[k] = runKey{p.RootTask, p.RootRun}
	if s.rootOrder = append(s.rootOrder, k); len(s.rootOrder) > maxLinkTasks {
		delete(s.roots, s.rootOrder[0])
		s.rootOrder = s.rootOrder[1:]
	}
}

// flags are the trace flags of every span the Sink makes: sampled, unless a
// parent said otherwise.
func (s *Sink) flags() trace.TraceFlags {
	if s.parent.IsValid() {
		return s.parent.TraceFlags()
	}
	return trace.FlagsSampled
}

// Observe implements ingest.Sink.
func (s *Sink) Observe(l ingest.Lifecycle) {
	if l.Run != nil {
		s.nested(l.Run)
	}
	switch l.Kind {
	case ingest.RunStarted, ingest.TaskStarted:
		s.remember(l.Run)
	case ingest.AgentEnded:
		s.agentEnded(l.Run, l.Agent)
	case ingest.RunFinalized:
		if l.Run.Workflow {
			s.finalized(l.Run)
		}
	case ingest.TaskEnded:
		s.task(l.Run)
	}
}

// remember records the run id of a task so that children can link to it.
// Bounded: the oldest tasks are forgotten first.
func (s *Sink) remember(r *ingest.Run) {
	if _, ok := s.lastRun[r.TaskID]; !ok {
		s.lastOrder = append(s.lastOrder, r.TaskID)
		if len(s.lastOrder) > maxLinkTasks {
			delete(s.lastRun, s.lastOrder[0])
			s.lastOrder = s.lastOrder[1:]
		}
	}
	s.lastRun[r.TaskID] = r.RunID
}

func (s *Sink) agentEnded(r *ingest.Run, a *ingest.Agent) {
	if a.Start > 0 && a.End > 0 && !s.hold {
		s.exportAgent(r, a, a.Start, a.End)
		return
	}
	k := runKey{r.TaskID, r.RunID}
	s.deferred[k] = append(s.deferred[k], a.Index)
}

// finalized exports what waited for the run's end. Every time is the
// Tracker's, as settled at finalize: the run encloses its phases and
// agents, so the spans nest and agree with every other output.
func (s *Sink) finalized(r *ingest.Run) {
	k := runKey{r.TaskID, r.RunID}
	if idx, ok := s.deferred[k]; ok {
		delete(s.deferred, k)
		for _, i := range idx {
			for j := range r.Agents {
				if a := &r.Agents[j]; a.Index == i {
					s.exportAgent(r, a, a.Start, a.End)
				}
			}
		}
	}
	for i := range r.Phases {
		s.exportPhase(r, &r.Phases[i])
	}
	s.exportRoot(r, r.Start, r.End)
}

func ms(v int64) time.Time { return time.UnixMilli(v) }

// parentCtx returns a context whose span is our own (already or later
// exported) span sid of r's trace, for children started in another call.
// The last one is reused for the same span (flags and trace state are the
// Sink's, fixed): siblings follow each other.
func (s *Sink) parentCtx(tid trace.TraceID, sid trace.SpanID) context.Context {
	if m := &s.lastPCtx; m.ctx != nil && m.tid == tid && m.sid == sid {
		return m.ctx
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    tid,
		SpanID:     sid,
		TraceFlags: s.flags(),
		TraceState: s.parent.TraceState(),
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	s.lastPCtx = parentMemo{tid: tid, sid: sid, ctx: ctx}
	return ctx
}

// start starts a span of the Sink at start (epoch ms), internal, with kv
// set after Start: given to Start (trace.WithAttributes) they would be
// copied twice, into the start config and then into the span; SetAttributes
// copies them once, through the same limits, in the same order.
func (s *Sink) start(ctx context.Context, name string, start int64, kv []attribute.KeyValue, links []trace.Link) trace.Span {
	opts := append(s.startOpts[:0], s.kindOpt, trace.WithTimestamp(ms(start)))
	if len(links) > 0 {
		opts = append(opts, trace.WithLinks(links...))
	}
	_, sp := s.tracer.Start(ctx, name, opts...)
	clear(s.startOpts[:])
	sp.SetAttributes(kv...)
	return sp
}

// end ends sp at end (epoch ms).
func (s *Sink) end(sp trace.Span, end int64) {
	s.endOpts[0] = trace.WithTimestamp(ms(end))
	sp.End(s.endOpts[:]...)
	s.endOpts[0] = nil
}

// rootCtx is the start context of a run's root span: the TRACEPARENT parent
// if any, and the ids wanted from IDGenerator.
func (s *Sink) rootCtx(r *ingest.Run) context.Context {
	ctx := context.Background()
	if s.parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, s.parent)
	}
	tid, sid := s.traceID(r.TaskID, r.RunID), s.workflowSpanID(r.TaskID, r.RunID)
	if sc, ok := s.launchedBy(r); ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	} else if p := &r.Parent; p.TaskID != "" {
		// Under the agent that launched it (or the sub-agent task itself).
		psid := SpanID(p.TaskID, p.RunID, kindWorkflow, 0)
		if p.Index >= 0 {
			psid = SpanID(p.TaskID, p.RunID, kindAgent, p.Index)
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tid, SpanID: psid, TraceFlags: s.flags(), TraceState: s.parent.TraceState()}))
	} else if p := r.Resumes; p != nil {
		// A resumed run continues its task: in its first run's trace,
		// under its first run's span, where Jaeger shows the two together.
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tid, SpanID: SpanID(p.TaskID, p.RunID, kindWorkflow, 0), TraceFlags: s.flags(), TraceState: s.parent.TraceState()}))
	}
	return withIDs(ctx, tid, sid)
}

// launchedBy is the CLI's span that launched r, when the Launcher knows it
// and it lies in the trace r is exported in (the CLI took our TRACEPARENT);
// a span of another trace cannot be a parent.
func (s *Sink) launchedBy(r *ingest.Run) (trace.SpanContext, bool) {
	if s.launcher == nil || r.ToolUseID == "" {
		return trace.SpanContext{}, false
	}
	sc, ok := s.launcher(r.ToolUseID)
	if !ok || !sc.IsValid() || sc.TraceID() != s.traceID(r.TaskID, r.RunID) {
		return trace.SpanContext{}, false
	}
	return sc, true
}

// ExportParent exports the span Options.Parent names, when this process
// minted it (run --cli-telemetry.join without a TRACEPARENT of the user's):
// the CLI's interactions and our runs hang off it, so it must exist.
func (s *Sink) ExportParent(name string, start, end time.Time, kv ...attribute.KeyValue) {
	if !s.parent.IsValid() {
		return
	}
	ctx := withIDs(context.Background(), s.parent.TraceID(), s.parent.SpanID())
	_, sp := s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(start),
		trace.WithAttributes(kv...), trace.WithNewRoot())
	sp.End(trace.WithTimestamp(end))
}

// common are the attributes of every span of a run, in the Sink's scratch
// slice: the SDK copies a span's attributes at Start, so one slice serves
// every span (a fresh one per span was a sixth of serve's allocation with
// 256 busy streams). Only valid until the next call.
func (s *Sink) common(r *ingest.Run) []attribute.KeyValue {
	kv := s.kv[:0]
	defer func() { s.kv = kv[:0] }()
	kv = append(kv, attribute.String(AttrTaskID, r.TaskID))
	if r.RunID != "" {
		kv = append(kv, attribute.String(AttrRunID, r.RunID))
	}
	if r.SessionID != "" {
		kv = append(kv, attribute.String(AttrConversationID, r.SessionID))
	}
	return kv
}

func (s *Sink) exportAgent(r *ingest.Run, a *ingest.Agent, start, end int64) {
	var parent trace.SpanID
	if a.PhaseIndex != 0 {
		// Every phase an agent names exists by RunFinalized (the Tracker
		// derives missing ones), so the phase span will be there.
		parent = s.phaseSpanID(r.TaskID, r.RunID, a.PhaseIndex)
	} else {
		parent = s.workflowSpanID(r.TaskID, r.RunID)
	}
	tid := s.traceID(r.TaskID, r.RunID)
	ctx := withIDs(s.parentCtx(tid, parent), tid, SpanID(r.TaskID, r.RunID, kindAgent, a.Index))
	name := OpInvokeAgent
	if a.Label != "" {
		name += " " + a.Label
	}
	kv := s.common(r)
	kv = append(kv,
		attribute.String(AttrOperationName, OpInvokeAgent),
		attribute.Int(AttrAgentIndex, a.Index),
		attribute.String(AttrAgentState, a.State.String()),
		attribute.Bool(AttrAgentCached, a.State == ingest.AgentCached),
		attribute.Int64(AttrUsageTotalTokens, a.Tokens),
		attribute.Int64(AttrUsageToolUses, a.ToolCalls),
		attribute.String(AttrProviderName, providerName(r)),
	)
	kv = costAttrs(kv, &a.Cost)
	if a.AgentID != "" {
		kv = append(kv, attribute.String(AttrAgentID, a.AgentID))
	}
	if a.Label != "" {
		kv = append(kv, attribute.String(AttrAgentName, a.Label))
	}
	if a.PhaseIndex != 0 {
		kv = append(kv, attribute.Int(AttrPhaseIndex, a.PhaseIndex))
	}
	if a.EndInferred {
		kv = append(kv, attribute.Bool(AttrAgentEndInferred, true))
	}
	var code codes.Code
	var msg string
	switch a.State {
	case ingest.AgentError:
		code, msg = codes.Error, a.Error
		if msg == "" {
			msg = "agent ended in error"
		}
		kv = append(kv, attribute.String(AttrErrorType, ErrorTypeAgentError))
	case ingest.AgentAbandoned:
		code, msg = codes.Error, "abandoned: the run ended before the agent did"
		kv = append(kv, attribute.String(AttrErrorType, ErrorTypeAbandoned))
	}
	if s.previews {
		if v := safetext.Cut(a.PromptPreview, maxPreviewLen); v != "" {
			kv = append(kv, attribute.String(AttrPromptPreview, v))
		}
		if v := safetext.Cut(a.ResultPreview, maxPreviewLen); v != "" {
			kv = append(kv, attribute.String(AttrResultPreview, v))
		}
	}
	sp := s.start(ctx, name, start, kv, nil)
	if code == codes.Error {
		sp.SetStatus(code, safetext.Cut(msg, maxStatusLen))
	}
	s.end(sp, end)
}

func (s *Sink) exportPhase(r *ingest.Run, p *ingest.Phase) {
	start, end := p.Start, p.End
	tid := s.traceID(r.TaskID, r.RunID)
	ctx := withIDs(s.parentCtx(tid, s.workflowSpanID(r.TaskID, r.RunID)), tid, s.phaseSpanID(r.TaskID, r.RunID, p.Index))
	name := SpanPhase + " "
	if p.Title != "" {
		name += p.Title
	} else {
		name += strconv.Itoa(p.Index)
	}
	kv := s.common(r)
	kv = append(kv, attribute.Int(AttrPhaseIndex, p.Index))
	if p.Title != "" {
		kv = append(kv, attribute.String(AttrPhaseTitle, p.Title))
	}
	if p.Child {
		kv = append(kv, attribute.String(AttrPhaseKind, "child"))
	}
	s.end(s.start(ctx, name, start, kv, nil), end)
}

// link returns a link to the root span of r's parent task, when that task
// was seen in this stream: the run the Tracker kept of it (even finalized
// long ago), else (a run restored from an older checkpoint) the task's last
// run this sink saw.
func (s *Sink) link(r *ingest.Run) []trace.Link {
	if r.ParentTaskID == "" || r.Parent.TaskID != "" {
		return nil // no parent task, or its agent is the span's parent
	}
	var tid trace.TraceID
	var run string
	if l := r.ParentLink; l != nil && l.TaskID == r.ParentTaskID {
		run = l.RunID
		tid = TraceID(l.RootTask, l.RootRun)
		if s.parent.IsValid() {
			tid = s.parent.TraceID()
		}
	} else {
		var ok bool
		if run, ok = s.lastRun[r.ParentTaskID]; !ok {
			return nil
		}
		tid = s.traceID(r.ParentTaskID, run)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    tid,
		SpanID:     SpanID(r.ParentTaskID, run, kindWorkflow, 0),
		TraceFlags: s.flags(),
	})
	return []trace.Link{{SpanContext: sc, Attributes: []attribute.KeyValue{
		attribute.String(AttrLinkType, LinkParentTask),
		attribute.String(AttrTaskID, r.ParentTaskID),
	}}}
}

// runStatus maps a terminal status to the span status and error.type.
func runStatus(r *ingest.Run, kv []attribute.KeyValue, failedMsg string) (codes.Code, string, []attribute.KeyValue) {
	switch r.Status {
	case ingest.StatusFailed:
		msg := r.Error
		if msg == "" {
			msg = failedMsg
		}
		return codes.Error, msg, append(kv, attribute.String(AttrErrorType, ErrorTypeFailed))
	case ingest.StatusAbandoned:
		return codes.Error, "abandoned: the stream ended before the task_notification", append(kv, attribute.String(AttrErrorType, ErrorTypeAbandoned))
	}
	// Completed and stopped are not errors: a user cancel is a normal end,
	// marked by the status attribute.
	return codes.Unset, "", kv
}

func (s *Sink) exportRoot(r *ingest.Run, start, end int64) {
	name := OpInvokeWorkflow
	if r.Name != "" {
		name += " " + r.Name
	}
	kv := s.common(r)
	kv = append(kv,
		attribute.String(AttrOperationName, OpInvokeWorkflow),
		attribute.String(AttrTaskType, r.TaskType),
		attribute.String(AttrWorkflowStatus, r.Status.String()),
		attribute.Bool(AttrWorkflowAbandoned, r.Status == ingest.StatusAbandoned),
		attribute.Int64(AttrUsageTotalTokens, r.Usage.TotalTokens),
		attribute.Int64(AttrUsageToolUses, r.Usage.ToolUses),
		attribute.Int(AttrWorkflowAgents, len(r.Agents)),
		attribute.String(AttrProviderName, providerName(r)),
	)
	kv = costAttrs(kv, &r.Cost)
	if r.Name != "" {
		kv = append(kv, attribute.String(AttrWorkflowName, r.Name))
	}
	if r.Reason != "" {
		kv = append(kv, attribute.String(AttrStopReason, r.Reason))
	}
	if r.SpawnDepth > 0 {
		kv = append(kv, attribute.Int(AttrSpawnDepth, r.SpawnDepth))
	}
	if r.InterruptLatencyMs >= 0 {
		kv = append(kv, attribute.Int64(AttrInterruptLatency, r.InterruptLatencyMs))
	}
	s.root(r, name, start, end, kv, "workflow failed")
}

// task exports a plain background task (a sub-agent, a shell) as one span
// invoke_task {task_type} in a trace of its own, so that workflows it
// launched can link to it.
func (s *Sink) task(r *ingest.Run) {
	start, end := r.Start, r.End // fixed by the Tracker at TaskEnded
	name := SpanTask
	if r.TaskType != "" {
		name += " " + r.TaskType
	}
	kv := s.common(r)
	kv = append(kv,
		attribute.String(AttrTaskType, r.TaskType),
		attribute.String(AttrTaskStatus, r.Status.String()),
		attribute.Int64(AttrUsageTotalTokens, r.Usage.TotalTokens),
		attribute.Int64(AttrUsageToolUses, r.Usage.ToolUses),
	)
	if r.Reason != "" {
		kv = append(kv, attribute.String(AttrStopReason, r.Reason))
	}
	if r.SpawnDepth > 0 {
		kv = append(kv, attribute.Int(AttrSpawnDepth, r.SpawnDepth))
	}
	s.root(r, name, start, end, kv, "task failed")
}

// root exports the root span of a run (a workflow or a plain task): the
// opt-in summary, the status from the run's terminal status, the link to
// its parent task.
func (s *Sink) root(r *ingest.Run, name string, start, end int64, kv []attribute.KeyValue, failMsg string) {
	if s.previews {
		if v := safetext.Cut(r.Summary, maxPreviewLen); v != "" {
			kv = append(kv, attribute.String(AttrSummary, v))
		}
	}
	code, msg, kv := runStatus(r, kv, failMsg)
	sp := s.start(s.rootCtx(r), name, start, kv, s.link(r))
	if code == codes.Error {
		sp.SetStatus(code, safetext.Cut(msg, maxStatusLen))
	}
	s.end(sp, end)
}

// providerName is gen_ai.provider.name: the stream tells which CLI wrote it
// by run_id, which only Claude Code's task events carry.
func providerName(r *ingest.Run) string {
	if r.RunID != "" {
		return ProviderAnthropic
	}
	return ProviderCodeBuddy
}

// costAttrs adds what the CLI's own telemetry said a run or an agent cost,
// when it said anything. gen_ai.usage.input_tokens includes the cached
// input, as the conventions ask; the cache split has names of its own.
func costAttrs(kv []attribute.KeyValue, c *cost.Sum) []attribute.KeyValue {
	if !c.Known() {
		return kv
	}
	t := c.Tokens
	return append(kv,
		attribute.Int64(AttrUsageInputTokens, t[cost.TokensInput]+t[cost.TokensCacheRead]+t[cost.TokensCacheCreation]),
		attribute.Int64(AttrUsageOutputTokens, t[cost.TokensOutput]),
		attribute.Int64(AttrUsageCacheRead, t[cost.TokensCacheRead]),
		attribute.Int64(AttrUsageCacheWrite, t[cost.TokensCacheCreation]),
		attribute.Float64(AttrUsageCostUSD, c.CostUSD),
		attribute.Int64(AttrUsageModelCalls, c.Calls),
	)
}
