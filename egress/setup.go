package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/cbc-otel/cbc-otel/internal/otlpconv"
)

// Exporter and protocol names, as in OTEL_TRACES_EXPORTER and
// OTEL_EXPORTER_OTLP_PROTOCOL.
const (
	ExporterOTLP    = "otlp"
	ExporterNone    = "none"
	ExporterConsole = "console"

	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES say otherwise.
const DefaultServiceName = "cbc-otel"

// Config selects where spans go. Fields left empty fall back to the
// standard environment variables; flags set them and so override the
// environment.
//
// The environment is read in two places, and each variable in one only:
//
//   - The SDK reads its own variables from the process environment:
//     OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT, _HEADERS, _CERTIFICATE,
//     _CLIENT_CERTIFICATE, _CLIENT_KEY, _COMPRESSION, _TIMEOUT and
//     _INSECURE (the exporters), OTEL_SERVICE_NAME and
//     OTEL_RESOURCE_ATTRIBUTES (resource.WithFromEnv). A field set here
//     (Endpoint) is passed as an option and so overrides its variable. Where
//     New must look at one of these itself (the endpoint, to decide
//     whether OTLP is on and to describe it; the headers, to refuse a
//     malformed list; the timeout, see ExportTimeout) it reads the process
//     environment too, so that it and the SDK never disagree.
//   - Env serves the variables only this package interprets, for which the
//     SDK has no switch: OTEL_TRACES_EXPORTER and
//     OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL.
//
// Tests therefore inject the environment with t.Setenv.
type Config struct {
	// Exporter is otlp, none or console; "" reads OTEL_TRACES_EXPORTER. When
	// neither says, OTLP is used if an endpoint is configured. "none" turns
	// OTLP off (a File is still written). console writes OTLP/JSON lines to
	// Console and is refused when Console is nil (run mode: stdout is the
	// child's).
	Exporter string
	// Endpoint is the OTLP endpoint: a URL (http://host:4317, https://...)
	// or host:port (plaintext); an HTTP endpoint without a path gets
	// /v1/traces. It overrides the environment's endpoint. "" leaves the
	// endpoint to the exporter, which reads OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	// (used as is) then OTEL_EXPORTER_OTLP_ENDPOINT (a base URL: HTTP
	// appends /v1/traces); those must be http or https URLs. "none", here or
	// in either variable, turns OTLP off.
	Endpoint string
	// Protocol is grpc or http/protobuf; "" reads
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL then OTEL_EXPORTER_OTLP_PROTOCOL
	// through Env, defaulting to grpc.
	Protocol string
	// File, if set, receives OTLP/JSON, one ExportTraceServiceRequest per line.
	File string
	// Console is where the console exporter writes (stderr; never stdout in
	// run mode).
	Console io.Writer
	// QueueSize bounds the queue of ended spans per exporter; 0 means
	// DefaultQueueSize. When full, spans are dropped and counted.
	QueueSize int
	// BatchInterval is how often queued spans are exported; 0 means
	// DefaultBatchInterval.
	BatchInterval time.Duration
	// ExportTimeout is the batching processor's bound on one export call,
	// whatever the exporter does. 0 means DefaultExportTimeout, raised for
	// OTLP to OTEL_EXPORTER_OTLP[_TRACES]_TIMEOUT when that is longer, so
	// that the exporter's own timeout (10s by default) is not cut short.
	// That one bounds a whole gRPC export, retries included, but each HTTP
	// attempt, which the HTTP exporter retries until this bound.
	ExportTimeout time.Duration
	// Forward also builds the forwarder of the CLI's own log records and
	// metrics (run --join-cli-telemetry): they go where OTLP spans go, over
	// the same protocol (resolve says each signal's endpoint), and nowhere
	// when spans go to no OTLP endpoint.
	Forward bool
	// IDGenerator makes the ids of spans; nil means the SDK's random one.
	// The traces sink passes its deterministic generator
	// (traces.NewIDGenerator), so that a replay exports the same ids.
	IDGenerator sdktrace.IDGenerator
	// ServiceVersion, if set, becomes service.version unless
	// OTEL_RESOURCE_ATTRIBUTES sets it.
	ServiceVersion string
	// Env reads OTEL_TRACES_EXPORTER and the protocol variables; nil means
	// os.Getenv. A caller may hide or replace them; the SDK's variables
	// always come from the process environment.
	Env func(string) string
	// Logger receives each exporter's failures as they happen: the first
	// at warn with the endpoint, the protocol and the cause, then at most
	// one line per ReportEvery, and at info that exports succeed again.
	// nil: not said (Losses still tells at the end).
	Logger *slog.Logger
	// ReportEvery is the least time between two failure lines of one
	// exporter; 0 means DefaultReportEvery.
	ReportEvery time.Duration
	// Now is the clock of the rate limiting; nil means time.Now.
	Now func() time.Time
}

// Egress is everything of one process that leaves over OTLP (or to an
// OTLP/JSON file or the console): the TracerProvider New builds (the SDK
// provider with Config.IDGenerator and one bounded batching processor per
// exporter). A nil *Egress is valid and exports nothing.
type Egress struct {
	tp    *sdktrace.TracerProvider
	procs []*batcher
	desc  []string
	// otlp is the OTLP target in use (see OTLP).
	otlp OTLPTarget
	// fwd forwards the CLI's logs and metrics; nil without Config.Forward.
	fwd *forwarder
}

// OTLPTarget is where an Egress's OTLP exporter sends, as configured: the
// protocol, and the endpoint when a flag set it (else the exporters read
// the environment).
type OTLPTarget struct {
	On       bool
	Protocol string
	Endpoint string // the flag's endpoint; "" when the environment says
}

// OTLP returns the OTLP target in use; On is false when spans go to no
// OTLP endpoint.
func (p *Egress) OTLP() OTLPTarget {
	if p == nil {
		return OTLPTarget{}
	}
	return p.otlp
}

// ForwardSpans queues spans made elsewhere (the CLI's own, re-parented),
// converted to SDK spans, for every span exporter of the Egress, like the
// spans it makes itself: never blocking, dropped and counted when a queue
// is full.
func (p *Egress) ForwardSpans(rs []*tracepb.ResourceSpans) {
	if p == nil || len(p.procs) == 0 {
		return
	}
	spans := otlpconv.ReadOnlySpans(rs)
	for _, b := range p.procs {
		for _, s := range spans {
			b.OnEnd(s)
		}
	}
}

// ForwardLogs queues the CLI's log records for their OTLP endpoint; it
// never blocks. Nothing without Config.Forward.
func (p *Egress) ForwardLogs(req *collogspb.ExportLogsServiceRequest) {
	if p != nil {
		p.fwd.Logs(context.Background(), req)
	}
}

// ForwardMetrics queues the CLI's metrics for their OTLP endpoint; it
// never blocks. Nothing without Config.Forward.
func (p *Egress) ForwardMetrics(req *colmetricspb.ExportMetricsServiceRequest) {
	if p != nil {
		p.fwd.Metrics(context.Background(), req)
	}
}

// ForwardLost is how many of the CLI's log records and metric points were
// not delivered so far (final after Shutdown); ok is false when they are
// not forwarded at all.
func (p *Egress) ForwardLost() (logRecords, metricPoints int64, ok bool) {
	if p == nil || p.fwd == nil {
		return 0, 0, false
	}
	logRecords, metricPoints = p.fwd.lost()
	return logRecords, metricPoints, true
}

// TracerProvider is where the spans that leave through p are made. It also
// offers Dropped and ExportErrors, which the traces sink reads. On a nil
// Egress it is a no-op provider.
func (p *Egress) TracerProvider() trace.TracerProvider {
	if p == nil {
		return noop.NewTracerProvider()
	}
	return tracerProvider{e: p}
}

// tracerProvider is an Egress's trace.TracerProvider.
type tracerProvider struct {
	embedded.TracerProvider
	e *Egress
}

var _ trace.TracerProvider = tracerProvider{}

func (t tracerProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return t.e.tp.Tracer(name, opts...)
}

// Dropped and ExportErrors are the Egress's, for the traces sink.
func (t tracerProvider) Dropped() float64 { return t.e.Dropped() }

func (t tracerProvider) ExportErrors() float64 { return t.e.ExportErrors() }

// New builds the Egress that cfg and the environment ask for. With no
// OTLP endpoint, no file and no console it returns nil, nil: no export at
// all, and the wrapper stays a pure pipe.
func New(ctx context.Context, cfg Config) (*Egress, error) {
	env := cfg.Env
	if env == nil {
		env = os.Getenv
	}
	exporter := strings.ToLower(strings.TrimSpace(firstNonEmpty(cfg.Exporter, env("OTEL_TRACES_EXPORTER"))))
	// OTEL_TRACES_EXPORTER may be a list; we support one OTLP exporter and
	// one console, so read it as a set.
	want := map[string]bool{}
	for _, e := range strings.Split(exporter, ",") {
		if e = strings.TrimSpace(e); e != "" {
			want[e] = true
		}
	}
	for e := range want {
		switch e {
		case ExporterOTLP, ExporterNone, ExporterConsole:
		default:
			return nil, fmt.Errorf("traces exporter %q: want otlp, none or console", e)
		}
	}
	if want[ExporterConsole] && cfg.Console == nil {
		return nil, errors.New("traces exporter console: not available here (stdout carries the wrapped CLI's stream); use --traces-file")
	}

	ep, epErr := resolve(cfg.Endpoint, signalTraces)
	protocol, protoErr := resolveProtocol(cfg.Protocol, signalTraces, env)
	epErr = errors.Join(epErr, protoErr)
	useOTLP := !want[ExporterNone] && ep != nil && (len(want) == 0 || want[ExporterOTLP])
	if want[ExporterOTLP] && ep == nil {
		return nil, errors.New("traces exporter otlp: no endpoint (set --otlp.endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)")
	}
	if useOTLP && epErr != nil {
		// Only an endpoint in use is worth refusing to start over.
		return nil, epErr
	}
	if !useOTLP && cfg.File == "" && !want[ExporterConsole] {
		return nil, nil
	}

	res, err := newResource(ctx, cfg.ServiceVersion)
	if err != nil {
		return nil, err
	}
	p := &Egress{}
	fail := func(err error) (*Egress, error) {
		for _, b := range p.procs {
			_ = b.Shutdown(ctx)
		}
		_ = p.fwd.Shutdown(ctx)
		return nil, err
	}
	reporter := func(endpoint, protocol string) *exportReporter {
		return newExportReporter(cfg.Logger, cfg.Now, cfg.ReportEvery, endpoint, protocol)
	}
	if useOTLP {
		rep := reporter("", "")
		exp, desc, err := otlpExporter(ctx, protocol, ep, rep)
		if err != nil {
			return fail(err)
		}
		p.add(exp, desc, rep, cfg, exportTimeout(cfg.ExportTimeout, signalTraces))
		p.otlp = OTLPTarget{On: true, Protocol: protocol}
		if ep.flag {
			p.otlp.Endpoint = cfg.Endpoint
		}
		if cfg.Forward {
			p.fwd, err = newForwarder(ctx, forwardConfig{Protocol: protocol, Endpoint: cfg.Endpoint, Env: env,
				Logger: cfg.Logger, Now: cfg.Now, ReportEvery: cfg.ReportEvery})
			if err != nil {
				// The spans still go: only the CLI's logs and metrics do not.
				logger(cfg.Logger).Error("the CLI's logs and metrics will not be forwarded", "err", err)
			}
		}
	}
	if cfg.File != "" {
		exp, err := newFileExporter(cfg.File)
		if err != nil {
			return fail(err)
		}
		p.add(exp, "OTLP/JSON file → "+cfg.File, reporter(cfg.File, "OTLP/JSON file"), cfg, cfg.ExportTimeout)
	}
	if want[ExporterConsole] {
		p.add(newWriterExporter(cfg.Console), "OTLP/JSON → stderr", reporter("stderr", "console"), cfg, cfg.ExportTimeout)
	}
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		// The parent-based default honours a TRACEPARENT's sampled flag;
		// without one every run is recorded.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
	}
	if cfg.IDGenerator != nil {
		opts = append(opts, sdktrace.WithIDGenerator(cfg.IDGenerator))
	}
	for _, b := range p.procs {
		opts = append(opts, sdktrace.WithSpanProcessor(b))
	}
	p.tp = sdktrace.NewTracerProvider(opts...)
	return p, nil
}

