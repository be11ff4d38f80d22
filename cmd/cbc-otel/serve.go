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
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cbc-otel/cbc-otel/follow"
	"github.com/cbc-otel/cbc-otel/spool"
	"github.com/cbc-otel/cbc-otel/telemetry"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

// Set appends a value.
func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// serveConfig holds serve's flags.
type serveConfig struct {
	follows         stringList
	spoolDirs       stringList
	stateDir        string
	idleTimeout     time.Duration
	poll            time.Duration
	checkpointEvery time.Duration
	keep            bool
	maxSpoolBytes   int64
	maxFiles        int
	memPerFile      int64
	logLevel        string
	logFormat       string
	tel             telemetry.Flags
	renamedUsed     []string // deprecated flag names used
}

func (c *serveConfig) register(fs *flag.FlagSet) {
	fs.Var(&c.follows, "follow.glob", "follow the files matching this glob (repeatable): spool files (*.cbcspool, *.cbcspool.open) or the CLI's stdout written by tee")
	fs.Var(&c.spoolDirs, "spool.dir", "follow the spool files in this directory (repeatable): the same as --follow.glob 'DIR/*.cbcspool*'")
	fs.StringVar(&c.stateDir, "state.dir", "", "directory of the checkpoint (offsets, open runs, cumulative totals); without it a restart reads every file from the start")
	fs.DurationVar(&c.idleTimeout, "follow.idle-timeout", follow.DefaultIdleTimeout, "finalize a plain file after this long without growth, or a spool file never marked complete after this long without growth or heartbeat of its wrapper (every 10s): its open runs become abandoned")
	fs.DurationVar(&c.poll, "follow.poll-interval", follow.DefaultPoll, "how often files are checked for growth: those written since (inotify), or every file when the directories cannot be watched; with inotify every file is checked and the globs expanded every 2s all the same")
	fs.DurationVar(&c.checkpointEvery, "state.checkpoint-interval", follow.DefaultCheckpointEvery, "longest time between checkpoints while data flows (one is also written after every run that ends)")
	fs.BoolVar(&c.keep, "spool.keep", false, "keep spool files once processed (default: remove them)")
	fs.Int64Var(&c.maxSpoolBytes, "spool.max-bytes", 0, "cap on the spool files' total size: past it, processed kept files, then complete unprocessed ones, are removed oldest first (cbc_otel_spool_evicted_total); 0 = no cap")
	fs.IntVar(&c.maxFiles, "follow.max-files", follow.DefaultMaxStreams, "most files followed at once (each holds a descriptor and a pipeline); more matching files wait, oldest first, until followed ones end (cbc_otel_follow_files_waiting)")
	fs.Int64Var(&c.memPerFile, "follow.memory-per-file", serveMemoryPerFile, "bytes of Go's soft memory limit per file followed: serve's limit is 32 MiB + this × --follow.max-files (GOMEMLIMIT overrides); 0 = no limit")
	fs.StringVar(&c.logLevel, "log.level", "info", "log level of cbc-otel's own messages on stderr: error, warn, info or debug")
	registerLogFormat(fs, &c.logFormat)
	c.tel.Register(fs, telemetry.Sidecar) // a sidecar is scraped: no push flags
}

func (c *serveConfig) validate() error {
	var errs []error
	if len(c.follows) == 0 && len(c.spoolDirs) == 0 {
		errs = append(errs, errors.New("nothing to follow: give --follow.glob GLOB or --spool.dir DIR"))
	}
	for _, g := range c.globs() {
		if _, err := filepath.Match(g, ""); err != nil {
			errs = append(errs, fmt.Errorf("--follow.glob %q: %w", g, err))
		}
	}
	if c.idleTimeout <= 0 || c.poll <= 0 || c.checkpointEvery <= 0 {
		errs = append(errs, errors.New("--follow.idle-timeout, --follow.poll-interval and --state.checkpoint-interval must be positive"))
	}
	if c.maxFiles < 1 {
		errs = append(errs, fmt.Errorf("--follow.max-files %d: must be at least 1", c.maxFiles))
	}
	if c.maxSpoolBytes < 0 {
		errs = append(errs, errors.New("--spool.max-bytes must not be negative"))
	}
	if c.memPerFile < 0 {
		errs = append(errs, errors.New("--follow.memory-per-file must not be negative"))
	}
	if _, err := parseLogLevel(c.logLevel); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkLogFormat(c.logFormat))
	errs = append(errs, c.tel.Validate())
	return errors.Join(errs...)
}

