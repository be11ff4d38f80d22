package clitelemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"
	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
)

// Protocols of ForwarderConfig.Protocol, as in OTEL_EXPORTER_OTLP_PROTOCOL.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Forwarder defaults.
const (
	// DefaultLogQueueSize bounds the log records waiting for export.
	DefaultLogQueueSize = 4096
	// DefaultMetricQueueSize bounds the metric requests waiting for export.
	DefaultMetricQueueSize = 64
	// DefaultBatchInterval is how often queued log records are exported.
	DefaultBatchInterval = time.Second
	// DefaultExportTimeout bounds one export call.
	DefaultExportTimeout = 10 * time.Second
	// DefaultMaxResources bounds the distinct resources whose log records
	// are forwarded (one LoggerProvider each).
	DefaultMaxResources = 8
	// logBatch is the most log records in one export.
	logBatch = 512
)

// ForwarderConfig configures NewForwarder; zero values take the defaults.
// Headers, TLS, compression and timeouts are read by the SDK's exporters
// from OTEL_EXPORTER_OTLP[_LOGS|_METRICS]_* in the process environment.
type ForwarderConfig struct {
	// Protocol is grpc or http/protobuf; "" reads
	// OTEL_EXPORTER_OTLP_{LOGS,METRICS}_PROTOCOL then
	// OTEL_EXPORTER_OTLP_PROTOCOL through Env, defaulting to grpc.
	Protocol string
	// Endpoint overrides the environment's endpoints, as
	// egress.Config.Endpoint does: a URL or host:port (plaintext), "none"
	// for no forwarding. See the package doc for how each signal's
	// endpoint follows from it.
	Endpoint string
	// Env reads the protocol variables; nil means os.Getenv. The
	// endpoint variables are read from the process environment, as the
	// exporters read them.
	Env func(string) string
	// LogQueueSize bounds queued log records; 0 means DefaultLogQueueSize.
	LogQueueSize int
	// MetricQueueSize bounds queued metric requests; 0 means
	// DefaultMetricQueueSize.
	MetricQueueSize int
	// BatchInterval is how often log records are exported; 0 means
	// DefaultBatchInterval.
	BatchInterval time.Duration
	// ExportTimeout bounds each export; 0 means DefaultExportTimeout,
	// raised to OTEL_EXPORTER_OTLP[_LOGS|_METRICS]_TIMEOUT (milliseconds,
	// read by the exporters too) when that is longer, so as not to cut
	// the exporter's own timeout short.
	ExportTimeout time.Duration
	// MaxResources bounds the distinct resources of log records; the
	// records of more are dropped and counted. 0 means DefaultMaxResources.
	MaxResources int
	// Logger receives export failures (the first, then every 100th); nil
	// discards them.
	Logger *slog.Logger
}

// Forwarder sends the CLI's log records and metrics on through the SDK's
// OTLP exporters. Logs and Metrics never block: they convert, enqueue and
// return. A nil *Forwarder is valid and forwards nothing.
type Forwarder struct {
	logs    *logPipeline
	metrics *metricPipeline
	log     *slog.Logger
}

// ForwarderStats is a Forwarder's counters, in log records and metric data
// points.
type ForwarderStats struct {
	LogRecords, MetricPoints *QueueStats
}

