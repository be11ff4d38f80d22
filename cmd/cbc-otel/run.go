package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/cbc-otel/cbc-otel/supervise"
	"github.com/cbc-otel/cbc-otel/telemetry"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// defaultConsumerWait bounds how long the wrapper waits, after the child is
// done, for the tap consumer to finish: telemetry must never hold up the exit.
const defaultConsumerWait = 5 * time.Second

// runConfig is the configuration of `cbc-otel run`. Later issues add their
// flags here: a field, a line in register, a check in validate.
type runConfig struct {
	killTimeout  time.Duration
	drainTimeout time.Duration
	logLevel     string
	logFormat    string
	tapQueue     int
	summary      bool
	summaryFile  string
	stepSummary  string // --summary.step-file, else $GITHUB_STEP_SUMMARY
	stepOutput   string // --summary.step-output, else $GITHUB_OUTPUT
	tel          telemetry.Flags
	spool        telemetry.SpoolFlags
	joinCLI      bool            // --cli-telemetry.join
	collect      bool            // keep the runs seen for the caller (demo)
	explicit     map[string]bool // flags set on the command line, by their new names
	renamedUsed  []string        // deprecated flag names used (warned once the logger exists)
	command      []string        // CMD [ARGS...], after --

	// --budget.max-cost-usd (0: no cap) and --budget.stop-timeout
	budgetMaxCost     float64
	budgetStopTimeout time.Duration
	// budgetShow is the demo's budget for show (demo --budget.show-usd):
	// spend is shown against it, nothing acts on it.
	budgetShow float64
}

func defaultRunConfig() runConfig {
	c := runConfig{
		killTimeout:  supervise.DefaultKillTimeout,
		drainTimeout: supervise.DefaultDrainTimeout,
		logLevel:     "error",
		logFormat:    defaultLogFormat,
		tapQueue:     2 << 20,

		budgetStopTimeout: defaultBudgetStopTimeout,
	}
	// The telemetry flags keep their defaults in their registration.
	c.tel.Register(flag.NewFlagSet("defaults", flag.ContinueOnError), telemetry.Wrapper)
	return c
}

// register declares the flags on fs, with the config's values as defaults.
func (c *runConfig) register(fs *flag.FlagSet) {
	fs.DurationVar(&c.killTimeout, "child.kill-timeout", c.killTimeout, "after a stop signal, SIGKILL the child if it has not exited within this")
	fs.DurationVar(&c.drainTimeout, "child.drain-timeout", c.drainTimeout, "after the child exited, wait at most this for EOF on its stdout (a grandchild may hold it open)")
	fs.StringVar(&c.logLevel, "log.level", c.logLevel, "log level of cbc-otel's own messages on stderr: error, warn, info or debug")
	registerLogFormat(fs, &c.logFormat)
	fs.IntVar(&c.tapQueue, "tap.queue-bytes", c.tapQueue, "bytes each telemetry tap may queue before it drops (the pipe never waits for telemetry)")
	fs.BoolVar(&c.summary, "summary.waterfall", c.summary, "when the child exits, print the waterfall of the runs seen to stderr")
	fs.StringVar(&c.summaryFile, "summary.file", c.summaryFile, "when the child exits, write the runs seen to this file, one JSON object per line (the replay --summary.json contract)")
	fs.StringVar(&c.stepSummary, "summary.step-file", c.stepSummary, "when the child exits, append a Markdown table of the runs seen to this file (a CI step summary; default $GITHUB_STEP_SUMMARY)")
	fs.StringVar(&c.stepOutput, "summary.step-output", c.stepOutput, "when the child exits, append the session's cost, tokens by type and runs by status to this file (GitHub Actions step outputs; default $GITHUB_OUTPUT)")
	fs.BoolVar(&c.joinCLI, "cli-telemetry.join", c.joinCLI, "switch the CLI's own OpenTelemetry on, receive it on 127.0.0.1, place its model and tool spans under our agent spans, count its cost per run and agent, and forward it all to our exporter (see docs/traces.md)")
	fs.Float64Var(&c.budgetMaxCost, "budget.max-cost-usd", c.budgetMaxCost, "stop the session (an interrupt on the CLI's stdin, as an SDK sends) once its spend passes this many USD: the result lines' total_cost_usd, or the joined cost with --cli-telemetry.join, whichever is higher; 0: no cap (see docs/cli.md)")
	fs.DurationVar(&c.budgetStopTimeout, "budget.stop-timeout", c.budgetStopTimeout, "with --budget.max-cost-usd, SIGINT the child if the CLI has not acknowledged the interrupt within this (the SDK's stdin line in progress included)")
	c.tel.Register(fs, telemetry.Wrapper) // no port, no page unless --web.listen-address
	c.spool.Register(fs)
}

