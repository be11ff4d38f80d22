package main

import (
	"context"
	crand "crypto/rand"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/cbc-otel/cbc-otel/clitelemetry"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/join"
	"github.com/cbc-otel/cbc-otel/traces"
)

// Bounds of run --join-cli-telemetry's own waits. The CLI flushes its
// telemetry before it exits (2 s by default), so by the time the child is
// gone every request has arrived or is being answered.
const (
	joinReceiverDrain = 3 * time.Second // answering the requests in progress
	joinStreamWait    = 3 * time.Second // the pipeline catching up with the stream
	joinExpireEvery   = 500 * time.Millisecond
)

// childTelemetryForced are set for the child whatever cbc-otel's own
// environment says: there they configure cbc-otel's export; for the
// child they are the join's plumbing. Values are filled in by childEnv.
var childTelemetryForced = []string{
	"OTEL_TRACES_EXPORTER", "OTEL_LOGS_EXPORTER", "OTEL_METRICS_EXPORTER",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
}

// childTelemetryDefaults switch the CLI's own telemetry on, unless the
// environment already says otherwise: the user's choice wins.
var childTelemetryDefaults = [][2]string{
	{"CLAUDE_CODE_ENABLE_TELEMETRY", "1"},
	{"CLAUDE_CODE_ENHANCED_TELEMETRY_BETA", "1"}, // no spans without it (2.1.334)
	// Short intervals: spans and cost should reach the pipeline within
	// the grace window of the run they belong to.
	{"OTEL_TRACES_EXPORT_INTERVAL", "1000"},
	{"OTEL_LOGS_EXPORT_INTERVAL", "1000"},
	{"OTEL_METRIC_EXPORT_INTERVAL", "10000"},
}

// childEnv is the child's environment under --join-cli-telemetry: base
// (cbc-otel's own), with the CLI's telemetry switched on and pointed at
// the receiver (endpoint, a base URL), and TRACEPARENT set to parent unless
// base has one. Precedence, documented in the README: the variables of
// childTelemetryForced are ours; the others are set only when base lacks
// them. To set anything for the child alone, put it on the command line
// (`-- env VAR=value claude ...`): it applies after us.
func childEnv(base []string, endpoint string, parent trace.SpanContext) []string {
	env := slices.Clone(base)
	has := func(k string) bool {
		for _, kv := range env {
			if strings.HasPrefix(kv, k+"=") {
				return true
			}
		}
		return false
	}
	env = slices.DeleteFunc(env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(childTelemetryForced, k)
	})
	for _, sig := range []string{"TRACES", "LOGS", "METRICS"} {
		env = append(env,
			"OTEL_"+sig+"_EXPORTER=otlp",
			"OTEL_EXPORTER_OTLP_"+sig+"_ENDPOINT="+endpoint+"/v1/"+strings.ToLower(sig),
			"OTEL_EXPORTER_OTLP_"+sig+"_PROTOCOL=http/protobuf")
	}
	for _, d := range childTelemetryDefaults {
		if !has(d[0]) {
			env = append(env, d[0]+"="+d[1])
		}
	}
	if !has("TRACEPARENT") && parent.IsValid() {
		env = append(env, "TRACEPARENT=00-"+parent.TraceID().String()+"-"+parent.SpanID().String()+"-"+parent.TraceFlags().String())
	}
	return env
}

// mintParent returns the user's TRACEPARENT, or a new sampled span context
// (minted true) for the span the wrapper exports around the child.
func mintParent(env func(string) string) (sc trace.SpanContext, minted bool) {
	if p := traces.ParentFromEnv(env); p.IsValid() {
		return p, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	for !tid.IsValid() || !sid.IsValid() {
		_, _ = crand.Read(tid[:]) // crypto/rand.Read never fails on supported platforms
		_, _ = crand.Read(sid[:])
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}), true
}