// NewForwarder builds the exporters cfg and the environment ask for. With
// no endpoint for either signal it returns nil, nil.
func NewForwarder(ctx context.Context, cfg ForwarderConfig) (*Forwarder, error) {
	if cfg.Env == nil {
		cfg.Env = os.Getenv
	}
	if cfg.LogQueueSize <= 0 {
		cfg.LogQueueSize = DefaultLogQueueSize
	}
	if cfg.MetricQueueSize <= 0 {
		cfg.MetricQueueSize = DefaultMetricQueueSize
	}
	if cfg.BatchInterval <= 0 {
		cfg.BatchInterval = DefaultBatchInterval
	}
	if cfg.MaxResources <= 0 {
		cfg.MaxResources = DefaultMaxResources
	}
	f := &Forwarder{log: cfg.Logger}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	lp, err := protocol(cfg, "LOGS")
	if err != nil {
		return nil, err
	}
	mp, err := protocol(cfg, "METRICS")
	if err != nil {
		return nil, err
	}
	lu, lon, err := SignalEndpoint(cfg.Endpoint, lp, "logs")
	if err != nil {
		return nil, err
	}
	mu, mon, err := SignalEndpoint(cfg.Endpoint, mp, "metrics")
	if err != nil {
		return nil, err
	}
	timeout := cfg.ExportTimeout
	if lon {
		exp, err := logExporter(ctx, lp, lu)
		if err != nil {
			return nil, err
		}
		cfg.ExportTimeout = exportTimeout(timeout, "LOGS")
		f.logs = newLogPipeline(exp, cfg, f.onErr("logs", lp))
	}
	if mon {
		exp, err := metricExporter(ctx, mp, mu)
		if err != nil {
			if f.logs != nil {
				_ = f.logs.shutdown(ctx)
			}
			return nil, err
		}
		cfg.ExportTimeout = exportTimeout(timeout, "METRICS")
		f.metrics = newMetricPipeline(exp, cfg, f.onErr("metrics", mp))
	}
	if f.logs == nil && f.metrics == nil {
		return nil, nil
	}
	return f, nil
}

// exportTimeout is the queue's bound on one export of a signal (LOGS or
// METRICS): the configured one, else the default or, when longer, the
// exporter's own timeout as the exporter reads it (the per-signal variable
// first, an invalid value ignored).
func exportTimeout(configured time.Duration, signal string) time.Duration {
	if configured > 0 {
		return configured
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_" + signal + "_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"} {
		if ms, err := strconv.Atoi(strings.TrimSpace(os.Getenv(name))); err == nil && ms >= 0 {
			return max(DefaultExportTimeout, time.Duration(ms)*time.Millisecond)
		}
	}
	return DefaultExportTimeout
}

func (f *Forwarder) onErr(signal, protocol string) func(error) {
	var n int64
	var mu sync.Mutex
	return func(err error) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		if k == 1 || k%100 == 0 {
			f.log.Warn("clitelemetry: forwarding the CLI's telemetry failed", "signal", signal, "protocol", protocol, "failures", k, "err", err)
		}
	}
}

// protocol is the configured protocol of a signal (LOGS or METRICS).
func protocol(cfg ForwarderConfig, signal string) (string, error) {
	p := cfg.Protocol
	for _, name := range []string{"OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p == "" {
			p = strings.TrimSpace(cfg.Env(name))
		}
	}
	switch p {
	case "", ProtocolGRPC:
		return ProtocolGRPC, nil
	case ProtocolHTTP, "http":
		return ProtocolHTTP, nil
	}
	return "", fmt.Errorf("clitelemetry: otlp protocol %q: want grpc or http/protobuf", p)
}

// SignalEndpoint resolves where one signal ("logs" or "metrics") goes,
// following the rule in the package doc. It returns the URL to pass to the
// exporter ("" when the exporter is to read its own variables) and whether
// the signal is forwarded at all.
func SignalEndpoint(flag, protocol, signal string) (string, bool, error) {
	sigPath := "/v1/" + signal
	if strings.TrimSpace(flag) != "" {
		if isNone(flag) {
			return "", false, nil
		}
		u, err := parseEndpoint(flag)
		if err != nil {
			return "", false, err
		}
		return derive(u, protocol, sigPath), true, nil
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_" + strings.ToUpper(signal) + "_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := strings.TrimSpace(os.Getenv(name)); v != "" {
			if isNone(v) {
				return "", false, nil
			}
			if _, err := envURL(name, v); err != nil {
				return "", false, err
			}
			return "", true, nil
		}
	}
	const tracesVar = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	if v := strings.TrimSpace(os.Getenv(tracesVar)); v != "" {
		if isNone(v) {
			return "", false, nil
		}
		u, err := envURL(tracesVar, v)
		if err != nil {
			return "", false, err
		}
		return derive(u, protocol, sigPath), true, nil
	}
	return "", false, nil
}