// validate checks the configuration after parsing.
func (c *runConfig) validate() error {
	var errs []error
	if len(c.command) == 0 {
		errs = append(errs, errors.New("no command given: cbc-otel run [flags] -- CMD [ARGS...]"))
	}
	if c.killTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--child.kill-timeout must be positive, got %v", c.killTimeout))
	}
	if c.drainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--child.drain-timeout must be positive, got %v", c.drainTimeout))
	}
	if _, err := parseLogLevel(c.logLevel); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkLogFormat(c.logFormat))
	if c.tapQueue < 64<<10 {
		errs = append(errs, fmt.Errorf("--tap.queue-bytes must be at least 65536 bytes, got %d", c.tapQueue))
	}
	if c.summaryFile != "" {
		errs = append(errs, telemetry.CheckOutputPath("summary.file", c.summaryFile))
	}
	if c.explicit["summary.step-file"] && c.stepSummary != "" {
		// $GITHUB_STEP_SUMMARY is not checked: the CI's, not the user's.
		errs = append(errs, telemetry.CheckOutputPath("summary.step-file", c.stepSummary))
	}
	if c.explicit["summary.step-output"] && c.stepOutput != "" {
		errs = append(errs, telemetry.CheckOutputPath("summary.step-output", c.stepOutput)) // $GITHUB_OUTPUT: as above
	}
	if c.budgetMaxCost < 0 || c.budgetMaxCost != c.budgetMaxCost {
		errs = append(errs, fmt.Errorf("--budget.max-cost-usd must be 0 (no cap) or positive, got %v", c.budgetMaxCost))
	}
	if c.budgetStopTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--budget.stop-timeout must be positive, got %v", c.budgetStopTimeout))
	}
	if c.budgetMaxCost > 0 && c.spool.Dir != "" && !c.spool.Process {
		errs = append(errs, errors.New("--budget.max-cost-usd needs the pipeline: with --spool.dir, add --spool.process"))
	}
	if c.joinCLI && c.spool.Dir != "" && !c.spool.Process {
		errs = append(errs, errors.New("--cli-telemetry.join needs the pipeline: with --spool.dir, add --spool.process"))
	}
	errs = append(errs, c.tel.Validate(), c.spool.Validate(c.explicit))
	return errors.Join(errs...)
}

// runner holds what `run` needs from its environment, so that tests can run
// it in-process without touching the test process's signals.
type runner struct {
	// name is the command in messages: "run" (the default) or "demo".
	name string
	// signals subscribes to the signals to forward; stop unsubscribes.
	signals func() (c <-chan os.Signal, stop func())
	// watchParent makes the wrapper stop its child when its own parent dies.
	watchParent bool
	// consume reads both taps until they are closed; nil means the ingest
	// pipeline feeding the telemetry sinks. Tests swap in stuck consumers.
	consume telemetry.ConsumeFunc
	// consumerWait bounds the wait for consume to return after the taps
	// are closed.
	consumerWait time.Duration
	// started, if set, is told the telemetry once it runs, before the
	// child starts (demo says where to look).
	started func(*telemetry.Telemetry)
	// finished, if set, is called after the child and the consumers are
	// done, before the telemetry shuts down (demo prints what it saw, and
	// may keep /metrics up).
	finished func(*telemetry.Telemetry, outcome)
}

