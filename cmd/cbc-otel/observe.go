package main

import (
	"context"
	"fmt"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/report"
)

// observerOptions configures the telemetry side of a wrapped child.
type observerOptions struct {
	tapQueue int           // bytes each tap may hold before it drops
	grace    time.Duration // grace window for late snapshots
	maxLine  int
	sinks    []ingest.Sink
}

// observer connects the taps of a wrapped child to an ingest pipeline. The
// pipeline runs on its own goroutine so that the passthrough only ever pays
// for a copy into the tap.
type observer struct {
	stdout, stdin *ingest.Tap
	pipe          *ingest.Pipeline
	runs          report.Collector
	done          chan struct{}
}

func startObserver(ctx context.Context, opts observerOptions) *observer {
	o := &observer{
		stdout: ingest.NewTap(opts.tapQueue),
		stdin:  ingest.NewTap(opts.tapQueue),
		done:   make(chan struct{}),
	}
	sinks := append([]ingest.Sink{&o.runs}, opts.sinks...)
	o.pipe = ingest.NewPipeline(ingest.PipelineOptions{
		MaxLine: opts.maxLine,
		Live:    true,
		Tracker: ingest.TrackerOptions{Grace: opts.grace, Sinks: sinks},
	})
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