// cliJoin is run --join-cli-telemetry at work: the receiver of the CLI's
// own telemetry, the joiner, and the forwarder of its logs and metrics.
type cliJoin struct {
	parent  trace.SpanContext
	minted  bool
	started time.Time
	joiner  *join.Joiner
	recv    *clitelemetry.Receiver
	fwd     *clitelemetry.Forwarder
	pipe    *ingest.Pipeline
	stop    context.CancelFunc
	expired chan struct{}
	log     *slog.Logger
}

// newCLIJoin prepares the join before the telemetry starts: the traces
// sink needs the parent, the launcher and to hold agent spans.
func newCLIJoin(cfg *runConfig, log *slog.Logger) *cliJoin {
	j := &cliJoin{log: log}
	j.parent, j.minted = mintParent(os.Getenv)
	j.joiner = join.New(join.Options{Hold: cfg.tel.grace, Logger: log})
	cfg.tel.traces.join = &tracesJoin{parent: j.parent, launcher: j.joiner.Launcher}
	return j
}

// start wires the joiner to the pipeline and the sinks, and starts the
// receiver. A receiver that cannot start is logged: the child runs without
// its telemetry joined, as it would without the flag.
func (j *cliJoin) start(ctx context.Context, tel *telemetry, p *ingest.Pipeline) error {
	j.pipe = p
	var sk *traces.Sink
	if tel.traces.enabled() {
		sk = tel.traces.sk
	}
	prov := tel.traces.prov
	target := prov.OTLP()
	endpoint := target.Endpoint
	if !target.On {
		endpoint = "none" // logs and metrics go where OTLP spans go: nowhere
	}
	fwd, err := clitelemetry.NewForwarder(ctx, clitelemetry.ForwarderConfig{Protocol: target.Protocol, Endpoint: endpoint, Logger: j.log})
	if err != nil {
		j.log.Error("forwarding the CLI's logs and metrics", "err", err)
	}
	j.fwd = fwd
	opts := join.Options{
		Submit:  p.Submit,
		Spans:   func(rs []*tracepb.ResourceSpans) { prov.Forward(clitelemetry.ReadOnlySpans(rs)) },
		Logs:    func(r *collogspb.ExportLogsServiceRequest) { j.fwd.Logs(ctx, r) },
		Metrics: func(r *colmetricspb.ExportMetricsServiceRequest) { j.fwd.Metrics(ctx, r) },
		Hold:    tel.flags.grace,
		Logger:  j.log,
	}
	if sk != nil {
		opts.AgentSpan = sk.AgentSpanContext
	}
	j.joiner.Configure(opts)
	recv, err := clitelemetry.Listen(clitelemetry.ReceiverConfig{Logger: j.log}, j.joiner)
	if err != nil {
		return err
	}
	j.recv = recv
	if err := tel.metrics.registry().Register(j.collector()); err != nil {
		j.log.Error("registering the join metrics", "err", err)
	}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	j.stop, j.expired = stop, make(chan struct{})
	go func() { defer close(j.expired); j.joiner.Run(rctx, joinExpireEvery) }()
	j.started = time.Now()
	j.log.Info("joining the CLI's own telemetry", "receiver", recv.Endpoint(), "traceparent", j.parent.TraceID(), "minted", j.minted)
	return nil
}

// env is the child's environment; nil (the wrapper's own) when the
// receiver did not start.
func (j *cliJoin) env() []string {
	if j == nil || j.recv == nil {
		return nil
	}
	return childEnv(os.Environ(), j.recv.Endpoint(), j.parent)
}

// childDone runs once the child has exited: the receiver answers what is
// in progress (the CLI's last flush came before its exit) and stops.
func (j *cliJoin) childDone(ctx context.Context) {
	if j == nil || j.recv == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), joinReceiverDrain)
	defer cancel()
	if err := j.recv.Shutdown(dctx); err != nil {
		j.log.Warn("stopping the CLI telemetry receiver", "err", err)
	}
}

