package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/report"
	"github.com/cbc-otel/cbc-otel/supervise"
	"github.com/cbc-otel/cbc-otel/tap"
)

// forwardedSignals are passed on to the child. SIGINT, SIGTERM, SIGHUP and
// SIGQUIT also ask the wrapper to stop (SIGKILL after --kill-timeout).
var forwardedSignals = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
}

// defaultConsumerWait bounds how long the wrapper waits, after the child is
// done, for the tap consumer to finish: telemetry must never hold up the exit.
const defaultConsumerWait = 5 * time.Second

// runConfig is the configuration of `cbc-otel run`. Later issues add their
// flags here: a field, a line in register, a check in Validate.
type runConfig struct {
	killTimeout  time.Duration
	drainTimeout time.Duration
	logLevel     string
	tapQueue     int
	summary      bool
	summaryFile  string
	tel          telemetryFlags
	spool        spoolFlags
	explicit     map[string]bool // flags set on the command line
	command      []string        // CMD [ARGS...], after --
}

func defaultRunConfig() runConfig {
	c := runConfig{
		killTimeout:  supervise.DefaultKillTimeout,
		drainTimeout: supervise.DefaultDrainTimeout,
		logLevel:     "error",
		tapQueue:     4 << 20,
	}
	// The telemetry flags keep their defaults in their registration.
	c.tel.register(flag.NewFlagSet("defaults", flag.ContinueOnError), true)
	return c
}

// register declares the flags on fs, with the config's values as defaults.
func (c *runConfig) register(fs *flag.FlagSet) {
	fs.DurationVar(&c.killTimeout, "kill-timeout", c.killTimeout, "after a stop signal, SIGKILL the child if it has not exited within this")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", c.drainTimeout, "after the child exited, wait at most this for EOF on its stdout (a grandchild may hold it open)")
	fs.StringVar(&c.logLevel, "log.level", c.logLevel, "log level of cbc-otel's own messages on stderr: error, warn, info or debug")
	fs.IntVar(&c.tapQueue, "tap-queue", c.tapQueue, "bytes each telemetry tap may queue before it drops (the pipe never waits for telemetry)")
	fs.BoolVar(&c.summary, "summary", c.summary, "when the child exits, print the waterfall of the runs seen to stderr")
	fs.StringVar(&c.summaryFile, "summary-file", c.summaryFile, "when the child exits, write the runs seen to this file, one JSON object per line (the replay --json contract)")
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
	if c.tapQueue < 64<<10 {
		errs = append(errs, fmt.Errorf("--tap-queue must be at least 65536 bytes, got %d", c.tapQueue))
	}
	errs = append(errs, c.tel.validate(), c.spool.validate(c.explicit))
	return errors.Join(errs...)
}

func parseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "error":
		return slog.LevelError, nil
	case "warn":
		return slog.LevelWarn, nil
	case "info":
		return slog.LevelInfo, nil
	case "debug":
		return slog.LevelDebug, nil
	}
	return 0, fmt.Errorf("--log.level must be error, warn, info or debug, got %q", s)
}

// runner holds what `run` needs from its environment, so that tests can run
// it in-process without touching the test process's signals.
type runner struct {
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
}

// cmdRun is `cbc-otel run [flags] -- CMD [ARGS...]`.
func cmdRun(ctx context.Context, args []string, sio stdio) int {
	r := runner{signals: notifySignals, watchParent: true, consumerWait: defaultConsumerWait}
	return r.run(ctx, args, sio)
}

// notifySignals subscribes to the forwarded signals, and to SIGPIPE on a
// channel of its own that nobody reads. Notify (not Ignore) for SIGPIPE: an
// ignored disposition would be inherited by the child across exec, and the
// child must die of SIGPIPE as it would without us. Being notified, the
// runtime no longer kills us on EPIPE on stdout; the pump sees the error.
func notifySignals() (<-chan os.Signal, func()) {
	c := make(chan os.Signal, 16)
	signal.Notify(c, forwardedSignals...)
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	return c, func() {
		signal.Stop(c)
		signal.Stop(pipe)
	}
}

const runUsage = `usage: cbc-otel run [flags] -- CMD [ARGS...]

Runs CMD with stdin, stdout and stderr passed through byte-exact, taps its
stdout and stdin for telemetry, and exits with CMD's status (128+N when
signal N killed it; 127 not found, 126 not executable, 2 usage, 1 internal).

flags:
`

