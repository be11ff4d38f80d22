package telemetry

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/cbc-otel/cbc-otel/exposition"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/metrics"
	"github.com/cbc-otel/cbc-otel/runspage"
)

// defaultFlushTimeout is the --push.timeout default: it bounds the push at
// shutdown when the caller's context has no earlier deadline.
const defaultFlushTimeout = 10 * time.Second

// metricsFlags holds the Prometheus-side flags shared by run, demo and
// replay (replay has only --metrics.file and --metrics.max-workflows).
type metricsFlags struct {
	listen, webConfig, file, pushURL, pushJob string
	workflowAllow                             string         // --metrics.workflow-allow, REGEX or FILE
	allow                                     *regexp.Regexp // workflowAllow compiled by validate
	maxWorkflows, maxModels                   int
	flushTimeout                              time.Duration     // --push.timeout
	serve                                     bool              // the listen and push flags were registered
	noPush                                    bool              // serve: a sidecar is scraped, it has no push flags
	noListen                                  bool              // run: --web.listen-address defaults to off
	webRuns                                   int               // --web.runs: finished runs on the page at /; 0: no page
	page                                      http.Handler      // the page at / (telemetry's runs page); nil: none
	web                                       webFlags          // --web.telemetry-path and the other exporter conventions
	constLabels                               map[string]string // on every series: demo's demo="true"
	version                                   string            // cbc_otel_build_info
}

// register defines the metrics flags on fs. serve selects the flags of a
// live process (listen address, web config, Pushgateway); replay passes
// false and gets only the file and cap flags.
func (m *metricsFlags) register(fs *flag.FlagSet, serve bool) {
	m.serve = serve
	m.flushTimeout = defaultFlushTimeout
	if serve {
		// run serves nothing unless asked (issue 29): an SDK starts one
		// wrapper per session, and a port they all want is a fight whose
		// losers write errors into the CLI's stderr.
		def := exposition.DefaultAddr
		if m.noListen {
			def = ""
		}
		fs.StringVar(&m.listen, "web.listen-address", def,
			"address of the /metrics, /healthz and /readyz endpoints and the runs page: 127.0.0.1:9478 on loopback, :9478 on every interface (then protect the page with --web.config.file); empty disables. 9464 is Claude Code's port")
		fs.StringVar(&m.webConfig, "web.config.file", "",
			"exporter-toolkit web config file enabling TLS and/or basic auth on the metrics endpoint")
		fs.IntVar(&m.webRuns, "web.runs", runspage.DefaultRuns,
			"finished workflow runs the page at / of the listen address shows, besides the open ones (0 disables the page)")
		m.web.register(fs)
		if m.noPush {
			m.registerFiles(fs)
			return
		}
		fs.StringVar(&m.pushURL, "push.gateway", "",
			"Pushgateway URL (http[s]://[user:pass@]host:port) to push the final metrics to on exit")
		fs.StringVar(&m.pushJob, "push.job", "cbc-otel", "job label of the Pushgateway group")
		fs.DurationVar(&m.flushTimeout, "push.timeout", defaultFlushTimeout,
			"the most the push at exit may take (a gateway that never answers delays the exit by this much; the --metrics.file is written before)")
	}
	m.registerFiles(fs)
}

// registerFiles defines the flags every mode has: the metrics file and the
// label cap.
func (m *metricsFlags) registerFiles(fs *flag.FlagSet) {
	fs.StringVar(&m.file, "metrics.file", "", "write the final metrics in Prometheus text format to this file on exit (atomically)")
	fs.IntVar(&m.maxWorkflows, "metrics.max-workflows", metrics.DefaultMaxWorkflows,
		"distinct workflow label values before further workflows are counted as \"other\"")
	fs.StringVar(&m.workflowAllow, "metrics.workflow-allow", "",
		"only workflow names fully matching this regexp are label values, the others are counted as \"other\"; a readable file's name: one regexp per line (# comments); applied before --metrics.max-workflows")
	fs.IntVar(&m.maxModels, "metrics.max-models", metrics.DefaultMaxModels,
		"distinct model label values (cost and token metrics) before further models are counted as \"other\"")
}