// streamDone runs once the taps are closed: when the pipeline has read the
// whole stream (every agent named that will ever be), the spans still held
// go as they are, and the pipeline may close.
func (j *cliJoin) streamDone(ctx context.Context) {
	if j == nil || j.pipe == nil {
		return
	}
	select {
	case <-j.pipe.StreamDone():
	case <-time.After(joinStreamWait):
		j.log.Warn("the pipeline did not catch up with the stream in time: spans of agents it had not seen yet go unjoined")
	case <-ctx.Done():
	}
	if j.stop != nil {
		j.stop()
		<-j.expired
	}
	j.pipe.EndCalls()
}

// shutdown exports the minted parent span and flushes the forwarder, under
// ctx's deadline.
func (j *cliJoin) shutdown(ctx context.Context, tel *telemetry, command string) {
	if j == nil {
		return
	}
	if j.minted && tel != nil && tel.traces.enabled() && !j.started.IsZero() {
		tel.traces.sk.ExportParent("run "+filepath.Base(command), j.started, time.Now(),
			attribute.String("process.executable.name", filepath.Base(command)))
	}
	if j.fwd != nil {
		if err := j.fwd.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			j.log.Warn("flushing the CLI's logs and metrics", "err", err)
		}
	}
}

// collector exports the join's counters.
func (j *cliJoin) collector() prometheus.Collector {
	return &joinCollector{j: j,
		spans: prometheus.NewDesc("cbc_otel_cli_spans_total",
			"Spans of the CLI's own telemetry (run --join-cli-telemetry) by what the join did: received (all), reparented (under an agent's span), unmatched (its agent never named within the hold), foreign (another trace), overflow (the hold was full).", []string{"outcome"}, nil),
		requests: prometheus.NewDesc("cbc_otel_cli_requests_total",
			"OTLP requests of the CLI's own telemetry, by signal and outcome (ok, bad_request, unsupported_media, too_large, busy, wrong_method).", []string{"signal", "outcome"}, nil),
		calls: prometheus.NewDesc("cbc_otel_cli_model_calls_total",
			"api_request events of the CLI's own telemetry by outcome: handled (handed to the pipeline), lost (its queue was full).", []string{"outcome"}, nil),
		forwarded: prometheus.NewDesc("cbc_otel_cli_forward_lost_total",
			"The CLI's log records and metric points not forwarded (queue full, export failed, unsupported), by signal.", []string{"signal"}, nil),
	}
}

type joinCollector struct {
	j                                 *cliJoin
	spans, requests, calls, forwarded *prometheus.Desc
}

func (c *joinCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.spans
	ch <- c.requests
	ch <- c.calls
	ch <- c.forwarded
}

func (c *joinCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	st := c.j.joiner.Stats()
	counter(c.spans, st.Spans.Load(), "received")
	counter(c.spans, st.Reparented.Load(), "reparented")
	counter(c.spans, st.Unmatched.Load(), "unmatched")
	counter(c.spans, st.Foreign.Load(), "foreign")
	counter(c.spans, st.HeldDropped.Load(), "overflow")
	counter(c.calls, st.ModelCalls.Load()-st.CallsLost.Load(), "handled")
	counter(c.calls, st.CallsLost.Load(), "lost")
	if c.j.fwd != nil {
		logs, points := c.j.fwd.Losses()
		counter(c.forwarded, logs, "logs")
		counter(c.forwarded, points, "metrics")
	}
	if c.j.recv == nil {
		return
	}
	rs := c.j.recv.Stats()
	for _, s := range []struct {
		name string
		st   *clitelemetry.SignalStats
	}{{"traces", &rs.Traces}, {"logs", &rs.Logs}, {"metrics", &rs.Metrics}} {
		counter(c.requests, s.st.OK.Load(), s.name, "ok")
		counter(c.requests, s.st.BadRequest.Load(), s.name, "bad_request")
		counter(c.requests, s.st.UnsupportedMedia.Load(), s.name, "unsupported_media")
		counter(c.requests, s.st.TooLarge.Load(), s.name, "too_large")
		counter(c.requests, s.st.Busy.Load(), s.name, "busy")
		counter(c.requests, s.st.WrongMethod.Load(), s.name, "wrong_method")
	}
}
