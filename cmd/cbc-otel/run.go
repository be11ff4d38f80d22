package main

import (
	"bytes"
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

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/report"
	"github.com/cbc-otel/cbc-otel/supervise"
	"github.com/cbc-otel/cbc-otel/tap"
	"golang.org/x/sys/unix"
)

// defaultConsumerWait bounds how long the wrapper waits, after the child is
// done, for the tap consumer to finish: telemetry must never hold up the exit.
const defaultConsumerWait = 5 * time.Second

// runConfig is the configuration of `cbc-otel run`. Later issues add their
// flags here: a field, a line in register, a check in Validate.
type runConfig struct {
	killTimeout  time.Duration
	drainTimeout time.Duration
	logLevel     string
	logFormat    string
	tapQueue     int
	summary      bool
	summaryFile  string
	stepSummary  string // --step-summary, else $GITHUB_STEP_SUMMARY
	stepOutput   string // --step-output, else $GITHUB_OUTPUT
	tel          telemetryFlags
	spool        spoolFlags
	joinCLI      bool            // --join-cli-telemetry
	collect      bool            // keep the runs seen for the caller (demo)
	explicit     map[string]bool // flags set on the command line
	command      []string        // CMD [ARGS...], after --

	// --budget.max-cost-usd (0: no cap) and --budget.stop-timeout
	budgetMaxCost     float64
	budgetStopTimeout time.Duration
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
	c.tel.metrics.noListen = true
	c.tel.register(flag.NewFlagSet("defaults", flag.ContinueOnError), true)
	return c
}

// register declares the flags on fs, with the config's values as defaults.
func (c *runConfig) register(fs *flag.FlagSet) {
	fs.DurationVar(&c.killTimeout, "kill-timeout", c.killTimeout, "after a stop signal, SIGKILL the child if it has not exited within this")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", c.drainTimeout, "after the child exited, wait at most this for EOF on its stdout (a grandchild may hold it open)")
	fs.StringVar(&c.logLevel, "log.level", c.logLevel, "log level of cbc-otel's own messages on stderr: error, warn, info or debug")
	registerLogFormat(fs, &c.logFormat)
	fs.IntVar(&c.tapQueue, "tap-queue", c.tapQueue, "bytes each telemetry tap may queue before it drops (the pipe never waits for telemetry)")
	fs.BoolVar(&c.summary, "summary", c.summary, "when the child exits, print the waterfall of the runs seen to stderr")
	fs.StringVar(&c.summaryFile, "summary-file", c.summaryFile, "when the child exits, write the runs seen to this file, one JSON object per line (the replay --json contract)")
	fs.StringVar(&c.stepSummary, "step-summary", c.stepSummary, "when the child exits, append a Markdown table of the runs seen to this file (a CI step summary; default $GITHUB_STEP_SUMMARY)")
	fs.StringVar(&c.stepOutput, "step-output", c.stepOutput, "when the child exits, append the session's cost, tokens by type and runs by status to this file (GitHub Actions step outputs; default $GITHUB_OUTPUT)")
	fs.BoolVar(&c.joinCLI, "join-cli-telemetry", c.joinCLI, "switch the CLI's own OpenTelemetry on, receive it on 127.0.0.1, place its model and tool spans under our agent spans, count its cost per run and agent, and forward it all to our exporter (see the README)")
	fs.Float64Var(&c.budgetMaxCost, "budget.max-cost-usd", c.budgetMaxCost, "stop the session (an interrupt on the CLI's stdin, as an SDK sends) once its spend passes this many USD: the result lines' total_cost_usd, or the joined cost with --join-cli-telemetry, whichever is higher; 0: no cap (see the README)")
	fs.DurationVar(&c.budgetStopTimeout, "budget.stop-timeout", c.budgetStopTimeout, "with --budget.max-cost-usd, SIGINT the child if the CLI has not acknowledged the interrupt within this (the SDK's stdin line in progress included)")
	c.tel.metrics.noListen = true // no port, no page unless --web.listen-address
	c.tel.register(fs, true)
	c.spool.register(fs)
}

