package main

import (
	"context"
	"fmt"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/report"
	"github.com/cbc-otel/cbc-otel/tap"
)

// observer connects the taps of a wrapped child to an ingest pipeline. The
// pipeline runs on its own goroutine so that the passthrough only ever pays
// for a copy into the tap.
type observer struct {
	stdout, stdin *tap.Tap
	pipe          *ingest.Pipeline
	runs          report.Collector
	done          chan struct{}
}

// startObserver starts a live pipeline with opts (whose sinks get the
// observer's run collector added) behind two taps of tapQueue bytes each.
func startObserver(ctx context.Context, tapQueue int, opts ingest.PipelineOptions) *observer {
	o := &observer{
		stdout: tap.NewTap(tapQueue),
		stdin:  tap.NewTap(tapQueue),
		done:   make(chan struct{}),
	}
	opts.Live = true
	opts.Tracker.Sinks = append(append([]ingest.Sink(nil), opts.Tracker.Sinks...), &o.runs)
	o.pipe = ingest.NewPipeline(opts)
	go func() {
		defer close(o.done)
		o.pipe.Consume(ctx, o.stdout, o.stdin, 0)
	}()
	return o
}

// finish closes the taps once the child's streams are done and waits, at
// most until ctx's deadline, for the pipeline to process what they hold and
// finalize every run.
func (o *observer) finish(ctx context.Context) error {
	o.stdout.Close()
	o.stdin.Close()
	select {
	case <-o.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("telemetry pipeline did not finish: %w", ctx.Err())
	}
}

// stats returns the pipeline's counters.
func (o *observer) stats() *ingest.Stats { return o.pipe.Stats() }
