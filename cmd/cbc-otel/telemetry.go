package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/metrics"
	"github.com/cbc-otel/cbc-otel/ndjson"
	"github.com/cbc-otel/cbc-otel/report"
	"github.com/cbc-otel/cbc-otel/runspage"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/traces"
)

// defaultStallAfter is --stall-after's default: a workflow's agents run for
// minutes, a silence of ten is worth a look.
const defaultStallAfter = 10 * time.Minute

// telemetryFlags are the flags every mode that runs the pipeline shares:
// the Tracker's grace window, caps and line cap, and the sinks' own flags.
type telemetryFlags struct {
	grace         time.Duration
	stallAfter    time.Duration
	maxLine       int
	caps          ingest.Caps // 0 fields: the Tracker's defaults
	captureErrors bool
	joinCLI       bool // run --join-cli-telemetry: set by the command, no flag of its own here
	metrics       metricsFlags
	traces        tracesFlags
}

// register defines the flags. live is true for run and demo (a process that
// lives while the child does: listen address, Pushgateway, OTLP), false for
// replay (files only, plus OTLP for backfill).
func (f *telemetryFlags) register(fs *flag.FlagSet, live bool) {
	fs.DurationVar(&f.grace, "grace", ingest.DefaultGrace, "grace window after a run's notification for late snapshots")
	fs.DurationVar(&f.stallAfter, "stall-after", defaultStallAfter, "an unfinished workflow run with no event for this long is stalled (cbc_workflow_runs_stalled), and so is a live agent of one with no progress (cbc_workflow_agents_stalled; on the stream's clock in replay); 0 disables")
	fs.IntVar(&f.maxLine, "max-line", ndjson.DefaultMaxLine, "bytes of one line looked at; longer lines of interest are rejected as too_long (the bytes still pass through)")
	for _, c := range f.capFlags() {
		fs.IntVar(c.v, c.name, 0, fmt.Sprintf("%s (0 = %d)", c.usage, c.def))
	}
	fs.BoolVar(&f.captureErrors, "capture-errors", false,
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
func (f *telemetryFlags) capFlags() []capFlag {
	d := ingest.DefaultCaps()
	return []capFlag{
		{"max-runs", &f.caps.Runs, d.Runs, "most unfinished workflow runs held per stream; beyond, the oldest is abandoned and counted as over_capacity"},
		{"max-tasks", &f.caps.Tasks, d.Tasks, "most unfinished non-workflow tasks held per stream; beyond, the oldest is abandoned and counted as over_capacity"},
		{"max-agents", &f.caps.Agents, d.Agents, "most agents kept per run; a snapshot's further agents are ignored and counted as over_capacity"},
		{"max-phases", &f.caps.Phases, d.Phases, "most phases kept per run; a snapshot's further phases are ignored and counted as over_capacity"},
		{"max-grace-runs", &f.caps.Grace, d.Grace, "most finished runs held in their grace window per stream; beyond, the one that has waited longest is finalized early and counted as over_capacity"},
	}
}

func (f *telemetryFlags) validate() error {
	var errs []error
	if f.grace < 0 {
		errs = append(errs, errors.New("--grace must not be negative"))
	}
	if f.stallAfter < 0 {
		errs = append(errs, errors.New("--stall-after must not be negative (0 disables)"))
	}
	for _, c := range f.capFlags() {
		if *c.v < 0 {
			errs = append(errs, fmt.Errorf("--%s %d: must not be negative (0 = the default)", c.name, *c.v))
		}
	}
	if f.maxLine < 1024 {
		errs = append(errs, errors.New("--max-line must be at least 1024"))
	}
	if f.metrics.webRuns < 0 || f.metrics.webRuns > 1000 {
		errs = append(errs, fmt.Errorf("--web.runs %d: must be in 0-1000", f.metrics.webRuns))
	}
	errs = append(errs, f.metrics.validate(), f.traces.validate())
	return errors.Join(errs...)
}

// telemetry is the running sink side of a process: one Stats, one metrics
// registry, one tracer provider, and the flags they were built from.
type telemetry struct {
	flags   *telemetryFlags
	stats   *ingest.Stats
	metrics *metricsRuntime
	traces  *tracesRuntime
	logger  *slog.Logger
	page    *runspage.Page // the runs page at / of the listen address; nil: none
	join    *cliJoin       // --join-cli-telemetry; nil without
}

// start builds the sinks. Failures of optional outputs (a port taken, an
// exporter that cannot be built) are logged by the sinks themselves; an
// error here means a configuration that validate should have refused.
func (f *telemetryFlags) start(ctx context.Context, env func(string) string, logger *slog.Logger) (*telemetry, error) {
	t := &telemetry{flags: f, stats: new(ingest.Stats), logger: logger}
	tr, err := f.traces.setup(ctx, env, logger)
	if err != nil {
		return nil, err
	}
	t.traces = tr
	if f.joinCLI {
		t.join = newCLIJoin(tr, env, f.grace, logger)
	}
	tr.newSink(t.join)
	if f.metrics.serve && f.metrics.webRuns > 0 {
		t.page = runspage.New(runspage.Options{Runs: f.metrics.webRuns, Version: buildVersion(),
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
	return t, nil
}

// trackerOptions returns the options of a Tracker under these flags.
func (f *telemetryFlags) trackerOptions(sinks []ingest.Sink, stats *ingest.Stats) ingest.TrackerOptions {
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
	// --join-cli-telemetry) from the join's queue.
	calls bool
}

// newPipeline is the pipeline of one stream: framing → decoding → Tracker
// → the sinks (metrics, s.extra, the runs page, traces). run, demo and replay build theirs
// here; serve's engine builds one per followed file from pipelineOptions.
func (t *telemetry) newPipeline(s stream) *ingest.Pipeline {
	return ingest.NewPipeline(t.pipelineOptions(s))
}

// pipelineOptions is the one place the options of a pipeline are made
// from the flags and the sinks.
func (t *telemetry) pipelineOptions(s stream) ingest.PipelineOptions {
	sinks := append([]ingest.Sink{t.metrics.sink()}, s.extra...)
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

// shutdown flushes spans, then writes, pushes and stops the metrics side,
// within the flush timeouts of the flags, whatever ctx says (a stop signal
// must not cost the last spans). Errors are logged, never returned:
// telemetry never changes an exit status (replay reads what was lost
// from t.traces afterwards). Spans lost are said by t.traces, one line
// per exporter; a push the Pushgateway did not take gets one line of its
// own saying where and why.
func (t *telemetry) shutdown(ctx context.Context) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.flags.traces.flushTimeout+t.flags.metrics.flushTimeout)
	defer cancel()
	if err := t.traces.shutdown(ctx); err != nil {
		t.logger.Error("flushing traces", "err", err)
	}
	if err := t.metrics.shutdown(ctx); err != nil {
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		}
		var rest []error
		for _, e := range errs {
			var pe *metrics.PushError
			if !errors.As(e, &pe) {
				rest = append(rest, e)
				continue
			}
			t.logger.Error(fmt.Sprintf("flushing metrics: push not delivered to %s (Pushgateway): %s", pe.URL, traces.Cause(pe.Err)))
		}
		if len(rest) > 0 {
			t.logger.Error("flushing metrics", "err", errors.Join(rest...))
		}
	}
}
