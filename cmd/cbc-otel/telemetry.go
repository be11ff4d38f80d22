package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// telemetryFlags are the flags every mode that runs the pipeline shares:
// the Tracker's grace window and line cap, and the sinks' own flags.
type telemetryFlags struct {
	grace         time.Duration
	maxLine       int
	captureErrors bool
	metrics       metricsFlags
	traces        tracesFlags
}

// register defines the flags. live is true for run and demo (a process that
// lives while the child does: listen address, Pushgateway, OTLP), false for
// replay (files only, plus OTLP for backfill).
func (f *telemetryFlags) register(fs *flag.FlagSet, live bool) {
	fs.DurationVar(&f.grace, "grace", ingest.DefaultGrace, "grace window after a run's notification for late snapshots")
	fs.IntVar(&f.maxLine, "max-line", ingest.DefaultMaxLine, "bytes of one line looked at; longer lines of interest are rejected as too_long (the bytes still pass through)")
	fs.BoolVar(&f.captureErrors, "capture-errors", false,
		"keep the text of error fields (patch.error, an agent's error) in span statuses, summaries and replay output; off by default, they can quote secrets: only that there was an error is kept")
	f.metrics.register(fs, live)
	f.traces.register(fs, live)
}

func (f *telemetryFlags) validate() error {
	var errs []error
	if f.grace < 0 {
		errs = append(errs, errors.New("--grace must not be negative"))
	}
	if f.maxLine < 1024 {
		errs = append(errs, errors.New("--max-line must be at least 1024"))
	}
	errs = append(errs, f.metrics.validate(), f.traces.validate())
	return errors.Join(errs...)
}

// telemetry is the running sink side of one pipeline: one Stats, one
// metrics registry, one tracer provider.
type telemetry struct {
	stats   *ingest.Stats
	metrics *metricsRuntime
	traces  *tracesRuntime
	logger  *slog.Logger
}

// start builds the sinks. Failures of optional outputs (a port taken, an
// exporter that cannot be built) are logged by the sinks themselves; an
// error here means a configuration that validate should have refused.
func (f *telemetryFlags) start(ctx context.Context, env func(string) string, logger *slog.Logger) (*telemetry, error) {
	t := &telemetry{stats: new(ingest.Stats), logger: logger}
	tr, err := f.traces.start(ctx, env, logger)
	if err != nil {
		return nil, err
	}
	t.traces = tr
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

// pipelineOptions returns the options of a pipeline feeding these sinks.
func (t *telemetry) pipelineOptions(f *telemetryFlags, live bool, extra ...ingest.Sink) ingest.PipelineOptions {
	grace := f.grace
	if grace == 0 {
		grace = -1 // the Tracker reads 0 as "default"
	}
	sinks := append([]ingest.Sink{t.metrics.sink()}, extra...)
	if s := t.traces.sink(); s != nil {
		sinks = append(sinks, s)
	}
	return ingest.PipelineOptions{
		MaxLine: f.maxLine,
		Live:    live,
		Decode:  ingest.DecodeOptions{KeepPreviews: t.traces.capturePreviews(), KeepErrors: f.captureErrors},
		Tracker: ingest.TrackerOptions{Grace: grace, Sinks: sinks, Stats: t.stats},
	}
}

// shutdown flushes spans, then writes, pushes and stops the metrics side,
// all within ctx. Errors are logged, never returned: telemetry never
// changes an exit status.
func (t *telemetry) shutdown(ctx context.Context) {
	if t == nil {
		return
	}
	if err := t.traces.shutdown(ctx); err != nil {
		t.logger.Error("flushing traces", "err", err)
	}
	if err := t.metrics.shutdown(ctx); err != nil {
		t.logger.Error("flushing metrics", "err", err)
	}
}