func (r *runner) run(ctx context.Context, args []string, sio stdio) int {
	cfg := defaultRunConfig()
	fs := flag.NewFlagSet("cbc-otel run", flag.ContinueOnError)
	// Everything of ours goes to stderr: stdout belongs to the child.
	fs.SetOutput(sio.err)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), runUsage)
		fs.PrintDefaults()
	}
	cfg.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	cfg.command = fs.Args()
	cfg.explicit = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { cfg.explicit[f.Name] = true })
	if cfg.spool.dir != "" && !cfg.explicit["web.listen-address"] {
		// The sidecar serves /metrics, on the same port by default: a
		// spooling wrapper does not compete for it unless asked.
		cfg.tel.metrics.listen = ""
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(sio.err, "cbc-otel run: %v\n", err)
		return exitUsage
	}
	level, _ := parseLogLevel(cfg.logLevel)
	log := slog.New(slog.NewTextHandler(sio.err, &slog.HandlerOptions{Level: level}))

	sigs, stopSignals := r.signals()
	defer stopSignals()
	if r.watchParent {
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		stopWithParent(wctx, log)
	}

	// Telemetry starts before the child so that /metrics is up for its
	// whole life. Nothing here can fail the run: outputs that cannot start
	// are logged and skipped. With --spool-dir (and no --spool.process) the
	// wrapper only spools: no pipeline, no telemetry.
	process := cfg.spool.dir == "" || cfg.spool.process
	var tel *telemetry
	if process {
		var err error
		if tel, err = cfg.tel.start(ctx, os.Getenv, log); err != nil {
			fmt.Fprintf(sio.err, "cbc-otel run: %v\n", err)
			return exitUsage
		}
	}
	var sp *spooling
	if cfg.spool.dir != "" {
		sp = startSpool(cfg.spool.dir, cfg.tapQueue, log)
		if tel != nil {
			if err := tel.metrics.registry().Register(sp.collector()); err != nil {
				log.Error("registering the spool metrics", "err", err)
			}
		}
	}
	var runs report.Collector
	consumed := make(chan struct{})
	var stdoutTap, stdinTap *tap.Tap
	if process {
		stdoutTap, stdinTap = tap.NewTap(cfg.tapQueue), tap.NewTap(cfg.tapQueue)
		consume := r.consume
		if consume == nil {
			// Runs are kept for a summary only when one is asked for: a
			// days-long session must not grow with every run it saw.
			var extra []ingest.Sink
			if cfg.summary || cfg.summaryFile != "" {
				extra = append(extra, &runs)
			}
			opts := tel.pipelineOptions(&cfg.tel, true, extra...)
			consume = func(stdout, stdin *tap.Tap, log *slog.Logger) {
				p := ingest.NewPipeline(opts)
				p.Consume(context.WithoutCancel(ctx), stdout, stdin, 0)
				logTapTotals(log, p.Stats(), stdout, stdin)
			}
		}
		go func() {
			defer close(consumed)
			yieldToPassthrough(log)
			consume(stdoutTap, stdinTap, log)
		}()
	} else {
		close(consumed)
	}
	outTap, inTap := tapWriters(stdoutTap, sp, true), tapWriters(stdinTap, sp, false)

	var stdin io.Reader = sio.in
	if sio.inFile != nil {
		stdin = sio.inFile
	}
	var stdout io.Writer = sio.out
	if sio.outFile != nil {
		stdout = sio.outFile
	}
	res, err := supervise.Run(ctx, supervise.Config{
		Path:         cfg.command[0],
		Args:         cfg.command[1:],
		Stdin:        stdin,
		Stdout:       stdout,
		Stderr:       sio.err,
		StdoutTap:    outTap,
		StdinTap:     inTap,
		Signals:      sigs,
		KillTimeout:  cfg.killTimeout,
		DrainTimeout: cfg.drainTimeout,
		Logger:       log,
	})
	if process {
		stdoutTap.Close()
		stdinTap.Close()
	}
	if sp != nil {
		sp.close()
	}
	// One deadline for both consumers: telemetry never holds up the exit.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), r.consumerWait)
	defer wcancel()
	if sp != nil {
		select {
		case <-sp.done:
			sp.logTotals(log)
		case <-wctx.Done():
			log.Warn("spool writer did not finish; exiting without it (the file stays .open and the sidecar finalizes it after its idle timeout)", "waited", r.consumerWait)
		}
	}
	select {
	case <-consumed:
		if cfg.summary {
			if werr := report.WriteWaterfall(sio.err, runs.Runs, tel.stats, report.WaterfallOptions{}); werr != nil {
				log.Error("writing the summary", "err", werr)
			}
		}
		if cfg.summaryFile != "" {
			if werr := report.WriteJSONFile(cfg.summaryFile, runs.Runs, tel.stats); werr != nil {
				log.Error("writing the summary file", "err", werr)
			}
		}
	case <-wctx.Done():
		log.Warn("telemetry consumer did not finish; exiting without it", "waited", r.consumerWait)
	}
	// Flush under a deadline of its own: a dead backend costs at most the
	// flush timeouts, never the child's exit status.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.tel.traces.flushTimeout+cfg.tel.metrics.flushTimeout)
	tel.shutdown(sctx)
	cancel()

	if err != nil {
		fmt.Fprintf(sio.err, "cbc-otel run: %v\n", err)
		var se *supervise.StartError
		if errors.As(err, &se) {
			return se.ExitCode()
		}
		return exitFailure
	}
	return res.ExitCode
}

