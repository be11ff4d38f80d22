package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/report"
)

// replayConfig holds replay's flags.
type replayConfig struct {
	json    bool
	grace   time.Duration
	maxLine int
	width   int
	files   []string
}

func (c *replayConfig) validate() error {
	if len(c.files) == 0 {
		return errors.New("no FILE given (use - for stdin)")
	}
	if c.maxLine < 1024 {
		return fmt.Errorf("--max-line %d: must be at least 1024", c.maxLine)
	}
	if c.grace < 0 {
		return fmt.Errorf("--grace %s: must not be negative", c.grace)
	}
	return nil
}

// cmdReplay runs recordings through the pipeline and prints what it found.
// Each FILE is its own stream (its own Tracker); the counters are summed.
func cmdReplay(ctx context.Context, args []string, sio stdio) int {
	var cfg replayConfig
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(sio.err)
	fs.Usage = func() {
		fmt.Fprintf(sio.err, "usage: cbc-otel replay [flags] FILE... (- for stdin)\n\nReplays recorded stream-json stdout and prints every workflow run as a waterfall,\nor with --json one JSON object per run and a final stats line.\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object per run and a stats line instead of the waterfall")
	fs.DurationVar(&cfg.grace, "grace", ingest.DefaultGrace, "grace window after a run's notification for late snapshots, in stream time")
	fs.IntVar(&cfg.maxLine, "max-line", ingest.DefaultMaxLine, "bytes of one line looked at; longer lines of interest are rejected as too_long")
	fs.IntVar(&cfg.width, "width", 100, "width of the waterfall in columns")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	cfg.files = fs.Args()
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(sio.err, "cbc-otel replay: %v\n", err)
		return exitUsage
	}

	stats := new(ingest.Stats)
	var col report.Collector
	for _, name := range cfg.files {
		if err := replayFile(ctx, name, &cfg, stats, &col, sio.in); err != nil {
			fmt.Fprintf(sio.err, "cbc-otel replay: %v\n", err)
			return exitFailure
		}
	}
	var err error
	if cfg.json {
		err = report.WriteJSON(sio.out, col.Runs, stats)
	} else {
		err = report.WriteWaterfall(sio.out, col.Runs, stats, report.WaterfallOptions{Width: cfg.width})
	}
	if err != nil {
		fmt.Fprintf(sio.err, "cbc-otel replay: writing output: %v\n", err)
		return exitFailure
	}
	return exitOK
}

func replayFile(ctx context.Context, name string, cfg *replayConfig, stats *ingest.Stats, sink ingest.Sink, stdin io.Reader) error {
	var r io.Reader
	if name == "-" {
		r = stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("opening recording: %w", err)
		}
		defer f.Close()
		r = f
	}
	grace := cfg.grace
	if grace == 0 {
		grace = -1 // NewTracker reads 0 as the default
	}
	p := ingest.NewPipeline(ingest.PipelineOptions{
		MaxLine: cfg.maxLine,
		Tracker: ingest.TrackerOptions{Grace: grace, Sinks: []ingest.Sink{sink}, Stats: stats},
	})
	if err := ingest.Feed(ctx, p, ingest.SourceStdout, r); err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	p.Close()
	return nil
}
