// Package telemetry builds, exposes and shuts down the sink set of one
// cbc-otel process: the metrics registry and its exposure (listen address,
// file, Pushgateway), traces, the runs page, the summaries, the spool and
// the CLI-telemetry join. cmd/cbc-otel keeps flags, subcommands and exit
// codes; everything it runs behind a pipeline is built here.
package telemetry

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/metrics"
	"github.com/cbc-otel/cbc-otel/ndjson"
	"github.com/cbc-otel/cbc-otel/report"
	"github.com/cbc-otel/cbc-otel/runspage"
	"github.com/cbc-otel/cbc-otel/safetext"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// defaultStallAfter is --tracker.stall-after's default: a workflow's agents run for
// minutes, a silence of ten is worth a look.
const defaultStallAfter = 10 * time.Minute

// Flags are the flags every mode that runs the pipeline shares: the
// Tracker's grace window, caps and line cap, and the sinks' own flags.
// Register, then Validate, then Start.
type Flags struct {
	grace         time.Duration
	stallAfter    time.Duration
	maxLine       int
	caps          ingest.Caps // 0 fields: the Tracker's defaults
	captureErrors bool
	metrics       metricsFlags
	traces        tracesFlags
	mode          Mode // as registered

	// JoinCLI is run --cli-telemetry.join: set by the command, which owns
	// the flag.
	JoinCLI bool
	// Console is where the console span exporter writes: the command's
	// stderr (never stdout); nil means os.Stderr.
	Console io.Writer
	// Version is the binary's version (cbc_otel_build_info,
	// service.version, the runs page).
	Version string
}

// maxVersionLen bounds the build's version: a label value's bound.
const maxVersionLen = 128

// Mode says which command the flags are registered for: which flag groups
// exist and their defaults.
type Mode uint8

// The modes.
const (
	// Wrapper is run: a process that lives while its child does; no
	// listener unless --web.listen-address.
	Wrapper Mode = iota
	// Demo is demo: as Wrapper, with the listener on by default.
	Demo
	// Sidecar is serve: scraped, so no Pushgateway flags.
	Sidecar
	// Batch is replay: files only, plus OTLP for backfill.
	Batch
)

// Register defines the flags of mode on fs.
func (f *Flags) Register(fs *flag.FlagSet, mode Mode) {
	f.mode = mode
	live := mode != Batch
	f.metrics.noListen = mode == Wrapper // no port, no page unless --web.listen-address
	f.metrics.noPush = mode == Sidecar   // a sidecar is scraped
	if mode == Demo {
		// Every series says it is the demo's: the shipped alert rules leave
		// demo="true" out, so a demo scraped beside real wrappers pages nobody.
		f.metrics.constLabels = map[string]string{metrics.DemoLabel: "true"}
	}
	fs.DurationVar(&f.grace, "tracker.grace", ingest.DefaultGrace, "grace window after a run's notification for late snapshots")
	fs.DurationVar(&f.stallAfter, "tracker.stall-after", defaultStallAfter, "an unfinished workflow run with no event for this long is stalled (cbc_workflow_runs_stalled), and so is a live agent of one with no progress (cbc_workflow_agents_stalled; on the stream's clock in replay); 0 disables")
	fs.IntVar(&f.maxLine, "tracker.max-line", ndjson.DefaultMaxLine, "bytes of one line looked at; longer lines of interest are rejected as too_long (the bytes still pass through)")
	for _, c := range f.capFlags() {
		fs.IntVar(c.v, c.name, 0, fmt.Sprintf("%s (0 = %d)", c.usage, c.def))
	}
	fs.BoolVar(&f.captureErrors, "tracker.capture-errors", false,
		"keep the text of error fields (patch.error, an agent's error) in span statuses, summaries and replay output; off by default, they can quote secrets: only that there was an error is kept")
	f.metrics.register(fs, live)
	f.traces.register(fs, live)
}

// capFlag is the flag of one of the Tracker's caps (ingest.Caps).
type capFlag struct {
	name  string
	v     *int
	def   int // the Tracker's default, which 0 takes
	usage string
}