// tapWriters is what supervise writes one stream's bytes to: the pipeline's
// tap, the spool's, or both (Tap.Write never fails nor blocks, so a
// MultiWriter of taps never stops early).
func tapWriters(pipe *tap.Tap, sp *spooling, stdout bool) io.Writer {
	var ws []io.Writer
	if pipe != nil {
		ws = append(ws, pipe)
	}
	if sp != nil {
		if stdout {
			ws = append(ws, sp.stdout)
		} else {
			ws = append(ws, sp.stdin)
		}
	}
	switch len(ws) {
	case 0:
		return nil
	case 1:
		return ws[0]
	}
	if pipe != nil {
		return spooledTap{Writer: io.MultiWriter(ws...), pipe: pipe}
	}
	return io.MultiWriter(ws...)
}

// spooledTap writes to the pipeline's tap and the spool's, and passes
// Begin and Cancel (bytes passed on before they are tapped) to the
// pipeline's, whose chunks carry the stamps.
type spooledTap struct {
	io.Writer
	pipe *tap.Tap
}

// Begin tells the pipeline's tap that bytes are passing on now.
func (s spooledTap) Begin() { s.pipe.Begin() }

// Cancel withdraws a Begin that no bytes followed.
func (s spooledTap) Cancel() { s.pipe.Cancel() }

// stopWithParent sends us SIGTERM when our parent process exits, which the
// supervisor forwards to the child (then SIGKILL after the kill timeout),
// until ctx ends. It watches the process, not the thread that forked us
// (supervise.WatchParent): a caller's short-lived thread ending must not
// stop the run.
func stopWithParent(ctx context.Context, log *slog.Logger) {
	gone, how := supervise.WatchParent(ctx, 0)
	log.Debug("watching the parent process", "how", how)
	go func() {
		select {
		case <-gone:
			log.Info("parent process exited: stopping as on SIGTERM")
			if err := unix.Kill(os.Getpid(), unix.SIGTERM); err != nil {
				log.Error("parent process exited, cannot signal self", "err", err)
			}
		case <-ctx.Done():
		}
	}()
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
		log.Log(context.Background(), level, msg, "source", t.src, "lines", st.Lines(t.src), "bytes", st.Bytes(t.src),
			"tapped_bytes", in, "dropped_bytes", dropped, "dropped_chunks", droppedChunks)
	}
}

// consumerNice is the nice value of the telemetry consumer's thread.
const consumerNice = 10

// yieldToPassthrough locks the calling goroutine (the telemetry consumer) to
// its own OS thread and lowers that thread's priority. On a busy machine the
// kernel then gives the CPU to the child and the pumps first: the consumer
// takes what is left and, when it falls behind, the tap drops and counts
// rather than the passthrough slowing down. The thread ends with the
// goroutine (it stays locked), so no lowered thread returns to the pool.
func yieldToPassthrough(log *slog.Logger) {
	runtime.LockOSThread()
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), consumerNice); err != nil {
		log.Debug("lowering the telemetry consumer's priority", "err", err)
	}
}