// cmdRun is `cbc-otel run [flags] -- CMD [ARGS...]`.
func cmdRun(ctx context.Context, args []string, sio stdio) int {
	r := runner{signals: supervise.NotifySignals, watchParent: true, consumerWait: defaultConsumerWait}
	return r.run(ctx, args, sio)
}

const runUsage = `usage: cbc-otel run [flags] -- CMD [ARGS...]

Runs CMD with stdin, stdout and stderr passed through byte-exact, taps its
stdout and stdin for telemetry, and exits with CMD's status (128+N when
signal N killed it; 127 not found, 126 not executable, 2 usage, 1 internal).

examples:
  # Claude Code headless; /metrics and the runs page on loopback, spans to a collector
  cbc-otel run --web.listen-address 127.0.0.1:9478 --otlp.endpoint http://127.0.0.1:4317 -- claude -p --input-format stream-json --output-format stream-json --verbose
  # the script an SDK starts instead of the CLI, once per session: no port of its
  # own, the stream spooled for one long-lived "cbc-otel serve --spool.dir DIR"
  exec cbc-otel run --spool.dir /var/spool/cbc-otel -- claude "$@"
  # a CI step: the runs as a Markdown step summary, the metrics in a file
  cbc-otel run --summary.step-file "$GITHUB_STEP_SUMMARY" --metrics.file metrics.prom -- claude -p "Review the diff" --output-format stream-json --verbose

flags:
`

// run is `cbc-otel run`: it parses args, then runs the command.
func (r *runner) run(ctx context.Context, args []string, sio stdio) int {
	cfg, ok, code := parseRunArgs(args, sio.err)
	if !ok {
		return code
	}
	return r.exec(ctx, cfg, sio).code
}

// parseRunArgs parses and validates run's command line.
func parseRunArgs(args []string, stderr io.Writer) (cfg runConfig, ok bool, code int) {
	cfg = defaultRunConfig()
	fs := newFlagSet("run", runUsage, stderr)
	registerVersion(fs)
	cfg.register(fs)
	if ok, code := parseFlags(fs, args); !ok {
		return cfg, false, code
	}
	cfg.command = fs.Args()
	cfg.explicit, cfg.renamedUsed = explicitFlags(fs), aliasesUsed(fs)
	if !cfg.explicit["summary.step-file"] {
		cfg.stepSummary = os.Getenv("GITHUB_STEP_SUMMARY")
	}
	if !cfg.explicit["summary.step-output"] {
		cfg.stepOutput = os.Getenv("GITHUB_OUTPUT")
	}
	if err := cfg.validate(); err != nil {
		return cfg, false, fail(stderr, "run", exitUsage, err)
	}
	return cfg, true, exitOK
}

// outcome is what a run ended with: the exit code, the supervisor's
// error if any and, when the config asked to collect them, the runs seen.
type outcome struct {
	code int
	err  error
	telemetry.Outcome
}