// capFlags lists the flags of the Tracker's caps, in the order they are
// registered. Each cap holds per stream (each has its own Tracker).
func (f *Flags) capFlags() []capFlag {
	d := ingest.DefaultCaps()
	return []capFlag{
		{"tracker.max-runs", &f.caps.Runs, d.Runs, "most unfinished workflow runs held per stream; beyond, the oldest is abandoned and counted as over_capacity"},
		{"tracker.max-tasks", &f.caps.Tasks, d.Tasks, "most unfinished non-workflow tasks held per stream; beyond, the oldest is abandoned and counted as over_capacity"},
		{"tracker.max-agents", &f.caps.Agents, d.Agents, "most agents kept per run; a snapshot's further agents are ignored and counted as over_capacity"},
		{"tracker.max-phases", &f.caps.Phases, d.Phases, "most phases kept per run; a snapshot's further phases are ignored and counted as over_capacity"},
		{"tracker.max-grace-runs", &f.caps.Grace, d.Grace, "most finished runs held in their grace window per stream; beyond, the one that has waited longest is finalized early and counted as over_capacity"},
	}
}

// Validate checks the values before anything starts.
func (f *Flags) Validate() error {
	var errs []error
	if f.grace < 0 {
		errs = append(errs, errors.New("--tracker.grace must not be negative"))
	}
	if f.stallAfter < 0 {
		errs = append(errs, errors.New("--tracker.stall-after must not be negative (0 disables)"))
	}
	for _, c := range f.capFlags() {
		if *c.v < 0 {
			errs = append(errs, fmt.Errorf("--%s %d: must not be negative (0 = the default)", c.name, *c.v))
		}
	}
	if f.maxLine < 1024 {
		errs = append(errs, errors.New("--tracker.max-line must be at least 1024"))
	}
	if f.metrics.webRuns < 0 || f.metrics.webRuns > 1000 {
		errs = append(errs, fmt.Errorf("--web.runs %d: must be in 0-1000", f.metrics.webRuns))
	}
	errs = append(errs, f.metrics.validate(), f.traces.validate())
	return errors.Join(errs...)
}

// Telemetry is the running sink side of a process: one Stats, one metrics
// registry, one tracer provider, and the flags they were built from.
type Telemetry struct {
	flags   *Flags
	stats   *ingest.Stats
	metrics *metricsRuntime
	traces  *tracesRuntime
	logger  *slog.Logger
	page    *runspage.Page        // the runs page at / of the listen address; nil: none
	join    *cliJoin              // --cli-telemetry.join; nil without
	self    prometheus.Registerer // see selfmetrics.go
	// command is the wrapped command (Wrap), whose name the minted parent
	// span of the join carries.
	command string

	shutOnce sync.Once
	shutErr  error
}

// New builds the sinks of one process from f (registered, validated), in
// the order the join's knot needs: traces exporters, the join, the traces
// sink, the runs page, the metrics. Nothing listens until Start. Failures
// of optional outputs (an exporter that cannot be built) are logged by the
// sinks themselves; an error here means a configuration that Validate
// should have refused. env serves TRACEPARENT and the variables only
// cbc-otel reads (nil: os.Getenv); serve hides its own TRACEPARENT: one
// sidecar serves many streams, it is no parent of theirs.
func New(ctx context.Context, f *Flags, env func(string) string, logger *slog.Logger) (*Telemetry, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if env == nil {
		env = os.Getenv
	}
	if f.mode == Sidecar {
		getenv := env
		env = func(k string) string {
			if k == "TRACEPARENT" {
				return ""
			}
			return getenv(k)
		}
	}
	t := &Telemetry{flags: f, stats: new(ingest.Stats), logger: logger}
	// The build's version is text from outside (ldflags, the module's
	// build info): cleaned once here, as a label's, the sinks only cut it.
	version := safetext.Clean(f.Version, maxVersionLen)
	f.traces.console, f.traces.version, f.metrics.version = f.Console, version, version
	f.traces.forward = f.JoinCLI // the egress forwards the CLI's logs and metrics too
	tr, err := f.traces.setup(ctx, env, logger)
	if err != nil {
		return nil, err
	}
	t.traces = tr
	if f.JoinCLI {
		t.join = newCLIJoin(tr, env, f.grace, logger)
	}
	tr.newSink(t.join)
	if f.metrics.serve && f.metrics.webRuns > 0 {
		t.page = runspage.New(runspage.Options{Runs: f.metrics.webRuns, Version: version,
			Gaps: func() string { return report.StatsOf(t.stats).GapsText() }})
		f.metrics.page = t.page // served by the metrics listener
	}
	met, err := f.metrics.start(ctx, t.stats, tr.exemplar(), logger)
	if err != nil {
		_ = tr.shutdown(ctx)
		return nil, err
	}
	t.metrics = met
	if tr.enabled() {
		met.metrics().SetExportCounters(tr.dropped(), tr.exportErrors())
	}
	if f.mode == Sidecar {
		met.exposeTotals()
	}
	t.self = selfRegisterer(met.m.Registry(), f.metrics.constLabels)
	return t, nil
}

