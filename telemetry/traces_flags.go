package telemetry

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/cbc-otel/cbc-otel/egress"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/traces"
)

// Defaults of the traces flags.
const (
	defaultTracesFlushTimeout = 5 * time.Second
	defaultTracesQueue        = egress.DefaultQueueSize
)

// tracesFlags holds the trace export flags shared by run, demo and replay.
// Every flag left empty falls back to the standard OTEL_* variable (see
// egress.Config), so flags override the environment. What no flag covers
// (OTLP headers, certificates, compression, timeout, insecure; the
// resource) the OpenTelemetry SDK reads from the process environment.
type tracesFlags struct {
	exporter, endpoint, protocol, file string
	capturePreviews                    bool
	flushTimeout                       time.Duration
	queue                              int
	live                               bool // registered for a live process (run, demo)
	// logLevelSet reports whether --log.level was given on the command
	// line these flags were registered on; nil: it was not.
	logLevelSet func() bool
	// console is where the console exporter writes: the command's stderr
	// (never stdout); nil means os.Stderr.
	console io.Writer
	version string // service.version
	forward bool   // the CLI's logs and metrics are forwarded (--cli-telemetry.join)
}

// register defines the traces flags on fs. live is true for run and demo
// (a wrapped child whose stdout is not ours), false for replay.
func (f *tracesFlags) register(fs *flag.FlagSet, live bool) {
	f.live = live
	f.logLevelSet = func() bool {
		set := false
		fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == "log.level" })
		return set
	}
	fs.StringVar(&f.exporter, "traces.exporter", "",
		"traces exporter: otlp, none, or console (OTLP/JSON lines on stderr, never stdout) (default: $OTEL_TRACES_EXPORTER, else otlp when an OTLP endpoint is set)")
	fs.StringVar(&f.endpoint, "otlp.endpoint", "",
		"OTLP endpoint, URL or host:port (plaintext); default $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, $OTEL_EXPORTER_OTLP_ENDPOINT (http:// or https:// URLs); none = no OTLP export")
	fs.StringVar(&f.protocol, "otlp.protocol", "",
		"OTLP protocol: grpc or http/protobuf (default $OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, $OTEL_EXPORTER_OTLP_PROTOCOL, else grpc)")
	fs.StringVar(&f.file, "traces.file", "",
		"also write spans to this file as OTLP/JSON, one ExportTraceServiceRequest per line (the Collector's otlpjsonfile format)")
	fs.BoolVar(&f.capturePreviews, "traces.capture-previews", false,
		"export resultPreview, promptPreview and summary as span attributes (user and model text: off by default)")
	fs.DurationVar(&f.flushTimeout, "traces.flush-timeout", defaultTracesFlushTimeout,
		"at exit, how long to wait for queued spans to be exported before giving up (and counting them as dropped)")
	fs.IntVar(&f.queue, "traces.queue", defaultTracesQueue,
		"ended spans held for export; when full, spans are dropped and counted rather than slowing the pipeline")
}

// consoleOut is the console exporter's writer.
func (f *tracesFlags) consoleOut() io.Writer {
	if f.console == nil {
		return os.Stderr
	}
	return f.console
}

// validate checks the flag values before anything starts.
func (f *tracesFlags) validate() error {
	var errs []error
	switch f.exporter {
	case "", egress.ExporterOTLP, egress.ExporterNone, egress.ExporterConsole:
	default:
		errs = append(errs, fmt.Errorf("--traces.exporter %q: want otlp, none or console", f.exporter))
	}
	switch f.protocol {
	case "", egress.ProtocolGRPC, egress.ProtocolHTTP:
	default:
		errs = append(errs, fmt.Errorf("--otlp.protocol %q: want grpc or http/protobuf", f.protocol))
	}
	if f.endpoint != "" {
		if err := egress.CheckEndpoint(f.endpoint); err != nil {
			errs = append(errs, fmt.Errorf("--otlp.endpoint: %w", err))
		}
	}
	if f.exporter == egress.ExporterNone && f.endpoint != "" && !egress.NoEndpoint(f.endpoint) {
		errs = append(errs, errors.New("--otlp.endpoint conflicts with --traces.exporter none"))
	}
	if f.file != "" {
		dir := filepath.Dir(f.file)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			errs = append(errs, fmt.Errorf("--traces.file %s: directory %s does not exist", f.file, dir))
		}
	}
	if f.flushTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--traces.flush-timeout %s: must be positive", f.flushTimeout))
	}
	if f.queue < 1 {
		errs = append(errs, fmt.Errorf("--traces.queue %d: must be at least 1", f.queue))
	}
	return errors.Join(errs...)
}