// validate checks the flag values before anything starts, so that a typo
// is a usage error and not a silent lack of telemetry.
func (m *metricsFlags) validate() error {
	var errs []error
	if m.listen != "" {
		if err := checkListenAddr(m.listen); err != nil {
			errs = append(errs, fmt.Errorf("--web.listen-address %q: %w", m.listen, err))
		}
	}
	if m.webConfig != "" {
		if m.listen == "" {
			errs = append(errs, errors.New("--web.config.file needs --web.listen-address"))
		}
		if err := web.Validate(m.webConfig); err != nil {
			errs = append(errs, fmt.Errorf("--web.config.file %s: %w", m.webConfig, err))
		}
	}
	errs = append(errs, m.web.validate(m.listen))
	if m.pushURL != "" {
		if err := exposition.CheckPushURL(m.pushURL); err != nil {
			errs = append(errs, fmt.Errorf("--push.gateway: %w", err))
		}
		if m.pushJob == "" {
			errs = append(errs, errors.New("--push.job must not be empty"))
		}
	}
	if m.flushTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--push.timeout %s: must be positive", m.flushTimeout))
	}
	if m.file != "" {
		errs = append(errs, CheckOutputPath("metrics.file", m.file))
	}
	if m.maxWorkflows < 1 {
		errs = append(errs, fmt.Errorf("--metrics.max-workflows %d: must be at least 1", m.maxWorkflows))
	}
	m.allow = nil
	if m.workflowAllow != "" {
		re, err := metrics.CompileWorkflowAllow(m.workflowAllow)
		if err != nil {
			errs = append(errs, fmt.Errorf("--metrics.workflow-allow: %w", err))
		}
		m.allow = re
	}
	if m.maxModels < 1 {
		errs = append(errs, fmt.Errorf("--metrics.max-models %d: must be at least 1", m.maxModels))
	}
	return errors.Join(errs...)
}

// checkListenAddr accepts host:port with a numeric port (":9478",
// "127.0.0.1:0", "[::1]:9478").
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number in 0-65535", port)
	}
	return nil
}

// enabled reports whether the flags ask for any metrics output.
func (m *metricsFlags) enabled() bool {
	return m.listen != "" || m.file != "" || m.pushURL != ""
}

// metricsRuntime is the metrics side of one cbc-otel process: the Metrics
// sink, the server if one is listening, and the outputs written at
// shutdown.
type metricsRuntime struct {
	flags  metricsFlags
	m      *metrics.Metrics
	logger *slog.Logger
	// gatherer is what /metrics and the file expose: the registry, or
	// serve's cumulative totals around it (cum: restored base + this
	// process; nil but in serve).
	gatherer prometheus.Gatherer
	cum      *exposition.Cumulative
	ckpt     *metrics.Checkpoint // of cum

	ready      atomic.Bool
	started    bool     // serve ran: the outputs at shutdown are due
	addr       net.Addr // nil when not serving
	stopServer context.CancelFunc
	served     chan error // Serve's result; nil when not serving

	once    sync.Once
	shutErr error
}

// start builds the Metrics; serve binds and serves it. The returned error
// is for what cannot happen with validated flags.
func (m *metricsFlags) start(ctx context.Context, stats *ingest.Stats, exemplar func(*ingest.Run) (string, string), logger *slog.Logger) (*metricsRuntime, error) {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if m.allow == nil && m.workflowAllow != "" { // not validated (validate compiles it)
		re, err := metrics.CompileWorkflowAllow(m.workflowAllow)
		if err != nil {
			return nil, fmt.Errorf("--metrics.workflow-allow: %w", err)
		}
		m.allow = re
	}
	met, err := metrics.New(metrics.Options{
		Stats:         stats,
		Version:       m.version,
		MaxWorkflows:  m.maxWorkflows,
		WorkflowAllow: m.allow,
		MaxModels:     m.maxModels,
		Exemplar:      exemplar,
		// A replay's file describes the recording, not the replaying process.
		// --web.disable-exporter-metrics: the same for a live process.
		NoRuntimeCollectors: !m.serve || m.web.noExporterMetrics,
		ConstLabels:         m.constLabels,
	})
	if err != nil {
		return nil, err
	}
	r := &metricsRuntime{flags: *m, m: met, logger: logger, gatherer: met.Registry()}
	if r.flags.flushTimeout <= 0 {
		r.flags.flushTimeout = defaultFlushTimeout
	}
	r.ready.Store(true)
	return r, nil
}

// serve starts the outputs: the server on --web.listen-address, if set
// (see listen), with /readyz answering ready (nil: until shutdown), and
// the file and the push at shutdown. A server that cannot start is
// logged, and the process goes on without it (telemetry never stops the
// child), unless required (serve): then it is returned and nothing is
// written at shutdown either, or serve's file would replace the last good
// one with totals never restored.
func (r *metricsRuntime) serve(ctx context.Context, ready func() error, required bool) error {
	if r.flags.listen != "" {
		if err := r.listen(ctx, nil, ready); err != nil {
			if required {
				return err
			}
			r.logger.Error("metrics endpoint not started; continuing without it", "addr", r.flags.listen, "err", err)
		}
	}
	r.started = true
	return nil
}

