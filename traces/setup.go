package traces

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"google.golang.org/grpc"
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
//     Setup must look at one of these itself (the endpoint, to decide
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

// Provider is the TracerProvider Setup builds: the SDK provider with the
// deterministic IDGenerator and one bounded batching processor per
// exporter. A nil *Provider is valid and exports nothing.
type Provider struct {
	embedded.TracerProvider

	tp    *sdktrace.TracerProvider
	procs []*batcher
	desc  []string
	// otlp is the OTLP target in use, for whoever forwards other signals
	// to the same place (see OTLP).
	otlp OTLPTarget
}

// OTLPTarget is where a Provider's OTLP exporter sends, as configured: the
// protocol, and the endpoint when a flag set it (else the exporters read
// the environment).
type OTLPTarget struct {
	On       bool
	Protocol string
	Endpoint string // the flag's endpoint; "" when the environment says
}

// OTLP returns the OTLP target in use; On is false when spans go to no
// OTLP endpoint.
func (p *Provider) OTLP() OTLPTarget {
	if p == nil {
		return OTLPTarget{}
	}
	return p.otlp
}

// Forward queues spans made elsewhere (the CLI's own, re-parented) for
// every exporter of the provider, like the spans it makes itself: never
// blocking, dropped and counted when a queue is full.
func (p *Provider) Forward(spans []sdktrace.ReadOnlySpan) {
	if p == nil {
		return
	}
	for _, b := range p.procs {
		for _, s := range spans {
			b.OnEnd(s)
		}
	}
}

var _ trace.TracerProvider = (*Provider)(nil)

// Setup builds the Provider that cfg and the environment ask for. With no
// OTLP endpoint, no file and no console it returns nil, nil: no export at
// all, and the wrapper stays a pure pipe.
func Setup(ctx context.Context, cfg Config) (*Provider, error) {
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
		return nil, errors.New("traces exporter console: not available here (stdout carries the wrapped CLI's stream); use --traces.file")
	}

	ep, epErr := resolveEndpoint(cfg.Endpoint)
	protocol := firstNonEmpty(cfg.Protocol, env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), env("OTEL_EXPORTER_OTLP_PROTOCOL"), ProtocolGRPC)
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
	p := &Provider{}
	fail := func(err error) (*Provider, error) {
		for _, b := range p.procs {
			_ = b.Shutdown(ctx)
		}
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
		p.add(exp, desc, rep, cfg, otlpExportBound(cfg.ExportTimeout))
		p.otlp = OTLPTarget{On: true, Protocol: protocol}
		if ep.flag {
			p.otlp.Endpoint = cfg.Endpoint
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
		sdktrace.WithIDGenerator(NewIDGenerator()),
		// The parent-based default honours a TRACEPARENT's sampled flag;
		// without one every run is recorded.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
	}
	for _, b := range p.procs {
		opts = append(opts, sdktrace.WithSpanProcessor(b))
	}
	p.tp = sdktrace.NewTracerProvider(opts...)
	return p, nil
}

func (p *Provider) add(exp sdktrace.SpanExporter, desc string, rep *exportReporter, cfg Config, exportTimeout time.Duration) {
	p.procs = append(p.procs, newBatcher(exp, rep, cfg.QueueSize, cfg.BatchInterval, exportTimeout))
	p.desc = append(p.desc, desc)
}

// otlpEndpoint is the OTLP endpoint Setup found, and where it came from.
type otlpEndpoint struct {
	url *url.URL
	// flag: from Config.Endpoint, passed to the exporter as an option (over
	// the environment). Otherwise the exporter reads it itself.
	flag bool
	// perSignal: from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, whose HTTP path
	// the exporter uses as is.
	perSignal bool
}

