package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/cbc-otel/cbc-otel/telemetry"
)

// replayConfig holds replay's flags.
type replayConfig struct {
	json     bool
	width    int
	logLevel string
	logFmt   string
	tel      telemetry.Flags
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
	errs = append(errs, checkLogFormat(c.logFmt))
	errs = append(errs, c.tel.Validate())
	return errors.Join(errs...)
}

// exitUndelivered is replay's status when it ran through, but some span it
// made did not reach every destination (the collector, the --traces-file):
// a backfill that lost spans must not pass for one that did not.
const exitUndelivered = 3

const replayUsage = `usage: cbc-otel replay [flags] FILE... (- for stdin)

Replays recorded stream-json stdout and prints every workflow run as a waterfall,
or with --json one JSON object per run and a final stats line.

Exit status: 0 all done; 1 a recording could not be read or the output written;
2 usage error; 3 ran through, but spans were not delivered (to the OTLP endpoint
or the --traces-file: how many, where and why is said on stderr).

flags:
`

// cmdReplay runs recordings through the pipeline, exports what they hold
// (metrics file, traces file or OTLP) and prints what it found. Each FILE is
// its own stream (its own Tracker); the counters and sinks are shared.
func cmdReplay(ctx context.Context, args []string, sio stdio) int {
	cfg := replayConfig{logLevel: "error"}
	fs := newFlagSet("replay", replayUsage, sio.err)
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object per run and a stats line instead of the waterfall")
	fs.IntVar(&cfg.width, "width", 100, "width of the waterfall in columns")
	fs.StringVar(&cfg.logLevel, "log.level", cfg.logLevel, "log level of cbc-otel's own messages on stderr: error, warn, info or debug")
	registerLogFormat(fs, &cfg.logFmt)
	cfg.tel.Register(fs, telemetry.Batch)
	files, ok, code := parseInterspersed(fs, args)
	if !ok {
		return code
	}
	cfg.files = files
	if err := cfg.validate(); err != nil {
		return fail(sio.err, "replay", exitUsage, err)
	}
	cfg.tel.Console, cfg.tel.Version = sio.err, buildVersion()
	tel, err := telemetry.New(ctx, &cfg.tel, os.Getenv, newLogger(sio.err, cfg.logLevel, cfg.logFmt))
	if err != nil {
		return fail(sio.err, "replay", exitUsage, err)
	}
	_ = tel.Start(ctx, telemetry.StartOptions{}) // files only: nothing to bind
	out, err := tel.Replay(ctx, cfg.files, sio.in, cfg.json)
	if err != nil {
		_ = tel.Shutdown(ctx)
		return fail(sio.err, "replay", exitFailure, err)
	}
	_ = tel.Shutdown(ctx)
	if err := telemetry.WriteRuns(sio.out, cfg.json, cfg.width, out); err != nil {
		return fail(sio.err, "replay", exitFailure, fmt.Errorf("writing output: %w", err))
	}
	// The runs are printed either way: the replay itself went fine.
	if tel.Undelivered() > 0 {
		return exitUndelivered
	}
	return exitOK
}
