package join

import (
	"context"
	crand "crypto/rand"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/cbc-otel/cbc-otel/clitelemetry"
	"github.com/cbc-otel/cbc-otel/ingest"
)

// Bounds of a Session's own waits. The CLI flushes its telemetry before it
// exits (2 s by default), so by the time the child is gone every request
// has arrived or is being answered.
const (
	receiverDrain = 3 * time.Second // answering the requests in progress
	streamWait    = 3 * time.Second // the pipeline catching up with the stream
	expireEvery   = 500 * time.Millisecond
)

// forcedEnv are set for the child whatever the wrapper's own environment
// says: there they configure the wrapper's export; for the child they are
// the join's plumbing. ChildEnv fills in the values.
var forcedEnv = []string{
	"OTEL_TRACES_EXPORTER", "OTEL_LOGS_EXPORTER", "OTEL_METRICS_EXPORTER",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
	// The receiver's token: its only way in (the generic
	// OTEL_EXPORTER_OTLP_HEADERS the child inherits is merged under these).
	"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_LOGS_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
}

// defaultEnv switch the CLI's own telemetry on, unless the environment
// already says otherwise: the user's choice wins.
var defaultEnv = [][2]string{
	{"CLAUDE_CODE_ENABLE_TELEMETRY", "1"},
	{"CLAUDE_CODE_ENHANCED_TELEMETRY_BETA", "1"}, // no spans without it (2.1.334)
	// Short intervals: spans and cost should reach the pipeline within
	// the grace window of the run they belong to.
	{"OTEL_TRACES_EXPORT_INTERVAL", "1000"},
	{"OTEL_LOGS_EXPORT_INTERVAL", "1000"},
	{"OTEL_METRIC_EXPORT_INTERVAL", "10000"},
}

// ChildEnv is the child's environment: base (the wrapper's own), with the
// CLI's telemetry switched on and pointed at the receiver (endpoint, a base
// URL, and headers, the value that presents its token:
// clitelemetry.Receiver.Headers), and TRACEPARENT set to parent unless base
// has one. Precedence: the
// variables of forcedEnv are ours; the others are set only when base lacks
// them. To set anything for the child alone, put it on the command line
// (`-- env VAR=value claude ...`): it applies after us.
func ChildEnv(base []string, endpoint, headers string, parent trace.SpanContext) []string {
	env := slices.DeleteFunc(slices.Clone(base), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(forcedEnv, k)
	})
	has := func(k string) bool {
		return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
	}
	for _, sig := range []string{"TRACES", "LOGS", "METRICS"} {
		env = append(env,
			"OTEL_"+sig+"_EXPORTER=otlp",
			"OTEL_EXPORTER_OTLP_"+sig+"_ENDPOINT="+endpoint+"/v1/"+strings.ToLower(sig),
			"OTEL_EXPORTER_OTLP_"+sig+"_PROTOCOL=http/protobuf",
			"OTEL_EXPORTER_OTLP_"+sig+"_HEADERS="+headers)
	}
	for _, d := range defaultEnv {
		if !has(d[0]) {
			env = append(env, d[0]+"="+d[1])
		}
	}
	if !has("TRACEPARENT") && parent.IsValid() {
		env = append(env, "TRACEPARENT=00-"+parent.TraceID().String()+"-"+parent.SpanID().String()+"-"+parent.TraceFlags().String())
	}
	return env
}