// Validate checks the configuration after parsing.
func (c *runConfig) Validate() error {
	var errs []error
	if len(c.command) == 0 {
		errs = append(errs, errors.New("no command given: cbc-otel run [flags] -- CMD [ARGS...]"))
	}
	if c.killTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--kill-timeout must be positive, got %v", c.killTimeout))
	}
	if c.drainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--drain-timeout must be positive, got %v", c.drainTimeout))
	}
	if _, err := parseLogLevel(c.logLevel); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkLogFormat(c.logFormat))
	if c.tapQueue < 64<<10 {
		errs = append(errs, fmt.Errorf("--tap-queue must be at least 65536 bytes, got %d", c.tapQueue))
	}
	if c.summaryFile != "" {
		errs = append(errs, checkOutputPath("summary-file", c.summaryFile))
	}
	if c.explicit["step-summary"] && c.stepSummary != "" {
		// $GITHUB_STEP_SUMMARY is not checked: the CI's, not the user's.
		errs = append(errs, checkOutputPath("step-summary", c.stepSummary))
	}
	if c.explicit["step-output"] && c.stepOutput != "" {
		errs = append(errs, checkOutputPath("step-output", c.stepOutput)) // $GITHUB_OUTPUT: as above
	}
	if c.budgetMaxCost < 0 || c.budgetMaxCost != c.budgetMaxCost {
		errs = append(errs, fmt.Errorf("--budget.max-cost-usd must be 0 (no cap) or positive, got %v", c.budgetMaxCost))
	}
	if c.budgetStopTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--budget.stop-timeout must be positive, got %v", c.budgetStopTimeout))
	}
	if c.budgetMaxCost > 0 && c.spool.dir != "" && !c.spool.process {
		errs = append(errs, errors.New("--budget.max-cost-usd needs the pipeline: with --spool-dir, add --spool.process"))
	}
	if c.joinCLI && c.spool.dir != "" && !c.spool.process {
		errs = append(errs, errors.New("--join-cli-telemetry needs the pipeline: with --spool-dir, add --spool.process"))
	}
	errs = append(errs, c.tel.validate(), c.spool.validate(c.explicit))
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
	consume func(stdout, stdin *tap.Tap, log *slog.Logger)
	// consumerWait bounds the wait for consume to return after the taps
	// are closed.
	consumerWait time.Duration
	// started, if set, is told the telemetry once it runs, before the
	// child starts (demo says where to look).
	started func(*telemetry)
	// finished, if set, is called after the child and the consumers are
	// done, before the telemetry shuts down (demo prints what it saw, and
	// may keep /metrics up).
	finished func(*telemetry, outcome)
	// releaseStartup drops the binary's start-up pages from the resident
	// set before the child starts (releaseStartupPages): run, a process
	// of its own, not demo.
	releaseStartup bool
}

// cmdRun is `cbc-otel run [flags] -- CMD [ARGS...]`.
func cmdRun(ctx context.Context, args []string, sio stdio) int {
	r := runner{signals: supervise.NotifySignals, watchParent: true, consumerWait: defaultConsumerWait, releaseStartup: true}
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
  # own, the stream spooled for one long-lived "cbc-otel serve --spool-dir DIR"
  exec cbc-otel run --spool-dir /var/spool/cbc-otel -- claude "$@"
  # a CI step: the runs as a Markdown step summary, the metrics in a file
  cbc-otel run --step-summary "$GITHUB_STEP_SUMMARY" --metrics-file metrics.prom -- claude -p "Review the diff" --output-format stream-json --verbose

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
	cfg.register(fs)
	if ok, code := parseFlags(fs, args); !ok {
		return cfg, false, code
	}
	cfg.command = fs.Args()
	cfg.explicit = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { cfg.explicit[f.Name] = true })
	if !cfg.explicit["step-summary"] {
		cfg.stepSummary = os.Getenv("GITHUB_STEP_SUMMARY")
	}
	if !cfg.explicit["step-output"] {
		cfg.stepOutput = os.Getenv("GITHUB_OUTPUT")
	}
	if err := cfg.Validate(); err != nil {
		return cfg, false, fail(stderr, "run", exitUsage, err)
	}
	return cfg, true, exitOK
}