// resolveEndpoint returns the endpoint of Config.Endpoint, else of the
// environment the exporter will read, or nil when there is none or it is
// "none". An endpoint that is set but invalid comes back non-nil with the
// error.
func resolveEndpoint(flagValue string) (*otlpEndpoint, error) {
	invalid := &otlpEndpoint{}
	if strings.TrimSpace(flagValue) != "" {
		if NoEndpoint(flagValue) {
			// An explicit "none" wins over the environment and disables
			// OTLP, leaving a --traces.file alone.
			return nil, nil
		}
		u, err := parseEndpoint(flagValue)
		if err != nil {
			return invalid, err
		}
		return &otlpEndpoint{url: u, flag: true}, nil
	}
	// The exporter's own precedence: the per-signal variable first.
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		v := strings.TrimSpace(os.Getenv(name))
		if v == "" {
			continue
		}
		if NoEndpoint(v) {
			return nil, nil
		}
		// The SDK reads host:port as a URL with scheme "host", or not at
		// all, then falls back to https://localhost: refuse it here.
		u, err := url.Parse(v)
		if err != nil {
			return invalid, fmt.Errorf("%s: not a URL (want http://host:port or https://host:port)", name)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return invalid, fmt.Errorf("%s %q: want an http:// or https:// URL with a host (host:port alone is for --otlp.endpoint)", name, u.Redacted())
		}
		return &otlpEndpoint{url: u, perSignal: name == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}, nil
	}
	return nil, nil
}

// otlpExporter builds the gRPC or HTTP exporter. It passes only what a flag
// set (the endpoint); the exporter reads every other OTEL_EXPORTER_OTLP_*
// variable itself. It tells rep where the exporter sends and, for gRPC,
// wires rep to each attempt.
func otlpExporter(ctx context.Context, protocol string, ep *otlpEndpoint, rep *exportReporter) (sdktrace.SpanExporter, string, error) {
	// The SDK drops a malformed header entry with a log line and exports
	// without it: credentials missing from every request. Refuse instead.
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"} {
		if err := checkHeaders(os.Getenv(name)); err != nil {
			return nil, "", fmt.Errorf("%s: %w", name, err)
		}
	}
	u := *ep.url
	switch protocol {
	case ProtocolGRPC:
		opts := []otlptracegrpc.Option{otlptracegrpc.WithDialOption(grpc.WithChainUnaryInterceptor(attemptInterceptor(rep)))}
		if ep.flag {
			opts = append(opts, otlptracegrpc.WithEndpointURL(u.String()))
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, "", fmt.Errorf("otlp grpc exporter: %w", err)
		}
		rep.endpoint, rep.protocol = fmt.Sprintf("%s://%s", u.Scheme, u.Host), ProtocolGRPC
		return exp, "OTLP grpc → " + rep.endpoint, nil
	case ProtocolHTTP, "http":
		var opts []otlptracehttp.Option
		switch {
		case ep.flag:
			if u.Path == "" || u.Path == "/" {
				u.Path = "/v1/traces"
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		case ep.perSignal:
			// What the exporter does with the variable, for Describe.
			if u.Path == "" {
				u.Path = "/"
			}
		default:
			u.Path = path.Join("/", u.Path, "v1/traces")
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, "", fmt.Errorf("otlp http exporter: %w", err)
		}
		rep.endpoint, rep.protocol = u.Redacted(), ProtocolHTTP
		return exp, "OTLP http/protobuf → " + rep.endpoint, nil
	}
	return nil, "", fmt.Errorf("otlp protocol %q: want grpc or http/protobuf", protocol)
}

// CheckEndpoint reports whether s is an OTLP endpoint Setup accepts in
// Config.Endpoint: an http or https URL, host:port, or "none" (no OTLP
// export).
func CheckEndpoint(s string) error {
	if NoEndpoint(s) {
		return nil
	}
	_, err := parseEndpoint(s)
	return err
}

// NoEndpoint reports whether s is the endpoint "none" (any case), which
// turns OTLP export off.
func NoEndpoint(s string) bool { return strings.EqualFold(strings.TrimSpace(s), ExporterNone) }

// parseEndpoint accepts a URL or host:port (read as plaintext http://).
func parseEndpoint(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("otlp endpoint: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("otlp endpoint %q: scheme must be http or https", u.Redacted())
	}
	if u.Host == "" {
		return nil, fmt.Errorf("otlp endpoint %q: no host", u.Redacted())
	}
	return u, nil
}