// derive turns a traces endpoint (or a base) into the signal's: for HTTP
// a path ending in /v1/traces has that replaced, another path gets the
// signal's path appended; gRPC uses the URL as it is.
func derive(u *url.URL, protocol, sigPath string) string {
	v := *u
	if protocol == ProtocolHTTP {
		base := strings.TrimSuffix(strings.TrimSuffix(v.Path, "/"), "/v1/traces")
		v.Path = path.Join("/", base, sigPath)
		v.RawPath = ""
	}
	return v.String()
}

func isNone(s string) bool { return strings.EqualFold(strings.TrimSpace(s), "none") }

// parseEndpoint accepts a URL or host:port (read as plaintext http://).
func parseEndpoint(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("clitelemetry: otlp endpoint: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("clitelemetry: otlp endpoint %q: want an http or https URL with a host, or host:port", u.Redacted())
	}
	return u, nil
}

// envURL checks an endpoint variable as the exporters need it.
func envURL(name, v string) (*url.URL, error) {
	u, err := url.Parse(v)
	if err != nil {
		return nil, fmt.Errorf("clitelemetry: %s: not a URL: %w", name, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("clitelemetry: %s %q: want an http:// or https:// URL with a host", name, u.Redacted())
	}
	return u, nil
}

func logExporter(ctx context.Context, protocol, endpoint string) (sdklog.Exporter, error) {
	var exp sdklog.Exporter
	var err error
	if protocol == ProtocolGRPC {
		var opts []otlploggrpc.Option
		if endpoint != "" {
			opts = append(opts, otlploggrpc.WithEndpointURL(endpoint))
		}
		exp, err = otlploggrpc.New(ctx, opts...)
	} else {
		var opts []otlploghttp.Option
		if endpoint != "" {
			opts = append(opts, otlploghttp.WithEndpointURL(endpoint))
		}
		exp, err = otlploghttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("clitelemetry: otlp %s log exporter: %w", protocol, err)
	}
	return exp, nil
}

func metricExporter(ctx context.Context, protocol, endpoint string) (sdkmetric.Exporter, error) {
	var exp sdkmetric.Exporter
	var err error
	if protocol == ProtocolGRPC {
		var opts []otlpmetricgrpc.Option
		if endpoint != "" {
			opts = append(opts, otlpmetricgrpc.WithEndpointURL(endpoint))
		}
		exp, err = otlpmetricgrpc.New(ctx, opts...)
	} else {
		var opts []otlpmetrichttp.Option
		if endpoint != "" {
			opts = append(opts, otlpmetrichttp.WithEndpointURL(endpoint))
		}
		exp, err = otlpmetrichttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("clitelemetry: otlp %s metric exporter: %w", protocol, err)
	}
	return exp, nil
}

// Logs forwards the log records of req. It never blocks.
func (f *Forwarder) Logs(_ context.Context, req *collogspb.ExportLogsServiceRequest) {
	if f == nil || f.logs == nil {
		return
	}
	f.logs.emit(req)
}

// Metrics forwards the metrics of req. It never blocks.
func (f *Forwarder) Metrics(_ context.Context, req *colmetricspb.ExportMetricsServiceRequest) {
	if f == nil || f.metrics == nil {
		return
	}
	f.metrics.emit(req)
}

// Flush exports what is queued, waiting until ctx is done.
func (f *Forwarder) Flush(ctx context.Context) error {
	if f == nil {
		return nil
	}
	var errs []error
	if f.logs != nil {
		errs = append(errs, f.logs.q.flush(ctx))
	}
	if f.metrics != nil {
		errs = append(errs, f.metrics.q.flush(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("clitelemetry: flush: %w", err)
	}
	return nil
}

// Shutdown exports what is queued and closes the exporters, within ctx's
// deadline; what is still queued then is lost and counted. Later items are
// dropped and counted. Safe to call more than once.
func (f *Forwarder) Shutdown(ctx context.Context) error {
	if f == nil {
		return nil
	}
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	add := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	if f.logs != nil {
		wg.Go(func() { add(f.logs.shutdown(ctx)) })
	}
	if f.metrics != nil {
		wg.Go(func() { add(f.metrics.shutdown(ctx)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("clitelemetry: forwarder shutdown: %w", err)
	}
	return nil
}

// Stats returns the live counters; a signal not forwarded has zeros.
func (f *Forwarder) Stats() ForwarderStats {
	s := ForwarderStats{LogRecords: &QueueStats{}, MetricPoints: &QueueStats{}}
	if f == nil {
		return s
	}
	if f.logs != nil {
		s.LogRecords = &f.logs.q.stats
	}
	if f.metrics != nil {
		s.MetricPoints = &f.metrics.q.stats
	}
	return s
}

// Losses is how many log records and metric data points were not
// delivered; final after Shutdown.
func (f *Forwarder) Losses() (logRecords, metricPoints int64) {
	s := f.Stats()
	return s.LogRecords.Lost(), s.MetricPoints.Lost()
}

// logPipeline emits log records through one LoggerProvider per resource,
// all feeding one queue and one exporter.
type logPipeline struct {
	exp          sdklog.Exporter
	q            *queue[sdklog.Record]
	maxResources int

	mu        sync.Mutex
	providers map[resourceKey]*sdklog.LoggerProvider
}

type resourceKey struct {
	attrs     attribute.Distinct
	schemaURL string
}

func newLogPipeline(exp sdklog.Exporter, cfg ForwarderConfig, onErr func(error)) *logPipeline {
	return &logPipeline{
		exp:          exp,
		q:            newQueue(cfg.LogQueueSize, logBatch, cfg.BatchInterval, cfg.ExportTimeout, exp.Export, func(sdklog.Record) int { return 1 }, onErr),
		maxResources: cfg.MaxResources,
		providers:    map[resourceKey]*sdklog.LoggerProvider{},
	}
}

func (p *logPipeline) emit(req *collogspb.ExportLogsServiceRequest) {
	st := &p.q.stats
	for _, rl := range req.GetResourceLogs() {
		n := 0
		for _, sl := range rl.GetScopeLogs() {
			n += len(sl.GetLogRecords())
		}
		st.Received.Add(int64(n))
		res := newResource(rl.GetResource(), rl.GetSchemaUrl())
		key := resourceKey{res.Equivalent(), rl.GetSchemaUrl()}
		p.mu.Lock()
		lp, ok := p.providers[key]
		if !ok && len(p.providers) < p.maxResources {
			lp = sdklog.NewLoggerProvider(
				sdklog.WithResource(res),
				sdklog.WithProcessor(queueProcessor{p.q}),
				sdklog.WithAttributeCountLimit(-1),
			)
			p.providers[key] = lp
		}
		p.mu.Unlock()
		if lp == nil {
			st.Unsupported.Add(int64(n))
			continue
		}
		for _, sl := range rl.GetScopeLogs() {
			sc := sl.GetScope()
			logger := lp.Logger(sc.GetName(),
				log.WithInstrumentationVersion(sc.GetVersion()),
				log.WithSchemaURL(sl.GetSchemaUrl()),
				log.WithInstrumentationAttributes(keyValues(sc.GetAttributes())...))
			for _, r := range sl.GetLogRecords() {
				var rec log.Record
				if t := r.GetTimeUnixNano(); t != 0 {
					rec.SetTimestamp(unixNano(t))
				}
				if t := r.GetObservedTimeUnixNano(); t != 0 {
					rec.SetObservedTimestamp(unixNano(t))
				}
				rec.SetSeverity(log.Severity(r.GetSeverityNumber()))
				rec.SetSeverityText(r.GetSeverityText())
				if r.GetBody() != nil {
					rec.SetBody(attrValue(r.GetBody()))
				}
				rec.AddAttributes(keyValues(r.GetAttributes())...)
				rec.SetEventName(r.GetEventName())
				ctx := context.Background()
				if len(r.GetTraceId()) == 16 || len(r.GetSpanId()) == 8 {
					var cfg trace.SpanContextConfig
					if len(r.GetTraceId()) == 16 {
						cfg.TraceID = trace.TraceID(r.GetTraceId())
					}
					if len(r.GetSpanId()) == 8 {
						cfg.SpanID = trace.SpanID(r.GetSpanId())
					}
					cfg.TraceFlags = trace.TraceFlags(r.GetFlags() & 0xff) //nolint:gosec // masked to a byte.
					ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(cfg))
				}
				logger.Emit(ctx, rec)
			}
		}
	}
}

func (p *logPipeline) shutdown(ctx context.Context) error {
	err := p.q.shutdown(ctx)
	return errors.Join(err, p.exp.Shutdown(ctx))
}

// queueProcessor is the sdklog.Processor of one LoggerProvider: it clones
// each record into the shared queue. The queue outlives the providers, so
// their Shutdown is not passed on.
type queueProcessor struct{ q *queue[sdklog.Record] }

func (queueProcessor) Enabled(context.Context, sdklog.EnabledParameters) bool { return true }

func (p queueProcessor) OnEmit(_ context.Context, r *sdklog.Record) error {
	p.q.put(r.Clone())
	return nil
}

func (queueProcessor) Shutdown(context.Context) error { return nil }

func (p queueProcessor) ForceFlush(ctx context.Context) error { return p.q.flush(ctx) }

// metricPipeline converts metric requests and exports each in turn.
type metricPipeline struct {
	exp sdkmetric.Exporter
	q   *queue[*metricdata.ResourceMetrics]
}

func newMetricPipeline(exp sdkmetric.Exporter, cfg ForwarderConfig, onErr func(error)) *metricPipeline {
	export := func(ctx context.Context, rms []*metricdata.ResourceMetrics) error {
		var errs []error
		for _, rm := range rms {
			errs = append(errs, exp.Export(ctx, rm))
		}
		return errors.Join(errs...)
	}
	size := func(rm *metricdata.ResourceMetrics) int {
		n := 0
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				n += metricPoints(m.Data)
			}
		}
		return n
	}
	// Batches of one: each request is exported as it comes, so a failure
	// counts exactly its own points.
	return &metricPipeline{exp: exp, q: newQueue(cfg.MetricQueueSize, 1, cfg.BatchInterval, cfg.ExportTimeout, export, size, onErr)}
}

func (p *metricPipeline) emit(req *colmetricspb.ExportMetricsServiceRequest) {
	st := &p.q.stats
	st.Received.Add(int64(CountDataPoints(req.GetResourceMetrics())))
	rms, dropped := ResourceMetrics(req.GetResourceMetrics())
	st.Unsupported.Add(int64(dropped))
	for _, rm := range rms {
		p.q.put(rm)
	}
}

func (p *metricPipeline) shutdown(ctx context.Context) error {
	err := p.q.shutdown(ctx)
	return errors.Join(err, p.exp.Shutdown(ctx))
}

func metricPoints(a metricdata.Aggregation) int {
	switch d := a.(type) {
	case metricdata.Gauge[int64]:
		return len(d.DataPoints)
	case metricdata.Gauge[float64]:
		return len(d.DataPoints)
	case metricdata.Sum[int64]:
		return len(d.DataPoints)
	case metricdata.Sum[float64]:
		return len(d.DataPoints)
	case metricdata.Histogram[float64]:
		return len(d.DataPoints)
	case metricdata.ExponentialHistogram[float64]:
		return len(d.DataPoints)
	case metricdata.Summary:
		return len(d.DataPoints)
	}
	return 0
}