// StartOptions says how Start exposes the process.
type StartOptions struct {
	// Ready answers /readyz (nil: ready until Shutdown); serve's engine
	// says 503 until its state is restored.
	Ready func() error
}

// Start binds the listen address (--web.listen-address) and serves
// /metrics, /healthz, /readyz and the runs page there until Shutdown; the
// outputs written at Shutdown (file, push) are those of a started
// process. A server that cannot start is an error for serve, whose job
// serving is; run, demo and replay log it and carry on without it:
// telemetry never stops the child.
func (t *Telemetry) Start(ctx context.Context, o StartOptions) error {
	return t.metrics.serve(ctx, o.Ready, t.flags.mode == Sidecar)
}

// trackerOptions returns the options of a Tracker under these flags.
func (f *Flags) trackerOptions(sinks []ingest.Sink, stats *ingest.Stats) ingest.TrackerOptions {
	return ingest.TrackerOptions{Grace: f.grace, StallAfter: f.stallAfter, Sinks: sinks, Stats: stats, Caps: f.caps}
}

// stream says what one pipeline reads, beyond the flags.
type stream struct {
	// live selects the wall clock (run, demo, serve); else the stream's
	// own timestamps are its clock (replay).
	live bool
	// now is the wall clock; nil means time.Now (serve's engine passes
	// its own).
	now func() time.Time
	// extra sinks come after the metrics sink and before the traces sink.
	extra []ingest.Sink
	// traces is the stream's traces sink; nil means the process's shared
	// one (if tracing is on).
	traces ingest.Sink
	// calls makes the pipeline take the CLI's own model calls (run
	// --cli-telemetry.join) from the join's queue.
	calls bool
	// metricsIfRead leaves the metrics sink out when no output reads it
	// (no listener, file or push): replay's default, where observing
	// metrics nobody reads was a tenth of its CPU. Not for a process whose
	// checkpoints keep the metrics (serve).
	metricsIfRead bool
}

// newPipeline is the pipeline of one stream: framing → decoding → Tracker
// → the sinks (metrics, s.extra, the runs page, traces). run, demo and replay build theirs
// here; serve's engine builds one per followed file from pipelineOptions.
func (t *Telemetry) newPipeline(s stream) *ingest.Pipeline {
	return ingest.NewPipeline(t.pipelineOptions(s))
}

// pipelineOptions is the one place the options of a pipeline are made
// from the flags and the sinks.
func (t *Telemetry) pipelineOptions(s stream) ingest.PipelineOptions {
	sinks := append([]ingest.Sink{t.metrics.sink()}, s.extra...)
	if s.metricsIfRead && !t.metrics.read() {
		sinks = sinks[1:]
	}
	if s.traces == nil {
		s.traces = t.traces.sink()
	}
	if t.page != nil && t.metrics.listenAddr() != nil {
		sinks = append(sinks, t.page) // one page, shared by every stream
	}
	if s.traces != nil {
		sinks = append(sinks, s.traces)
	}
	var calls *ingest.CallQueue
	if s.calls && t.join != nil {
		calls = t.join.calls
	}
	return ingest.PipelineOptions{
		MaxLine: t.flags.maxLine,
		Live:    s.live,
		Now:     s.now,
		Calls:   calls,
		Decode:  streamjson.DecodeOptions{KeepPreviews: t.traces.capturePreviews(), KeepErrors: t.flags.captureErrors},
		Tracker: t.flags.trackerOptions(sinks, t.stats),
	}
}