// exec runs cfg.command under the supervisor with telemetry and spooling
// as configured, and writes the summaries asked for. Telemetry starts
// before the child, so that /metrics is up for its whole life, and nothing
// of it can fail the run: outputs that cannot start are logged and
// skipped.
func (r *runner) exec(ctx context.Context, cfg runConfig, sio stdio) outcome {
	log := newLogger(sio.err, cfg.logLevel, cfg.logFormat)
	warnRenamed(cfg.tel.WarnLogger(log), cfg.renamedUsed)
	sigs, stopSignals := r.signals()
	defer stopSignals()
	if r.watchParent {
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		supervise.StopWithParent(wctx, log)
	}
	name := cmp.Or(r.name, "run")
	cfg.tel.Console, cfg.tel.Version, cfg.tel.JoinCLI = sio.err, buildVersion(), cfg.joinCLI
	wo := telemetry.WrapOptions{TapQueue: cfg.tapQueue, Spool: cfg.spool, Collect: cfg.collect, Consume: r.consume, Yield: supervise.YieldToPassthrough, Command: cfg.command[0],
		BudgetCap: cfg.budgetMaxCost, BudgetShow: cfg.budgetShow,
		Summaries: telemetry.Summaries{Waterfall: cfg.summary, File: cfg.summaryFile, StepSummary: cfg.stepSummary, StepOutputs: cfg.stepOutput}}
	var budget *budgetCap
	if cfg.budgetMaxCost > 0 {
		budget = newBudgetCap(&cfg, log, sigs)
		defer budget.childDone()
		sigs = budget.sigs
		wo.Extra = append(wo.Extra, budget.watch)
		wo.Register = func(reg prometheus.Registerer) { budget.register(reg, log) }
	}
	c, err := cfg.tel.Wrap(ctx, wo, log)
	if err != nil {
		return outcome{code: fail(sio.err, name, exitUsage, err)}
	}
	if os.Getenv("GOMEMLIMIT") == "" && c.Telemetry().ExportsOTLP() {
		debug.SetMemoryLimit(runMemoryLimitOTLP)
	}
	var inject *supervise.Injector
	if budget != nil {
		inject = budget.inj
	}
	if r.started != nil {
		r.started(c.Telemetry())
	}
	res, err := supervise.Run(ctx, supervise.Config{
		Path:         cfg.command[0],
		Args:         cfg.command[1:],
		Stdin:        sio.stdin(),
		Stdout:       sio.stdout(),
		Stderr:       sio.err,
		StdoutTap:    c.StdoutTap(),
		StdinTap:     c.StdinTap(),
		StdoutEOF:    func() { sio.endStdout(log) }, // the reader's EOF, even if the child lives on
		Env:          c.ChildEnv(),
		Signals:      sigs,
		KillTimeout:  cfg.killTimeout,
		DrainTimeout: cfg.drainTimeout,
		Logger:       log,
		Inject:       inject,
	})
	sio.endStdout(log)
	if budget != nil {
		budget.childDone()
	}
	c.ChildDone(ctx)
	out := outcome{Outcome: c.Finish(ctx, r.consumerWait, log)}
	out.code, out.err = res.ExitCode, err
	if err != nil {
		out.code = exitFailure
		var se *supervise.StartError
		if errors.As(err, &se) {
			out.code = se.ExitCode()
		}
	}
	c.WriteSummaries(sio.err, log)
	if err != nil && r.finished != nil {
		fmt.Fprintf(sio.err, "cbc-otel %s: %v\n", name, err) // before the hook's own report
	}
	if r.finished != nil {
		r.finished(c.Telemetry(), out)
	}
	_ = c.Shutdown(ctx) // under deadlines of its own: a dead backend never costs the exit status
	if err != nil && r.finished == nil {
		fmt.Fprintf(sio.err, "cbc-otel %s: %v\n", name, err) // the last line, as always
	}
	return out
}

// endStdout gives whoever reads our stdout its EOF as soon as the child's
// stdout is drained, not when the telemetry is done (a collector that
// takes its flush timeout to fail used to hold an SDK's reader that long):
// our end of the pipe is swapped for /dev/null, which keeps the
// descriptor valid (nothing later opened can land on it). Only for the
// process's own stdout; an in-process writer is its owner's to close.
func (s stdio) endStdout(log *slog.Logger) {
	if s.outFile == nil {
		return
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		log.Debug("cannot open /dev/null to end stdout", "err", err)
		return
	}
	defer null.Close()
	if err := unix.Dup3(int(null.Fd()), int(s.outFile.Fd()), 0); err != nil {
		log.Debug("cannot end stdout", "err", err)
	}
}