// MintParent returns a new sampled span context: the parent of the CLI's
// spans and of ours when the user gave none.
func MintParent() trace.SpanContext {
	var tid trace.TraceID
	var sid trace.SpanID
	for !tid.IsValid() || !sid.IsValid() {
		_, _ = crand.Read(tid[:]) // crypto/rand.Read never fails on supported platforms
		_, _ = crand.Read(sid[:])
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
}

// Calls is what a Session needs of the pipeline's call queue
// (ingest.CallQueue): made before the Session and the pipeline, and handed
// to both.
type Calls interface {
	Submit(ingest.ModelCall) bool
	StreamDone() <-chan struct{}
	EndCalls()
}

// Outlet is where the CLI's telemetry leaves the process (egress.Egress):
// its spans, once joined, and its logs and metrics as they come. None of
// its methods may block. A nil *egress.Egress is a valid Outlet.
type Outlet interface {
	ForwardSpans([]*tracepb.ResourceSpans)
	ForwardLogs(*collogspb.ExportLogsServiceRequest)
	ForwardMetrics(*colmetricspb.ExportMetricsServiceRequest)
	// ForwardLost is how many log records and metric points were not
	// delivered; ok is false when they are not forwarded at all.
	ForwardLost() (logRecords, metricPoints int64, ok bool)
}

// SessionOptions is everything a Session is made of; the process builds
// them in one place, in order: parent, call queue, egress, the Session,
// then the traces sink (Joiner.Launcher) and the pipeline (Calls).
type SessionOptions struct {
	// Parent is the span context the child's TRACEPARENT names (the
	// user's, or MintParent's).
	Parent trace.SpanContext
	// Calls takes the model calls of the CLI's api_request events; nil
	// drops them.
	Calls Calls
	// AgentSpan is the traces sink's span context of an agent
	// (traces.AgentSpanContext under Parent); nil when no spans are
	// exported (nothing is re-parented then).
	AgentSpan func(task, run string, index int) trace.SpanContext
	// Out takes the CLI's spans, logs and metrics; nil drops them.
	Out Outlet
	// Hold is how long spans wait for their agent.
	Hold   time.Duration
	Logger *slog.Logger
}

// Session is run --cli-telemetry.join for one CLI process: the receiver the
// child exports to and the Joiner, which hands what it joined to the
// Outlet. Its methods follow the child's life: Start before it, ChildEnv
// for it, ChildDone when it exited, StreamDone when its stream was read.
// The Outlet's owner flushes what it forwarded. A nil *Session does
// nothing.
type Session struct {
	Joiner  *Joiner
	recv    *clitelemetry.Receiver
	out     Outlet
	calls   Calls
	parent  trace.SpanContext
	stop    context.CancelFunc
	expired chan struct{}
	log     *slog.Logger
}

// NewSession makes a session and its Joiner, wired to opts once and for
// all; nothing runs until Start.
func NewSession(opts SessionOptions) *Session {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Session{out: opts.Out, calls: opts.Calls, parent: opts.Parent, log: opts.Logger}
	jo := Options{Hold: opts.Hold, Logger: opts.Logger, AgentSpan: opts.AgentSpan}
	if opts.Calls != nil {
		jo.Submit = opts.Calls.Submit
	}
	if opts.Out != nil {
		jo.Spans, jo.Logs, jo.Metrics = opts.Out.ForwardSpans, opts.Out.ForwardLogs, opts.Out.ForwardMetrics
	}
	s.Joiner = New(jo)
	return s
}

// Start starts the receiver. An error means the receiver did not start:
// the child then runs without its telemetry joined, as it would without
// the flag.
func (s *Session) Start(ctx context.Context) error {
	recv, err := clitelemetry.Listen(clitelemetry.ReceiverConfig{Logger: s.log}, s.Joiner)
	if err != nil {
		return err
	}
	s.recv = recv
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stop, s.expired = stop, make(chan struct{})
	go func() { defer close(s.expired); s.Joiner.Run(rctx, expireEvery) }()
	s.log.Info("joining the CLI's own telemetry", "receiver", recv.Endpoint(), "trace", s.parent.TraceID())
	return nil
}

// ChildEnv is the child's environment (see ChildEnv) from base; nil (the
// wrapper's own) when the receiver did not start.
func (s *Session) ChildEnv(base []string) []string {
	if s == nil || s.recv == nil {
		return nil
	}
	return ChildEnv(base, s.recv.Endpoint(), s.recv.Headers(), s.parent)
}

// ChildDone runs once the child has exited: the receiver answers what is
// in progress (the CLI's last flush came before its exit) and stops.
func (s *Session) ChildDone(ctx context.Context) {
	if s == nil || s.recv == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), receiverDrain)
	defer cancel()
	if err := s.recv.Shutdown(dctx); err != nil {
		s.log.Warn("stopping the CLI telemetry receiver", "err", err)
	}
}

// StreamDone runs once the taps are closed: when the pipeline has read the
// whole stream (every agent named that will ever be), the spans still held
// go as they are, and the pipeline may close.
func (s *Session) StreamDone(ctx context.Context) {
	if s == nil || s.calls == nil {
		return
	}
	t := time.NewTimer(streamWait)
	defer t.Stop()
	select {
	case <-s.calls.StreamDone():
	case <-t.C:
		s.log.Warn("the pipeline did not catch up with the stream in time: spans of agents it had not seen yet go unjoined")
	case <-ctx.Done():
	}
	if s.stop != nil {
		s.stop()
		<-s.expired
	}
	s.calls.EndCalls()
}