// warnAtStart says what would otherwise go unnoticed: no state directory
// (a restart then counts everything again), a directory to follow that
// does not exist (serve waits for it, /readyz says so), and an idle
// timeout shorter than the spool writers' heartbeat when spool files are
// followed at all.
func (c *serveConfig) warnAtStart(log *slog.Logger) {
	if c.stateDir == "" {
		log.Warn(noStateDirWarning)
	}
	for _, d := range c.missingDirs() {
		log.Warn("a directory to follow does not exist; nothing is read there until it does", "dir", d)
	}
	if c.idleTimeout < 3*spool.Heartbeat && c.followsSpool() {
		log.Warn("--follow.idle-timeout is short next to the spool writers' heartbeat: a live wrapper whose child is quiet may be taken for a dead one",
			"idle_timeout", c.idleTimeout, "heartbeat", spool.Heartbeat)
	}
}

// noStateDirWarning is serve's line at start without --state.dir.
const noStateDirWarning = "no --state.dir: nothing is checkpointed; after a restart every file still there is read again from the start, " +
	"its runs counted again, and every counter restarts at zero"

// missingDirs lists the directories of the globs that do not exist (or are
// not directories), in order, once each.
func (c *serveConfig) missingDirs() []string {
	var out []string
	for _, g := range c.globs() {
		d := filepath.Dir(g)
		if fi, err := os.Stat(d); (err != nil || !fi.IsDir()) && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// followsSpool reports whether any glob can match a spool file.
func (c *serveConfig) followsSpool() bool {
	if len(c.spoolDirs) > 0 {
		return true
	}
	for _, g := range c.follows {
		for _, name := range []string{"x" + spool.DoneSuffix, "x" + spool.OpenSuffix} {
			if ok, _ := filepath.Match(filepath.Base(g), name); ok {
				return true
			}
		}
	}
	return false
}

// globs are the --follow.glob patterns plus one per --spool.dir.
func (c *serveConfig) globs() []string {
	out := append([]string(nil), c.follows...)
	for _, d := range c.spoolDirs {
		out = append(out, filepath.Join(d, "*"+spool.DoneSuffix+"*"))
	}
	return out
}

const serveUsage = `usage: cbc-otel serve [flags]

The long-lived sidecar: follows spool files written by 'cbc-otel run
--spool.dir' and plain stream-json files (cbc ... | tee FILE), one pipeline
per file, serves /metrics, /healthz and /readyz, exports traces, and
checkpoints its state (--state.dir) so that a restart counts every run
exactly once. Exit status: 0 after SIGTERM/SIGINT and a final checkpoint,
2 for bad flags, 1 when it cannot run (state directory not writable,
metrics address taken, final checkpoint failed).

examples:
  # the sidecar of wrappers started with 'cbc-otel run --spool.dir /var/spool/cbc-otel'
  cbc-otel serve --spool.dir /var/spool/cbc-otel --state.dir /var/lib/cbc-otel --web.listen-address :9478 --otlp.endpoint http://collector:4317
  # plain stream-json files written by 'cbc ... | tee', finalized after 5 minutes without growth
  cbc-otel serve --follow.glob '/var/log/cbc/*.ndjson' --follow.idle-timeout 5m --state.dir /var/lib/cbc-otel

flags:
`

// serveMemoryBase and serveMemoryPerFile make serve's soft Go memory limit
// (unless GOMEMLIMIT is set): the base is the process without a stream
// (binary, sinks, web server, span queue), the part per file what a busy
// followed stream holds: its pipeline, its runs in their grace window
// (5 s of 50 events/s: ~23 finished runs), its decoder's snapshots. With
// the default GOGC alone the heap grows to twice what is live before a
// collection: following 256 files at 50 events/s each with --state.dir,
// ~32 MB live, serve peaked at 87-95 MiB of resident set; under 56 MiB
// (the default for 256 files) at 69 MiB, for a CPU cost within the noise
// of the benchmark; under 40 MiB at 59 MiB but with 2.4x the CPU (the
// collector never stopped): the part per file keeps room above what is
// live. A limit derived from --follow.max-files, not from the files
// followed now, so that it is known at start and does not move.
const (
	serveMemoryBase    = 32 << 20
	serveMemoryPerFile = 96 << 10
)

// serveMemoryLimit is serve's soft memory limit for its flags; 0 means none.
func (c *serveConfig) serveMemoryLimit() int64 {
	if c.memPerFile == 0 {
		return 0
	}
	return serveMemoryBase + c.memPerFile*int64(c.maxFiles)
}

// cmdServe is `cbc-otel serve`: it runs until ctx ends (SIGINT, SIGTERM).
func cmdServe(ctx context.Context, args []string, sio stdio) int {
	cfg, ok, code := parseServeArgs(args, sio.err)
	if !ok {
		return code
	}
	if lim := cfg.serveMemoryLimit(); lim > 0 && os.Getenv("GOMEMLIMIT") == "" {
		prev := debug.SetMemoryLimit(lim)
		defer debug.SetMemoryLimit(prev) // (tests run serve in-process)
	}
	log := newLogger(sio.err, cfg.logLevel, cfg.logFormat)
	warnRenamed(log, cfg.renamedUsed)
	defer onHangup(log)()
	cfg.warnAtStart(log)
	if cfg.stateDir != "" {
		if err := follow.CheckStateDir(cfg.stateDir); err != nil {
			return fail(sio.err, "serve", exitFailure, err)
		}
	}
	cfg.tel.Console, cfg.tel.Version = sio.err, buildVersion()
	tel, err := telemetry.New(ctx, &cfg.tel, os.Getenv, log)
	if err != nil {
		return fail(sio.err, "serve", exitUsage, err)
	}
	eng, err := follow.New(tel.FollowOptions(cfg.engineOptions(log)))
	if err != nil {
		_ = tel.Shutdown(ctx)
		return fail(sio.err, "serve", exitUsage, err)
	}
	// Serving starts before the restore so that /healthz answers at once;
	// /readyz says 503 until the state is restored and the followers run.
	// /metrics and the file expose the cumulative totals (restored base +
	// this process), which the plain registry does not hold.
	if err := tel.Start(ctx, telemetry.StartOptions{Ready: eng.NotReady}); err != nil {
		_ = tel.Shutdown(ctx)
		return fail(sio.err, "serve", exitFailure, err)
	}
	code = exitOK
	if err := eng.Restore(); err != nil {
		log.Error("restoring state", "err", err)
		code = exitFailure
	} else {
		tel.Restored()
		log.Info("following", "globs", cfg.globs(), "state_dir", cfg.stateDir, "traces", tel.DescribeTraces())
		if err := eng.Run(ctx); err != nil {
			log.Error("final checkpoint", "err", err)
			code = exitFailure
		}
	}
	_ = tel.Shutdown(ctx) // spans flushed, the metrics file written, then the server stopped
	log.Info("stopped", "code", code)
	return code
}

// onHangup logs SIGHUP and otherwise ignores it (until the returned stop):
// nothing of serve is reloaded. The --web.config.file is re-read by
// exporter-toolkit on every request (basic auth) and TLS handshake
// (certificates) without one; every other flag shapes streams that hold
// state (pipelines, checkpoints) and takes a restart. Without this, SIGHUP
// would end serve at once, without its final checkpoint.
func onHangup(log *slog.Logger) (stop func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-c:
				log.Info("SIGHUP: nothing to reload (the web config file is re-read on each request; other flags take a restart)")
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(c)
		close(done)
	}
}

// parseServeArgs parses and validates serve's command line.
func parseServeArgs(args []string, stderr io.Writer) (cfg serveConfig, ok bool, code int) {
	fs := newFlagSet("serve", serveUsage, stderr)
	registerVersion(fs)
	cfg.register(fs)
	if ok, code := parseFlags(fs, args); !ok {
		return cfg, false, code
	}
	if fs.NArg() > 0 {
		return cfg, false, fail(stderr, "serve", exitUsage, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	cfg.renamedUsed = aliasesUsed(fs)
	if err := cfg.validate(); err != nil {
		return cfg, false, fail(stderr, "serve", exitUsage, err)
	}
	return cfg, true, exitOK
}

// engineOptions are the follower's options from serve's flags; the
// telemetry fills in its streams (Telemetry.FollowOptions).
func (c *serveConfig) engineOptions(log *slog.Logger) follow.Options {
	return follow.Options{
		Globs:           c.globs(),
		StateDir:        c.stateDir,
		IdleTimeout:     c.idleTimeout,
		Poll:            c.poll,
		CheckpointEvery: c.checkpointEvery,
		Keep:            c.keep,
		MaxSpoolBytes:   c.maxSpoolBytes,
		MaxStreams:      c.maxFiles,
		Logger:          log,
	}
}
