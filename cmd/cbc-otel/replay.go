package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/cbc-otel/cbc-otel/telemetry"
)

// replayConfig holds replay's flags.
type replayConfig struct {
	json     bool
	width    int
	logLevel string
	logFmt   string
	cpuProf  string // --profile.cpu
	heapProf string // --profile.heap
	tel      telemetry.Flags
	files    []string
	// renamedUsed lists the deprecated flag names used.
	renamedUsed []string
}

// register defines replay's flags on fs.
func (c *replayConfig) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.json, "summary.json", false, "print one JSON object per run and a stats line instead of the waterfall")
	fs.IntVar(&c.width, "summary.width", 100, "width of the waterfall in columns")
	fs.StringVar(&c.logLevel, "log.level", c.logLevel, "log level of cbc-otel's own messages on stderr: error, warn, info or debug")
	fs.StringVar(&c.cpuProf, "profile.cpu", "", "write a CPU profile of the replay to this file (pprof format: go tool pprof FILE)")
	fs.StringVar(&c.heapProf, "profile.heap", "", "write a heap profile to this file once the replay is done (pprof format)")
	registerLogFormat(fs, &c.logFmt)
	c.tel.Register(fs, telemetry.Batch)
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
// made did not reach every destination (the collector, the --traces.file):
// a backfill that lost spans must not pass for one that did not.
const exitUndelivered = 3

const replayUsage = `usage: cbc-otel replay [flags] FILE... (- for stdin)

Replays recorded stream-json stdout and prints every workflow run as a waterfall,
or with --summary.json one JSON object per run and a final stats line.

Exit status: 0 all done; 1 a recording could not be read or the output written;
2 usage error; 3 ran through, but spans were not delivered (to the OTLP endpoint
or the --traces.file: how many, where and why is said on stderr).

examples:
  # the runs of a recording as a waterfall
  cbc-otel replay session.ndjson
  # one JSON line per run, for a script
  cbc-otel replay --summary.json session.ndjson | jq 'select(.status == "failed")'
  # backfill: the recording's spans to a collector, its metrics to a file
  cbc-otel replay --otlp.endpoint http://127.0.0.1:4317 --metrics.file metrics.prom session.ndjson

flags:
`

// cmdReplay runs recordings through the pipeline, exports what they hold
// (metrics file, traces file or OTLP) and prints what it found. Each FILE is
// its own stream (its own Tracker); the counters and sinks are shared.
func cmdReplay(ctx context.Context, args []string, sio stdio) int {
	cfg := replayConfig{logLevel: "error"}
	fs := newFlagSet("replay", replayUsage, sio.err)
	registerVersion(fs)
	cfg.register(fs)
	files, ok, code := parseInterspersed(fs, args)
	if !ok {
		return code
	}
	cfg.files, cfg.renamedUsed = files, aliasesUsed(fs)
	if err := cfg.validate(); err != nil {
		return fail(sio.err, "replay", exitUsage, err)
	}
	stopProf, err := startProfiles(cfg.cpuProf, cfg.heapProf)
	if err != nil {
		return fail(sio.err, "replay", exitFailure, err)
	}
	code = replay(ctx, cfg, sio)
	if err := stopProf(); err != nil {
		return fail(sio.err, "replay", exitFailure, err)
	}
	return code
}

// startProfiles starts the CPU profile into cpu ("" none); stop ends it and
// writes the heap profile into heap ("" none). A profile that cannot be
// written fails the command: whoever asked for it is measuring.
func startProfiles(cpu, heap string) (stop func() error, err error) {
	var cf *os.File
	if cpu != "" {
		if cf, err = os.Create(cpu); err != nil {
			return nil, fmt.Errorf("CPU profile: %w", err)
		}
		if err := pprof.StartCPUProfile(cf); err != nil {
			cf.Close()
			return nil, fmt.Errorf("CPU profile: %w", err)
		}
	}
	return func() error {
		var errs []error
		if cf != nil {
			pprof.StopCPUProfile()
			if err := cf.Close(); err != nil {
				errs = append(errs, fmt.Errorf("CPU profile: %w", err))
			}
		}
		if heap != "" {
			errs = append(errs, writeHeapProfile(heap))
		}
		return errors.Join(errs...)
	}, nil
}

// writeHeapProfile writes the live heap (after a GC, so it shows what is
// still held, not garbage) and the allocations since start to name.
func writeHeapProfile(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return nil
}

// replay runs the recordings of cfg and prints what they hold; it returns
// the exit status.
func replay(ctx context.Context, cfg replayConfig, sio stdio) int {
	cfg.tel.Console, cfg.tel.Version = sio.err, buildVersion()
	log := newLogger(sio.err, cfg.logLevel, cfg.logFmt)
	warnRenamed(cfg.tel.WarnLogger(log), cfg.renamedUsed)
	tel, err := telemetry.New(ctx, &cfg.tel, os.Getenv, log)
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
