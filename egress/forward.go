package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"
	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"

	"github.com/cbc-otel/cbc-otel/internal/otlpconv"
)

// Forwarding defaults.
const (
	// DefaultLogQueueSize bounds the log records waiting for export.
	DefaultLogQueueSize = 4096
	// DefaultMetricQueueSize bounds the metric requests waiting for export.
	DefaultMetricQueueSize = 64
	// DefaultMaxResources bounds the distinct resources whose log records
	// are forwarded (one LoggerProvider each).
	DefaultMaxResources = 8
	// logBatch is the most log records in one export.
	logBatch = 512
)

// forwardConfig configures a forwarder; zero values take the defaults.
// Headers, TLS, compression and timeouts are read by the SDK's exporters
// from OTEL_EXPORTER_OTLP[_LOGS|_METRICS]_* in the process environment.
type forwardConfig struct {
	// Protocol is grpc or http/protobuf; "" reads
	// OTEL_EXPORTER_OTLP_{LOGS,METRICS}_PROTOCOL then
	// OTEL_EXPORTER_OTLP_PROTOCOL through Env, defaulting to grpc. New
	// passes the spans' protocol, to keep the signals together.
	Protocol string
	// Endpoint is Config.Endpoint: resolve says how each signal's endpoint
	// follows from it and the environment; "none" forwards nothing.
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
	// ExportTimeout bounds each export; 0 means exportTimeout's default
	// for the signal.
	ExportTimeout time.Duration
	// MaxResources bounds the distinct resources of log records; the
	// records of more are dropped and counted. 0 means DefaultMaxResources.
	MaxResources int
	// Logger, Now and ReportEvery are the failure lines' (see Config).
	Logger      *slog.Logger
	Now         func() time.Time
	ReportEvery time.Duration
}

// forwarder sends the CLI's log records and metrics on through the SDK's
// OTLP exporters. Logs and Metrics never block: they convert, enqueue and
// return. A nil *forwarder is valid and forwards nothing.
type forwarder struct {
	logs     *logPipeline
	metrics  *metricPipeline
	shutOnce sync.Once
	shutErr  error
}

// forwardStats is a forwarder's counters, in log records and metric data
// points.
type forwardStats struct {
	LogRecords, MetricPoints *queueStats
}

// newForwarder builds the exporters cfg and the environment ask for. With
// no endpoint for either signal it returns nil, nil.
func newForwarder(ctx context.Context, cfg forwardConfig) (*forwarder, error) {
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
	f := &forwarder{}
	for _, signal := range []string{signalLogs, signalMetrics} {
		protocol, err := resolveProtocol(cfg.Protocol, signal, cfg.Env)
		if err != nil {
			_ = f.Shutdown(ctx)
			return nil, err
		}
		ep, err := resolve(cfg.Endpoint, signal)
		if err == nil && ep != nil {
			err = checkSignalHeaders(signal)
		}
		if err != nil {
			_ = f.Shutdown(ctx)
			return nil, err
		}
		if ep == nil {
			continue
		}
		u, pass := ep.exportURL(protocol, signal)
		endpoint := ""
		if pass {
			endpoint = u.String()
		}
		rep := newExportReporter(cfg.Logger, cfg.Now, cfg.ReportEvery, describe(u, protocol), protocol)
		rep.forwarding(signal)
		timeout := exportTimeout(cfg.ExportTimeout, signal)
		if signal == signalLogs {
			exp, err := logExporter(ctx, protocol, endpoint)
			if err != nil {
				_ = f.Shutdown(ctx)
				return nil, err
			}
			f.logs = newLogPipeline(exp, cfg, timeout, rep)
			continue
		}
		exp, err := metricExporter(ctx, protocol, endpoint)
		if err != nil {
			_ = f.Shutdown(ctx)
			return nil, err
		}
		f.metrics = newMetricPipeline(exp, cfg, timeout, rep)
	}
	if f.logs == nil && f.metrics == nil {
		return nil, nil
	}
	return f, nil
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
		return nil, fmt.Errorf("otlp %s log exporter: %w", protocol, err)
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
		return nil, fmt.Errorf("otlp %s metric exporter: %w", protocol, err)
	}
	return exp, nil
}

// Logs forwards the log records of req. It never blocks.
func (f *forwarder) Logs(_ context.Context, req *collogspb.ExportLogsServiceRequest) {
	if f == nil || f.logs == nil {
		return
	}
	f.logs.emit(req)
}

// Metrics forwards the metrics of req. It never blocks.
func (f *forwarder) Metrics(_ context.Context, req *colmetricspb.ExportMetricsServiceRequest) {
	if f == nil || f.metrics == nil {
		return
	}
	f.metrics.emit(req)
}

// Shutdown exports what is queued and closes the exporters, within ctx's
// deadline; what is still queued then is lost and counted. Later items are
// dropped and counted. Safe to call more than once: the later calls return
// the first one's error.
func (f *forwarder) Shutdown(ctx context.Context) error {
	if f == nil {
		return nil
	}
	f.shutOnce.Do(func() {
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
			f.shutErr = fmt.Errorf("forwarding the CLI's telemetry: %w", err)
		}
	})
	return f.shutErr
}

// Stats returns the live counters; a signal not forwarded has zeros.
func (f *forwarder) Stats() forwardStats {
	s := forwardStats{LogRecords: &queueStats{}, MetricPoints: &queueStats{}}
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

// lost is how many log records and metric data points were not
// delivered; final after Shutdown.
func (f *forwarder) lost() (logRecords, metricPoints int64) {
	s := f.Stats()
	return s.LogRecords.Lost(), s.MetricPoints.Lost()
}

// losses is what each forwarded signal did not deliver (see Loss).
func (f *forwarder) losses() []Loss {
	if f == nil {
		return nil
	}
	var out []Loss
	if f.logs != nil {
		out = append(out, f.logs.q.loss())
	}
	if f.metrics != nil {
		out = append(out, f.metrics.q.loss())
	}
	return out
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

func newLogPipeline(exp sdklog.Exporter, cfg forwardConfig, timeout time.Duration, rep *exportReporter) *logPipeline {
	return &logPipeline{
		exp:          exp,
		q:            newQueue(cfg.LogQueueSize, logBatch, cfg.BatchInterval, timeout, exp.Export, func(sdklog.Record) int { return 1 }, rep),
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
		res := otlpconv.Resource(rl.GetResource(), rl.GetSchemaUrl())
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
			logger := lp.Logger(sc.GetName(), otlpconv.LoggerOptions(sc, sl.GetSchemaUrl())...)
			for _, r := range sl.GetLogRecords() {
				rec, sc, ok := otlpconv.LogRecord(r)
				ctx := context.Background()
				if ok {
					ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
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

func newMetricPipeline(exp sdkmetric.Exporter, cfg forwardConfig, timeout time.Duration, rep *exportReporter) *metricPipeline {
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
	return &metricPipeline{exp: exp, q: newQueue(cfg.MetricQueueSize, 1, cfg.BatchInterval, timeout, export, size, rep)}
}

func (p *metricPipeline) emit(req *colmetricspb.ExportMetricsServiceRequest) {
	st := &p.q.stats
	rms, dropped := otlpconv.ResourceMetrics(req.GetResourceMetrics())
	// Every point is converted but those counted dropped.
	n := dropped
	for _, rm := range rms {
		n += p.q.size(rm)
	}
	st.Received.Add(int64(n))
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