// Shutdown ends the process's telemetry, in order: the join's minted
// parent span, spans (and the CLI's logs and metrics) flushed, the metrics
// file written, pushed, the server stopped. It has the OTel Collector's
// component contract: safe on a nil Telemetry and without Start; the
// second and later calls return what the first did and log nothing; each
// step is bounded by its own flag, whatever ctx says (a stop signal must
// not cost the last spans), so that a backend that never answers holds it
// at most ShutdownBound; what was lost is said once, at warn (spans: one
// line per exporter; a push the Pushgateway did not take: one line of its
// own saying where and why). The error it returns is for tests and
// logs: telemetry never changes an exit status (replay reads what was
// lost from Undelivered).
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.shutOnce.Do(func() { t.shutErr = t.shutdown(ctx) })
	return t.shutErr
}

// ShutdownBound is the longest Shutdown takes: the egress's flush (spans,
// and the CLI's logs and metrics: --traces.flush-timeout), the push
// (--push.timeout), and the server's stop within what is left.
func (t *Telemetry) ShutdownBound() time.Duration {
	return t.flags.traces.flushTimeout + t.flags.metrics.flushTimeout
}

func (t *Telemetry) shutdown(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	t.join.shutdown(t, t.command) // the minted parent span, before the spans are flushed
	ctx, cancel := context.WithTimeout(ctx, t.flags.traces.flushTimeout+t.flags.metrics.flushTimeout)
	defer cancel()
	if err := t.traces.shutdown(ctx); err != nil {
		t.logger.Error("flushing traces", "err", err)
		errs = append(errs, err)
	}
	if err := t.metrics.shutdown(ctx); err != nil {
		t.metrics.sayShutdownErr(err)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// CheckOutputPath says, at start, what would otherwise fail only at exit:
// the file that flag names cannot be written (no such directory, a
// directory in its place, no permission).
func CheckOutputPath(flag, path string) error {
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("--%s %s: directory %s does not exist", flag, path, dir)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("--%s %s: is a directory", flag, path)
	}
	f, err := os.CreateTemp(dir, ".cbc-otel-check-*")
	if err != nil {
		return fmt.Errorf("--%s %s: directory %s is not writable: %w", flag, path, dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// ListenAddress is --web.listen-address as parsed ("": none).
func (f *Flags) ListenAddress() string { return f.metrics.listen }

// WarnLogger is log with the loss lines' warn floor: what a user must hear
// even under run's quiet default (lost spans, a deprecated flag name) is
// said at warn unless --log.level was given explicitly.
func (f *Flags) WarnLogger(log *slog.Logger) *slog.Logger { return f.traces.lossLogger(log) }

// ExportsOTLP reports whether spans go to an OTLP endpoint (not only to a
// file or the console); false on a nil Telemetry.
func (t *Telemetry) ExportsOTLP() bool { return t != nil && t.traces.exportsOTLP() }

// Addr is the bound address of the metrics endpoint and the runs page;
// nil when none listens.
func (t *Telemetry) Addr() net.Addr { return t.metrics.listenAddr() }

// HasPage reports whether the runs page is served at / of Addr.
func (t *Telemetry) HasPage() bool { return t.page != nil }

// TracesEnabled reports whether spans are exported anywhere.
func (t *Telemetry) TracesEnabled() bool { return t.traces.enabled() }

// DescribeTraces says where spans go ("OTLP grpc → http://localhost:4317",
// "OTLP/JSON file → spans.jsonl"), or "traces off".
func (t *Telemetry) DescribeTraces() string { return t.traces.describe() }

// Undelivered is how many spans did not reach every destination; final
// once Shutdown returned.
func (t *Telemetry) Undelivered() float64 { return t.traces.undelivered() }
