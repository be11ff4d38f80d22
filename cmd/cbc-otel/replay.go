package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/report"
	"github.com/cbc-otel/cbc-otel/tap"
)

// replayConfig holds replay's flags.
type replayConfig struct {
	json     bool
	width    int
	logLevel string
	tel      telemetryFlags
	files    []string
}

func (c *replayConfig) validate() error {
	var errs []error
	if len(c.files) == 0 {
		errs = append(errs, errors.New("no FILE given (use - for stdin)"))
	}
	if _, err := parseLogLevel(c.logLevel); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.tel.validate())
	return errors.Join(errs...)
}

// cmdReplay runs recordings through the pipeline, exports what they hold
// (metrics file, traces file or OTLP) and prints what it found. Each FILE is
// its own stream (its own Tracker); the counters and sinks are shared.
func cmdReplay(ctx context.Context, args []string, sio stdio) int {
	cfg := replayConfig{logLevel: "error"}
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(sio.err)
	fs.Usage = func() {
		fmt.Fprintf(sio.err, "usage: cbc-otel replay [flags] FILE... (- for stdin)\n\nReplays recorded stream-json stdout and prints every workflow run as a waterfall,\nor with --json one JSON object per run and a final stats line.\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object per run and a stats line instead of the waterfall")
	fs.IntVar(&cfg.width, "width", 100, "width of the waterfall in columns")
	fs.StringVar(&cfg.logLevel, "log.level", cfg.logLevel, "log level of cbc-otel's own messages on stderr: error, warn, info or debug")
	cfg.tel.register(fs, false)
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
	level, _ := parseLogLevel(cfg.logLevel)
	logger := slog.New(slog.NewTextHandler(sio.err, &slog.HandlerOptions{Level: level}))

	tel, err := cfg.tel.start(ctx, os.Getenv, logger)
	if err != nil {
		fmt.Fprintf(sio.err, "cbc-otel replay: %v\n", err)
		return exitUsage
	}
	var col report.Collector
	for _, name := range cfg.files {
		if err := replayFile(ctx, name, tel.pipelineOptions(&cfg.tel, false, &col), sio.in); err != nil {
			tel.shutdown(context.Background())
			fmt.Fprintf(sio.err, "cbc-otel replay: %v\n", err)
			return exitFailure
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.tel.traces.flushTimeout+cfg.tel.metrics.flushTimeout)
	defer cancel()
	tel.shutdown(sctx)
	if cfg.json {
		err = report.WriteJSON(sio.out, col.Runs, tel.stats)
	} else {
		err = report.WriteWaterfall(sio.out, col.Runs, tel.stats, report.WaterfallOptions{Width: cfg.width})
	}
	if err != nil {
		fmt.Fprintf(sio.err, "cbc-otel replay: writing output: %v\n", err)
		return exitFailure
	}
	return exitOK
}

func replayFile(ctx context.Context, name string, opts ingest.PipelineOptions, stdin io.Reader) error {
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
	p := ingest.NewPipeline(opts)
	if err := ingest.Feed(ctx, p, tap.SourceStdout, r); err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	p.Close()
	return nil
}