// tracesRuntime is the traces side of one cbc-otel process. Its methods are
// safe on a nil runtime and on one with tracing off.
type tracesRuntime struct {
	prov         *egress.Egress // nil when off
	sk           *traces.Sink
	parent       trace.SpanContext // the process's TRACEPARENT; invalid: none
	previews     bool
	flushTimeout time.Duration
	logger       *slog.Logger
	// lossLogger says export failures and, at exit, what was lost (see
	// lossLogger).
	lossLogger *slog.Logger
	summarized atomic.Bool // the losses were said: once, whoever shuts down
}

// start sets up the exporters the flags and the environment ask for. env
// serves the variables only cbc-otel reads: TRACEPARENT and TRACESTATE
// (serve hides its own), OTEL_TRACES_EXPORTER and the protocol variables;
// nil means os.Getenv. The SDK's variables (endpoint, headers,
// certificates, compression, timeout, resource) always come from the
// process environment (see egress.Config). With no endpoint, no file and
// no console it returns a runtime with tracing off (the wrapper stays a
// pure pipe). An error means the configuration cannot work (e.g.
// --traces.exporter otlp without any endpoint, a malformed
// OTEL_EXPORTER_OTLP_HEADERS, an unwritable --traces.file).
func (f *tracesFlags) start(ctx context.Context, env func(string) string, logger *slog.Logger) (*tracesRuntime, error) {
	r, err := f.setup(ctx, env, logger)
	if err != nil {
		return nil, err
	}
	r.newSink(nil)
	return r, nil
}

// setup is start without the sink: under --cli-telemetry.join the join is
// made on the exporters first, then the sink on the join (newSink).
func (f *tracesFlags) setup(ctx context.Context, env func(string) string, logger *slog.Logger) (*tracesRuntime, error) {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if env == nil {
		env = os.Getenv
	}
	flush := f.flushTimeout
	if flush <= 0 {
		flush = defaultTracesFlushTimeout
	}
	lossLog := f.lossLogger(logger)
	prov, err := egress.New(ctx, egress.Config{
		Exporter:  f.exporter,
		Endpoint:  f.endpoint,
		Protocol:  f.protocol,
		File:      f.file,
		QueueSize: f.queue,
		// OTEL_TRACES_EXPORTER=console goes to stderr: stdout is the
		// wrapped CLI's stream (run) or the summary (replay).
		Console:        f.consoleOut(),
		ServiceVersion: f.version,
		IDGenerator:    traces.NewIDGenerator(),
		Forward:        f.forward, // the CLI's logs and metrics go where our spans go
		Env:            env,
		Logger:         lossLog,
	})
	if err != nil {
		return nil, fmt.Errorf("traces: %w", err)
	}
	r := &tracesRuntime{prov: prov, flushTimeout: flush, logger: logger, lossLogger: lossLog}
	if prov == nil {
		return r, nil
	}
	parent := traces.ParentFromEnv(env)
	if env("TRACEPARENT") != "" && !parent.IsValid() {
		logger.Warn("ignoring malformed TRACEPARENT")
	}
	r.previews, r.parent = f.capturePreviews, parent
	return r, nil
}

// newSink makes the process's traces sink, once its exporters exist and,
// under --cli-telemetry.join, the join (j; nil without), whose parent and
// launcher the sink takes.
func (r *tracesRuntime) newSink(j *cliJoin) {
	if !r.enabled() {
		return
	}
	opts := traces.Options{Parent: r.parent, CapturePreviews: r.previews}
	if j != nil {
		// Agent spans wait for the run's end: the CLI's cost of each
		// agent arrives until then.
		opts.Parent, opts.Launcher, opts.HoldAgents = j.parent, j.s.Joiner.Launcher, true
	}
	r.sk = traces.New(r.prov.TracerProvider(), opts)
	r.logger.Info("exporting traces", "to", r.prov.Describe(), "parent", r.parent.IsValid(), "previews", r.previews)
}

// streamSink is a traces sink of its own for one of serve's streams (it
// keeps per-stream state) on the process's exporters; nil when tracing
// is off.
func (r *tracesRuntime) streamSink() *traces.Sink {
	if !r.enabled() {
		return nil
	}
	return traces.New(r.prov.TracerProvider(), traces.Options{CapturePreviews: r.previews})
}

// outlet is where the CLI's joined telemetry leaves (join.Outlet): the
// egress itself; a nil one (tracing off) drops it.
func (r *tracesRuntime) outlet() *egress.Egress {
	if !r.enabled() {
		return nil
	}
	return r.prov
}