// listen serves g (nil: the registry) on --web.listen-address, with
// /readyz answering ready (nil: until shutdown), until shutdown. It is the
// one place a metrics server starts. A bind or web-config failure is
// returned: run carries on without a server, serve fails.
func (r *metricsRuntime) listen(ctx context.Context, g prometheus.Gatherer, ready func() error) error {
	if g != nil {
		r.gatherer = g
	}
	if ready == nil {
		ready = func() error {
			if !r.ready.Load() {
				return errors.New("shutting down")
			}
			return nil
		}
	}
	srv, err := exposition.Listen(exposition.Options{
		Addr:          r.flags.listen,
		WebConfigFile: r.flags.webConfig,
		Gatherer:      r.gatherer,
		Logger:        r.logger,
		Ready:         ready,
		Page:          r.flags.page,
		TelemetryPath: r.flags.web.telemetryPath,
		MaxRequests:   r.flags.web.maxRequests,
		SystemdSocket: r.flags.web.systemdSocket,
		EnablePprof:   r.flags.web.pprof,
	})
	if err != nil {
		return err
	}
	r.addr = srv.Addr()
	// The server lives until shutdown, not until ctx: the final state must
	// stay scrapeable while the child's last events are processed.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.stopServer = cancel
	r.served = make(chan error, 1)
	go func() { r.served <- srv.Serve(sctx) }()
	r.logger.Info("serving metrics", "addr", r.addr.String(), "tls_config", r.flags.webConfig != "", "pprof", r.flags.web.pprof)
	return nil
}

// exposeTotals makes /metrics and the file expose the totals across
// restarts (serve): the restored base plus this process.
func (r *metricsRuntime) exposeTotals() {
	r.cum = exposition.NewCumulative(r.m.Registry(), "cbc_")
	r.ckpt = metrics.NewCheckpoint(r.m, r.cum)
	r.gatherer = r.cum
}

// checkpointer is serve's checkpoint of the totals across restarts.
func (r *metricsRuntime) checkpointer() ingest.Checkpointer {
	return r.ckpt
}

// baseRuns is how many finished runs the restored totals hold.
func (r *metricsRuntime) baseRuns() uint64 { return r.ckpt.BaseRuns() }

// sayShutdownErr logs what shutdown returned: a push the Pushgateway did
// not take in one line of its own saying where and why, the rest in one.
func (r *metricsRuntime) sayShutdownErr(err error) {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var rest []error
	for _, e := range errs {
		var pe *exposition.PushError
		if !errors.As(e, &pe) {
			rest = append(rest, e)
			continue
		}
		r.logger.Error(fmt.Sprintf("flushing metrics: push not delivered to %s (Pushgateway): %s", pe.URL, cause(pe.Err)))
	}
	if len(rest) > 0 {
		r.logger.Error("flushing metrics", "err", errors.Join(rest...))
	}
}

// sink is the ingest.Sink to add to the pipeline.
func (r *metricsRuntime) sink() ingest.Sink { return r.m }

// metrics is the Metrics itself (e.g. to SetExportCounters once the traces
// exporter exists).
func (r *metricsRuntime) metrics() *metrics.Metrics { return r.m }

// read reports whether anything reads the metrics: the listener, the
// file or the push.
func (r *metricsRuntime) read() bool {
	return r.addr != nil || r.flags.file != "" || r.flags.pushURL != ""
}

// listenAddr is the bound address, or nil when no server runs.
func (r *metricsRuntime) listenAddr() net.Addr { return r.addr }

// shutdown writes the metrics file and then pushes to the Pushgateway (if
// configured), then stops the server, all within ctx (and the push at most
// --push.timeout). It is safe to call more than once and on a nil
// runtime; errors are joined for the caller to log: they never change an
// exit status.
func (r *metricsRuntime) shutdown(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.once.Do(func() { r.shutErr = r.doShutdown(ctx) })
	return r.shutErr
}

func (r *metricsRuntime) doShutdown(ctx context.Context) error {
	r.ready.Store(false)
	if !r.started {
		return nil // never started: nothing to write, push or stop
	}
	var errs []error
	// The file first: it is local and quick, and a gateway that never
	// answers must not cost it (the process may be killed while it waits).
	if r.flags.file != "" {
		if err := exposition.WriteFile(r.flags.file, r.gatherer); err != nil {
			errs = append(errs, err)
		}
	}
	if r.flags.pushURL != "" {
		fctx, cancel := context.WithTimeout(ctx, r.flags.flushTimeout)
		// The job's process is gone once pushed: go_* and process_* would
		// describe nothing.
		g := exposition.WithPrefix(r.m.Registry(), "cbc_")
		if err := exposition.Push(fctx, r.flags.pushURL, r.flags.pushJob, g); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if r.stopServer != nil {
		r.stopServer()
		select {
		case err := <-r.served:
			if err != nil {
				errs = append(errs, err)
			}
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("metrics server did not stop: %w", ctx.Err()))
		}
	}
	return errors.Join(errs...)
}