func (p *Egress) add(exp sdktrace.SpanExporter, desc string, rep *exportReporter, cfg Config, exportTimeout time.Duration) {
	p.procs = append(p.procs, newBatcher(exp, rep, cfg.QueueSize, cfg.BatchInterval, exportTimeout))
	p.desc = append(p.desc, desc)
}

// otlpExporter builds the gRPC or HTTP exporter. It passes only what a flag
// set (the endpoint); the exporter reads every other OTEL_EXPORTER_OTLP_*
// variable itself. It tells rep where the exporter sends and, for gRPC,
// wires rep to each attempt.
func otlpExporter(ctx context.Context, protocol string, ep *otlpEndpoint, rep *exportReporter) (sdktrace.SpanExporter, string, error) {
	if err := checkSignalHeaders(signalTraces); err != nil {
		return nil, "", err
	}
	u, pass := ep.exportURL(protocol, signalTraces)
	var exp sdktrace.SpanExporter
	var err error
	switch protocol {
	case ProtocolGRPC:
		opts := []otlptracegrpc.Option{otlptracegrpc.WithDialOption(grpc.WithChainUnaryInterceptor(attemptInterceptor(rep)))}
		if pass {
			opts = append(opts, otlptracegrpc.WithEndpointURL(u.String()))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	case ProtocolHTTP:
		var opts []otlptracehttp.Option
		if pass {
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	default:
		return nil, "", fmt.Errorf("otlp protocol %q: want grpc or http/protobuf", protocol)
	}
	if err != nil {
		return nil, "", fmt.Errorf("otlp %s exporter: %w", protocol, err)
	}
	rep.endpoint, rep.protocol = describe(u, protocol), protocol
	return exp, "OTLP " + protocol + " → " + rep.endpoint, nil
}

// newResource is the SDK's resource: our defaults (service.name
// DefaultServiceName, service.version), then telemetry.sdk.*, then
// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME as resource.WithFromEnv
// reads them from the process environment; each overrides the ones before.
func newResource(ctx context.Context, version string) (*resource.Resource, error) {
	defaults := []attribute.KeyValue{semconv.ServiceName(DefaultServiceName)}
	if version != "" {
		defaults = append(defaults, semconv.ServiceVersion(version))
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(defaults...),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		// A malformed OTEL_RESOURCE_ATTRIBUTES: refuse rather than export
		// under a partial resource.
		return nil, fmt.Errorf("resource: %w", err)
	}
	return res, nil
}

// Describe says where spans go, e.g. "OTLP grpc → http://localhost:4317",
// for a demo to tell the user where to look.
func (p *Egress) Describe() string {
	if p == nil {
		return "none"
	}
	return strings.Join(p.desc, "; ")
}

// Dropped is how many spans will not reach a backend: dropped at a full
// queue, ended after shutdown, lost in a failed export, or abandoned at
// shutdown's deadline. Summed over exporters.
func (p *Egress) Dropped() float64 {
	if p == nil {
		return 0
	}
	var n int64
	for _, b := range p.procs {
		n += b.dropped()
	}
	return float64(n)
}

// ExportErrors is how many export calls failed, summed over exporters; a
// call that Shutdown abandoned at its deadline counts as failed.
func (p *Egress) ExportErrors() float64 {
	if p == nil {
		return 0
	}
	var n int64
	for _, b := range p.procs {
		n += b.exportErrors()
	}
	return float64(n)
}

// Losses says, per span exporter and per forwarded signal that did not
// deliver everything, how much it lost, where it should have gone and
// why; none when all was delivered. Meant for after Shutdown, for a
// summary at exit.
func (p *Egress) Losses() []Loss {
	if p == nil {
		return nil
	}
	var out []Loss
	for _, b := range p.procs {
		if l := b.loss(); l.Items > 0 {
			out = append(out, l)
		}
	}
	for _, l := range p.fwd.losses() {
		if l.Items > 0 {
			out = append(out, l)
		}
	}
	return out
}

// ForceFlush exports what is queued, waiting at most until ctx is done.
func (p *Egress) ForceFlush(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if err := p.tp.ForceFlush(ctx); err != nil {
		return fmt.Errorf("flushing traces: %w", err)
	}
	return nil
}

// Shutdown flushes and stops every exporter, the spans' and the
// forwarded signals' at once. It returns by ctx's deadline whatever the
// backends do; spans it could not deliver are counted in Dropped, and
// everything undelivered in Losses. Safe on nil and idempotent.
func (p *Egress) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	fwdErr := make(chan error, 1)
	go func() { fwdErr <- p.fwd.Shutdown(ctx) }()
	var err error
	if e := p.tp.Shutdown(ctx); e != nil {
		err = fmt.Errorf("shutting down traces: %w", e)
	}
	return errors.Join(err, <-fwdErr)
}

// logger is l, or one that discards.
func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