// cause is the short reason of an export failure, as the loss lines say
// it (the Pushgateway's too).
func cause(err error) string { return egress.Cause(err) }

// otlp is where spans go over OTLP; zero (off) when tracing is off.
func (r *tracesRuntime) otlp() egress.OTLPTarget {
	if !r.enabled() {
		return egress.OTLPTarget{}
	}
	return r.prov.OTLP()
}

// exportsOTLP reports whether spans go to an OTLP endpoint (not only to a
// file or the console).
func (r *tracesRuntime) exportsOTLP() bool { return r.otlp().On }

// enabled reports whether spans are exported anywhere.
func (r *tracesRuntime) enabled() bool { return r != nil && r.prov != nil }

// sink is the ingest.Sink to add to the pipeline; nil when tracing is off.
func (r *tracesRuntime) sink() ingest.Sink {
	if !r.enabled() {
		return nil
	}
	return r.sk
}

// capturePreviews tells the caller to decode previews
// (streamjson.DecodeOptions.KeepPreviews): only when they will be exported.
func (r *tracesRuntime) capturePreviews() bool { return r.enabled() && r.previews }

// exemplar returns the trace and workflow span ids (hex) of a run, for
// metric exemplars; nil when tracing is off (no trace to jump to).
func (r *tracesRuntime) exemplar() func(*ingest.Run) (traceID, spanID string) {
	if !r.enabled() {
		return nil
	}
	return r.sk.Exemplar
}

// dropped reads the spans lost so far; nil when tracing is off.
func (r *tracesRuntime) dropped() func() float64 {
	if !r.enabled() {
		return nil
	}
	return r.sk.Dropped
}

// exportErrors reads the failed export calls so far; nil when tracing is off.
func (r *tracesRuntime) exportErrors() func() float64 {
	if !r.enabled() {
		return nil
	}
	return r.sk.ExportErrors
}

// describe says where spans go ("OTLP grpc → http://localhost:4317",
// "OTLP/JSON file → spans.jsonl"), or "traces off".
func (r *tracesRuntime) describe() string {
	if !r.enabled() {
		return "traces off"
	}
	return r.prov.Describe()
}

// lossLogger is logger, except that when --log.level was left at its
// default it lets warnings through even if the level is error: spans that
// never reach the backend are what a user of a telemetry wrapper must
// hear about first (a dead collector used to cost every span silently),
// while run's and demo's other warnings keep the quiet default that
// scripts rely on. An explicit --log.level error silences them too.
func (f *tracesFlags) lossLogger(logger *slog.Logger) *slog.Logger {
	if f.logLevelSet != nil && f.logLevelSet() {
		return logger
	}
	return slog.New(warnFloor{logger.Handler()})
}

// warnFloor is a handler that handles warnings and errors whatever the
// level of the handler it wraps, and the rest as that one does.
type warnFloor struct{ slog.Handler }

func (h warnFloor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.Handler.Enabled(ctx, l)
}

func (h warnFloor) WithAttrs(as []slog.Attr) slog.Handler { return warnFloor{h.Handler.WithAttrs(as)} }

func (h warnFloor) WithGroup(name string) slog.Handler { return warnFloor{h.Handler.WithGroup(name)} }

// shutdown flushes queued spans within ctx and at most the flush timeout,
// never longer, and stops the exporters. Spans not delivered by then are
// counted as dropped, and said at warn, one line per exporter that lost
// any: "N spans dropped, not delivered to <endpoint> (<protocol>):
// <cause>". The deadline passing is no error then: that line says what it
// cost. Safe to call more than once.
func (r *tracesRuntime) shutdown(ctx context.Context) error {
	if !r.enabled() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.flushTimeout)
	defer cancel()
	err := r.prov.Shutdown(ctx)
	losses := r.prov.Losses()
	if r.summarized.CompareAndSwap(false, true) {
		for _, l := range losses {
			r.lossLogger.Warn(l.String(), "count", l.Items, "export_errors", l.ExportErrors)
		}
	}
	if err != nil && !(len(losses) > 0 && errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("traces: %w", err)
	}
	return nil
}

// undelivered is how many spans did not reach every destination (OTLP,
// file): dropped at a full queue, in failed exports or abandoned at the
// flush deadline. Final once shutdown returned; 0 when tracing is off.
func (r *tracesRuntime) undelivered() float64 {
	if !r.enabled() {
		return 0
	}
	return r.prov.Dropped()
}