// checkHeaders applies the SDK's rules for OTEL_EXPORTER_OTLP_HEADERS
// (key=value,... with token keys and URL-encoded values) and reports the
// first entry the SDK would drop. Blank entries are skipped, as they lose
// nothing. Values are never echoed: headers carry credentials.
func checkHeaders(s string) error {
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return errors.New("malformed entry (want key=value)")
		}
		if strings.IndexFunc(k, func(r rune) bool { return !isTokenChar(r) }) >= 0 {
			return fmt.Errorf("malformed entry: %q is not a valid header name", k)
		}
		if _, err := url.PathUnescape(v); err != nil {
			return fmt.Errorf("bad escape in the value of %q", k)
		}
	}
	return nil
}

// isTokenChar reports whether r may appear in an HTTP header name (RFC 9110
// token).
func isTokenChar(r rune) bool {
	return r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r))
}

// otlpExportBound is the batching processor's bound on one OTLP export:
// configured, the configured one; else DefaultExportTimeout, or the
// exporter's own timeout when that is longer. The processor's bound must
// not cut short what OTEL_EXPORTER_OTLP[_TRACES]_TIMEOUT allows, and the
// SDK cannot say what it read, so the variables are read here as the SDK
// reads them (milliseconds, the per-signal one first, an invalid value
// ignored). 0 (no timeout in the SDK) still gets the default bound: no
// export runs unbounded.
func otlpExportBound(configured time.Duration) time.Duration {
	if configured > 0 {
		return configured
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"} {
		if ms, err := strconv.Atoi(strings.TrimSpace(os.Getenv(name))); err == nil {
			return max(DefaultExportTimeout, time.Duration(ms)*time.Millisecond)
		}
	}
	return DefaultExportTimeout
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

// ParentFromEnv returns the span context of a W3C TRACEPARENT (and
// TRACESTATE) in the environment, or an invalid one.
func ParentFromEnv(env func(string) string) trace.SpanContext {
	if env == nil {
		env = os.Getenv
	}
	carrier := propagation.MapCarrier{}
	if v := env("TRACEPARENT"); v != "" {
		carrier["traceparent"] = strings.TrimSpace(v)
	}
	if v := env("TRACESTATE"); v != "" {
		carrier["tracestate"] = strings.TrimSpace(v)
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
}

// Tracer implements trace.TracerProvider.
func (p *Provider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return p.tp.Tracer(name, opts...)
}

// Describe says where spans go, e.g. "OTLP grpc → http://localhost:4317",
// for a demo to tell the user where to look.
func (p *Provider) Describe() string {
	if p == nil {
		return "none"
	}
	return strings.Join(p.desc, "; ")
}

// Dropped is how many spans will not reach a backend: dropped at a full
// queue, ended after shutdown, lost in a failed export, or abandoned at
// shutdown's deadline. Summed over exporters.
func (p *Provider) Dropped() float64 {
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
func (p *Provider) ExportErrors() float64 {
	if p == nil {
		return 0
	}
	var n int64
	for _, b := range p.procs {
		n += b.exportErrors()
	}
	return float64(n)
}

// Losses says, per exporter that did not deliver every span, how many it
// lost, where they should have gone and why; none when all were
// delivered. Meant for after Shutdown, for a summary at exit.
func (p *Provider) Losses() []Loss {
	if p == nil {
		return nil
	}
	var out []Loss
	for _, b := range p.procs {
		if l := b.loss(); l.Spans > 0 {
			out = append(out, l)
		}
	}
	return out
}

// ForceFlush exports what is queued, waiting at most until ctx is done.
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if err := p.tp.ForceFlush(ctx); err != nil {
		return fmt.Errorf("flushing traces: %w", err)
	}
	return nil
}

// Shutdown flushes and stops every exporter. It returns by ctx's deadline
// whatever the backend does; spans it could not deliver are counted in
// Dropped. Safe on nil and idempotent.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutting down traces: %w", err)
	}
	return nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