// outcome is what a run ended with: the exit code, the supervisor's
// error if any and, when the config asked to collect them, the runs seen.
type outcome struct {
	code     int
	err      error
	runs     []ingest.Run
	sessions []report.Session // the main conversation's cost (--join-cli-telemetry)
	stats    *ingest.Stats
}

// exec runs cfg.command under the supervisor with telemetry and spooling
// as configured, and writes the summaries asked for. Telemetry starts
// before the child, so that /metrics is up for its whole life, and nothing
// of it can fail the run: outputs that cannot start are logged and
// skipped.
func (r *runner) exec(ctx context.Context, cfg runConfig, sio stdio) outcome {
	log := newLogger(sio.err, cfg.logLevel, cfg.logFormat)
	sigs, stopSignals := r.signals()
	defer stopSignals()
	if r.watchParent {
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		supervise.StopWithParent(wctx, log)
	}
	name := cmp.Or(r.name, "run")
	cfg.tel.traces.console = sio.err
	var join *cliJoin
	if cfg.joinCLI {
		join = newCLIJoin(&cfg, log)
	}
	var budget *budgetCap
	if cfg.budgetMaxCost > 0 {
		budget = newBudgetCap(&cfg, log, sigs)
		defer budget.childDone()
		sigs = budget.sigs
	}
	c, err := r.startConsumers(ctx, &cfg, log, join, budget)
	if err != nil {
		return outcome{code: fail(sio.err, name, exitUsage, err)}
	}
	var inject *supervise.Injector
	if budget != nil {
		inject = budget.inj
	}
	if r.started != nil {
		r.started(c.tel)
	}
	if r.releaseStartup {
		n, err := releaseStartupPages()
		log.Debug("start-up pages of the binary released", "bytes", n, "err", err)
	}
	res, err := supervise.Run(ctx, supervise.Config{
		Path:         cfg.command[0],
		Args:         cfg.command[1:],
		Stdin:        sio.stdin(),
		Stdout:       sio.stdout(),
		Stderr:       sio.err,
		StdoutTap:    c.stdoutTap(),
		StdinTap:     c.stdinTap(),
		StdoutEOF:    func() { sio.endStdout(log) }, // the reader's EOF, even if the child lives on
		Env:          c.join.env(),
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
	c.join.childDone(ctx)
	out := c.finish(ctx, r.consumerWait, log)
	out.code, out.err = res.ExitCode, err
	if err != nil {
		out.code = exitFailure
		var se *supervise.StartError
		if errors.As(err, &se) {
			out.code = se.ExitCode()
		}
	}
	c.summarize(&cfg, sio.err, log)
	if err != nil && r.finished != nil {
		fmt.Fprintf(sio.err, "cbc-otel %s: %v\n", name, err) // before the hook's own report
	}
	if r.finished != nil {
		r.finished(c.tel, out)
	}
	c.shutdown(ctx, cfg.command[0]) // under deadlines of its own: a dead backend never costs the exit status
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

// consumers are what reads the taps of one run: the pipeline feeding the
// telemetry sinks and the spool writer, either or both.
type consumers struct {
	tel      *telemetry // nil when only spooling
	pipe     *tap.Tap   // stdout tap of the pipeline; nil when only spooling
	pipeIn   *tap.Tap
	sp       *spooling // nil without --spool-dir
	runs     report.Collector
	collect  bool
	consumed chan struct{}
	join     *cliJoin      // --join-cli-telemetry; nil without
	spend    *report.Spend // --step-output; nil without
}

// startConsumers starts the telemetry and the spool writer that cfg asks
// for. With --spool-dir (and no --spool.process) the wrapper only spools:
// no pipeline, no telemetry.
func (r *runner) startConsumers(ctx context.Context, cfg *runConfig, log *slog.Logger, join *cliJoin, budget *budgetCap) (*consumers, error) {
	c := &consumers{consumed: make(chan struct{}), collect: cfg.collect || cfg.summary || cfg.summaryFile != "" || cfg.stepSummary != "" || cfg.stepOutput != ""}
	if cfg.spool.dir == "" || cfg.spool.process {
		var err error
		if c.tel, err = cfg.tel.start(ctx, os.Getenv, log); err != nil {
			return nil, err
		}
		if os.Getenv("GOMEMLIMIT") == "" && c.tel.traces.exportsOTLP() {
			debug.SetMemoryLimit(runMemoryLimitOTLP)
		}
	}
	if cfg.spool.dir != "" {
		c.sp = startSpool(cfg.spool.dir, cfg.tapQueue, log)
		if c.tel != nil {
			if err := c.tel.metrics.registry().Register(c.sp.collector()); err != nil {
				log.Error("registering the spool metrics", "err", err)
			}
		}
	}
	if c.tel == nil {
		close(c.consumed)
		return c, nil
	}
	c.pipe, c.pipeIn = tap.NewTap(cfg.tapQueue), tap.NewTap(cfg.tapQueue)
	consume := r.consume
	if consume == nil {
		// Runs are kept only when asked for: a days-long session must not
		// grow with every run it saw.
		var extra []ingest.Sink
		if c.collect {
			extra = append(extra, &c.runs)
		}
		if join != nil {
			extra = append(extra, join.s.Joiner)
		}
		if cfg.stepOutput != "" {
			c.spend = &report.Spend{}
			extra = append(extra, c.spend)
		}
		if budget != nil {
			extra = append(extra, budget)
			budget.register(c.tel.metrics.registry(), log)
		}
		p := c.tel.newPipeline(stream{live: true, extra: extra, calls: join != nil})
		if join != nil {
			join.start(ctx, c.tel, p, log)
			c.join = join
		}
		consume = func(stdout, stdin *tap.Tap, log *slog.Logger) {
			p.Consume(context.WithoutCancel(ctx), stdout, stdin, 0)
			logTapTotals(log, p.Stats(), stdout, stdin)
		}
	}
	go func() {
		defer close(c.consumed)
		if err := supervise.YieldToPassthrough(); err != nil {
			log.Debug("lowering the telemetry consumer's priority", "err", err)
		}
		consume(c.pipe, c.pipeIn, log)
	}()
	return c, nil
}

// stdoutTap is what the supervisor writes the child's stdout to: the
// pipeline's tap, the spool's, or both (nil when neither).
func (c *consumers) stdoutTap() io.Writer {
	return tap.Join(c.pipe, c.sp.tapOf(tap.SourceStdout))
}

// stdinTap is what the supervisor writes the child's stdin to.
func (c *consumers) stdinTap() io.Writer {
	return tap.Join(c.pipeIn, c.sp.tapOf(tap.SourceStdin))
}

// finish closes the taps and waits for the consumers, at most wait in all:
// telemetry never holds up the exit.
func (c *consumers) finish(ctx context.Context, wait time.Duration, log *slog.Logger) outcome {
	if c.pipe != nil {
		c.pipe.Close()
		c.pipeIn.Close()
	}
	if c.sp != nil {
		c.sp.close()
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	c.join.streamDone(wctx)
	if c.sp != nil {
		select {
		case <-c.sp.done:
			c.sp.logTotals(log)
		case <-wctx.Done():
			log.Warn("spool writer did not finish; exiting without it (the file stays .open and the sidecar finalizes it after its idle timeout)", "waited", wait)
		}
	}
	select {
	case <-c.consumed:
	case <-wctx.Done():
	}
	select {
	case <-c.consumed: // also when both were ready
		if c.tel != nil {
			return outcome{runs: c.runs.Runs, sessions: c.runs.Sessions(), stats: c.tel.stats}
		}
		return outcome{}
	default:
	}
	// The consumer is still behind: what it has not read is given up, and
	// counted as dropped before anything is written out (the metrics file,
	// the summaries), so that every tapped byte is either in the counts or
	// in the drops; the consumer then only finalizes.
	before := c.droppedBytes()
	c.pipe.Abandon()
	c.pipeIn.Abandon()
	t := time.NewTimer(abandonWait)
	defer t.Stop()
	select {
	case <-c.consumed:
		c.tel.traces.lossLogger.Warn("telemetry fell behind: tapped bytes not read when the wrapper exited were given up and counted as dropped (cbc_otel_tap_dropped_bytes_total)",
			"waited", wait, "given_up_bytes", c.droppedBytes()-before)
		return outcome{runs: c.runs.Runs, sessions: c.runs.Sessions(), stats: c.tel.stats}
	case <-t.C:
		c.tel.traces.lossLogger.Warn("telemetry consumer did not finish; exiting without it (its counts are incomplete)", "waited", wait+abandonWait)
		c.collect = false // what was collected is incomplete and still being written
	}
	return outcome{}
}

// abandonWait bounds the wait for the consumer to finalize once the
// wrapper has given up what it had not read (see consumers.finish).
const abandonWait = time.Second

// droppedBytes is what the pipeline's taps dropped so far.
func (c *consumers) droppedBytes() int64 {
	_, a, _ := c.pipe.Stats()
	_, b, _ := c.pipeIn.Stats()
	return a + b
}

// shutdown ends the join (its minted parent span, the CLI's logs and
// metrics), then the telemetry, each under deadlines of its own.
func (c *consumers) shutdown(ctx context.Context, command string) {
	if c.join != nil && c.tel != nil {
		jctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.tel.flags.traces.flushTimeout)
		c.join.shutdown(jctx, c.tel, command)
		cancel()
	}
	c.tel.shutdown(ctx)
}

// summarize writes the waterfall (--summary) and the runs file
// (--summary-file), the step summary and the step outputs of a consumer
// that finished.
func (c *consumers) summarize(cfg *runConfig, stderr io.Writer, log *slog.Logger) {
	if c.tel == nil || !c.collect {
		return
	}
	if cfg.summary {
		if err := report.WriteWaterfall(stderr, c.runs.Runs, c.tel.stats, report.WaterfallOptions{Sessions: c.runs.Sessions()}); err != nil {
			log.Error("writing the summary", "err", err)
		}
	}
	if cfg.summaryFile != "" {
		if err := report.WriteJSONFile(cfg.summaryFile, c.runs.Runs, c.runs.Sessions(), c.tel.stats); err != nil {
			log.Error("writing the summary file", "err", err)
		}
	}
	if cfg.stepSummary != "" {
		if err := appendStepSummary(cfg.stepSummary, c.runs.Runs, c.runs.Sessions(), c.tel.stats); err != nil {
			log.Error("writing the step summary", "err", err)
		}
	}
	if cfg.stepOutput != "" && c.spend != nil {
		if err := appendStepOutputs(cfg.stepOutput, c.runs.Runs, c.spend.Totals()); err != nil {
			log.Error("writing the step outputs", "err", err)
		}
	}
}

// appendStepSummary appends the Markdown section of the runs to path
// (--step-summary, $GITHUB_STEP_SUMMARY), creating it if need be: the
// file holds the job's other steps' summaries too, never truncated.
func appendStepSummary(path string, runs []ingest.Run, sessions []report.Session, stats *ingest.Stats) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	var b bytes.Buffer // one write: a half section is less likely on a full disk
	if err := report.WriteStepSummary(&b, runs, sessions, report.StepSummaryOptions{Stats: stats}); err != nil {
		f.Close()
		return err
	}
	_, err = f.Write(b.Bytes())
	return errors.Join(err, f.Close())
}

// logTapTotals logs at debug level what the pipeline and the taps saw.
func logTapTotals(log *slog.Logger, st *ingest.Stats, stdout, stdin *tap.Tap) {
	for _, t := range []struct {
		src tap.Source
		tap *tap.Tap
	}{{tap.SourceStdout, stdout}, {tap.SourceStdin, stdin}} {
		in, dropped, droppedChunks := t.tap.Stats()
		// Drops are counted in the metrics too; a warning says at exit that
		// the telemetry of this run is incomplete.
		level, msg := slog.LevelDebug, "tap totals"
		if dropped > 0 {
			level, msg = slog.LevelWarn, "tap totals: telemetry fell behind and dropped bytes (the passthrough did not wait)"
		}
		log.Log(context.Background(), level, msg, "source", t.src, "lines", st.Lines(t.src), "bytes", st.Bytes(t.src), "incomplete_bytes", st.Incomplete(t.src),
			"tapped_bytes", in, "dropped_bytes", dropped, "dropped_chunks", droppedChunks)
	}
}
