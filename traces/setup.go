package traces

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
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
type Config struct {
	// Exporter is otlp, none or console; "" reads OTEL_TRACES_EXPORTER. When
	// neither says, OTLP is used if an endpoint is configured. "none" turns
	// OTLP off (a File is still written). console writes OTLP/JSON lines to
	// Console and is refused when Console is nil (run mode: stdout is the
	// child's).
	Exporter string
	// Endpoint is the OTLP endpoint: a URL (http://host:4317, https://...)
	// or host:port (plaintext). "" reads OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	// (used as is) then OTEL_EXPORTER_OTLP_ENDPOINT (a base URL: HTTP
	// appends /v1/traces, as does a flag-given HTTP endpoint without a
	// path).
	Endpoint string
	// Protocol is grpc or http/protobuf; "" reads
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL then OTEL_EXPORTER_OTLP_PROTOCOL,
	// defaulting to grpc.
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
	// ExportTimeout bounds one export call; 0 means DefaultExportTimeout.
	ExportTimeout time.Duration
	// ServiceVersion, if set, becomes service.version.
	ServiceVersion string
	// Env reads the environment; nil means os.Getenv.
	Env func(string) string
}

// Provider is the TracerProvider Setup builds: the SDK provider with the
// deterministic IDGenerator and one bounded batching processor per
// exporter. A nil *Provider is valid and exports nothing.
type Provider struct {
	embedded.TracerProvider

	tp    *sdktrace.TracerProvider
	procs []*batcher
	desc  []string
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
		return nil, errors.New("traces exporter console: not available here (stdout carries the wrapped CLI's stream); use --traces-file")
	}

	endpoint, perSignal := cfg.Endpoint, false
	if endpoint == "" {
		if endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); endpoint != "" {
			perSignal = true
		} else {
			endpoint = env("OTEL_EXPORTER_OTLP_ENDPOINT")
		}
	}
	if NoEndpoint(endpoint) {
		// An explicit "none" (flag or environment) wins over the
		// environment and disables OTLP, leaving a --traces-file alone.
		endpoint, perSignal = "", false
	}
	protocol := firstNonEmpty(cfg.Protocol, env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), env("OTEL_EXPORTER_OTLP_PROTOCOL"), ProtocolGRPC)
	useOTLP := !want[ExporterNone] && endpoint != "" && (len(want) == 0 || want[ExporterOTLP])
	if want[ExporterOTLP] && endpoint == "" {
		return nil, errors.New("traces exporter otlp: no endpoint (set --otlp.endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)")
	}
	if !useOTLP && cfg.File == "" && !want[ExporterConsole] {
		return nil, nil
	}

	res, err := buildResource(env, cfg.ServiceVersion)
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
	if useOTLP {
		exp, desc, err := otlpExporter(ctx, protocol, endpoint, perSignal, cfg, env)
		if err != nil {
			return fail(err)
		}
		p.add(exp, desc, cfg)
	}
	if cfg.File != "" {
		exp, err := newFileExporter(cfg.File)
		if err != nil {
			return fail(err)
		}
		p.add(exp, "OTLP/JSON file → "+cfg.File, cfg)
	}
	if want[ExporterConsole] {
		p.add(newWriterExporter(cfg.Console), "OTLP/JSON → stderr", cfg)
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

func (p *Provider) add(exp sdktrace.SpanExporter, desc string, cfg Config) {
	p.procs = append(p.procs, newBatcher(exp, cfg.QueueSize, cfg.BatchInterval, cfg.ExportTimeout))
	p.desc = append(p.desc, desc)
}

// otlpExporter builds the gRPC or HTTP exporter. Headers come from
// OTEL_EXPORTER_OTLP_TRACES_HEADERS / OTEL_EXPORTER_OTLP_HEADERS through
// env; the SDK still reads its other variables (certificates, compression,
// timeout) from the process environment itself.
func otlpExporter(ctx context.Context, protocol, endpoint string, perSignal bool, cfg Config, env func(string) string) (sdktrace.SpanExporter, string, error) {
	u, err := parseEndpoint(endpoint)
	if err != nil {
		return nil, "", err
	}
	headers, err := parseHeaders(firstNonEmpty(env("OTEL_EXPORTER_OTLP_TRACES_HEADERS"), env("OTEL_EXPORTER_OTLP_HEADERS")))
	if err != nil {
		return nil, "", err
	}
	timeout := cfg.ExportTimeout
	if timeout <= 0 {
		timeout = DefaultExportTimeout
	}
	switch protocol {
	case ProtocolGRPC:
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(u.Host), otlptracegrpc.WithTimeout(timeout)}
		if u.Scheme == "http" {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		if len(headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(headers))
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, "", fmt.Errorf("otlp grpc exporter: %w", err)
		}
		return exp, fmt.Sprintf("OTLP grpc → %s://%s", u.Scheme, u.Host), nil
	case ProtocolHTTP, "http":
		if !perSignal && (u.Path == "" || u.Path == "/") {
			u.Path = "/v1/traces"
		}
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(u.String()), otlptracehttp.WithTimeout(timeout)}
		if len(headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(headers))
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, "", fmt.Errorf("otlp http exporter: %w", err)
		}
		return exp, "OTLP http/protobuf → " + u.String(), nil
	}
	return nil, "", fmt.Errorf("otlp protocol %q: want grpc or http/protobuf", protocol)
}

// CheckEndpoint reports whether s is an OTLP endpoint Setup accepts: an
// http or https URL, host:port, or "none" (no OTLP export).
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
		return nil, fmt.Errorf("otlp endpoint %q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("otlp endpoint %q: no host", s)
	}
	return u, nil
}

// parseHeaders reads the W3C-baggage-like key=value,key=value list of
// OTEL_EXPORTER_OTLP_HEADERS (values URL-encoded).
func parseHeaders(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			// Never echo the value: headers carry credentials.
			return nil, errors.New("OTEL_EXPORTER_OTLP_HEADERS: malformed entry (want key=value)")
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: bad escape in the value of %q", k)
		}
		out[k] = dv
	}
	return out, nil
}

// buildResource reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME (which
// wins) from env rather than the process environment, so that tests are
// hermetic.
func buildResource(env func(string) string, version string) (*resource.Resource, error) {
	kv := []attribute.KeyValue{
		attribute.String("telemetry.sdk.name", "opentelemetry"),
		attribute.String("telemetry.sdk.language", "go"),
		attribute.String("telemetry.sdk.version", sdk.Version()),
	}
	service := DefaultServiceName
	if ra := env("OTEL_RESOURCE_ATTRIBUTES"); ra != "" {
		for _, part := range strings.Split(ra, ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			k, v, ok := strings.Cut(part, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: malformed entry %q (want key=value)", part)
			}
			dv, err := url.PathUnescape(strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: bad escape in %q: %w", k, err)
			}
			if k == "service.name" {
				service = dv
				continue
			}
			kv = append(kv, attribute.String(k, dv))
		}
	}
	if s := strings.TrimSpace(env("OTEL_SERVICE_NAME")); s != "" {
		service = s
	}
	kv = append(kv, attribute.String("service.name", service))
	if version != "" {
		kv = append(kv, attribute.String("service.version", version))
	}
	return resource.NewSchemaless(kv...), nil
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
