package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cbc-otel/cbc-otel/follow"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/metrics"
	"github.com/cbc-otel/cbc-otel/spool"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/traces"
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
	logLevel        string
	tel             telemetryFlags
}

func (c *serveConfig) register(fs *flag.FlagSet) {
	fs.Var(&c.follows, "follow", "follow the files matching this glob (repeatable): spool files (*.cbcspool, *.cbcspool.open) or the CLI's stdout written by tee")
	fs.Var(&c.spoolDirs, "spool-dir", "follow the spool files in this directory (repeatable): the same as --follow 'DIR/*.cbcspool*'")
	fs.StringVar(&c.stateDir, "state-dir", "", "directory of the checkpoint (offsets, open runs, cumulative totals); without it a restart reads every file from the start")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", follow.DefaultIdleTimeout, "finalize a plain file after this long without growth, or a spool file never marked complete after this long without growth or heartbeat of its wrapper (every 10s): its open runs become abandoned")
	fs.DurationVar(&c.poll, "poll-interval", follow.DefaultPoll, "how often the globs are expanded and the files checked for growth")
	fs.DurationVar(&c.checkpointEvery, "checkpoint-interval", follow.DefaultCheckpointEvery, "longest time between checkpoints while data flows (one is also written after every run that ends)")
	fs.BoolVar(&c.keep, "spool.keep", false, "keep spool files once processed (default: remove them)")
	fs.Int64Var(&c.maxSpoolBytes, "spool.max-bytes", 0, "cap on the spool files' total size: past it, processed kept files, then complete unprocessed ones, are removed oldest first (cbc_otel_spool_evicted_total); 0 = no cap")
	fs.IntVar(&c.maxFiles, "follow.max-files", follow.DefaultMaxStreams, "most files followed at once (each holds a descriptor and a pipeline); more matching files wait, oldest first, until followed ones end (cbc_otel_follow_files_waiting)")
	fs.StringVar(&c.logLevel, "log.level", "info", "log level of cbc-otel's own messages on stderr: error, warn, info or debug")
	c.tel.register(fs, true)
}

func (c *serveConfig) validate() error {
	var errs []error
	if len(c.follows) == 0 && len(c.spoolDirs) == 0 {
		errs = append(errs, errors.New("nothing to follow: give --follow GLOB or --spool-dir DIR"))
	}
	for _, g := range c.globs() {
		if _, err := filepath.Match(g, ""); err != nil {
			errs = append(errs, fmt.Errorf("--follow %q: %w", g, err))
		}
	}
	if c.idleTimeout <= 0 || c.poll <= 0 || c.checkpointEvery <= 0 {
		errs = append(errs, errors.New("--idle-timeout, --poll-interval and --checkpoint-interval must be positive"))
	}
	if c.maxFiles < 1 {
		errs = append(errs, fmt.Errorf("--follow.max-files %d: must be at least 1", c.maxFiles))
	}
	if c.maxSpoolBytes < 0 {
		errs = append(errs, errors.New("--spool.max-bytes must not be negative"))
	}
	if _, err := parseLogLevel(c.logLevel); err != nil {
		errs = append(errs, err)
	}
	if c.tel.metrics.pushURL != "" {
		errs = append(errs, errors.New("--push.gateway is for batch runs; serve is scraped"))
	}
	errs = append(errs, c.tel.validate())
	return errors.Join(errs...)
}

// globs are the --follow patterns plus one per --spool-dir.
func (c *serveConfig) globs() []string {
	out := append([]string(nil), c.follows...)
	for _, d := range c.spoolDirs {
		out = append(out, filepath.Join(d, "*"+spool.DoneSuffix+"*"))
	}
	return out
}

const serveUsage = `usage: cbc-otel serve [flags]

The long-lived sidecar: follows spool files written by 'cbc-otel run
--spool-dir' and plain stream-json files (cbc ... | tee FILE), one pipeline
per file, serves /metrics, /healthz and /readyz, exports traces, and
checkpoints its state (--state-dir) so that a restart counts every run
exactly once. Exit status: 0 after SIGTERM/SIGINT and a final checkpoint,
2 for bad flags, 1 when it cannot run (state directory not writable,
metrics address taken, final checkpoint failed).

flags:
`

// cmdServe is `cbc-otel serve`: it runs until ctx ends (SIGINT, SIGTERM).
func cmdServe(ctx context.Context, args []string, sio stdio) int {
	var cfg serveConfig
	fs := flag.NewFlagSet("cbc-otel serve", flag.ContinueOnError)
	fs.SetOutput(sio.err)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage)
		fs.PrintDefaults()
	}
	cfg.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(sio.err, "cbc-otel serve: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(sio.err, "cbc-otel serve: %v\n", err)
		return exitUsage
	}
	level, _ := parseLogLevel(cfg.logLevel)
	log := slog.New(slog.NewTextHandler(sio.err, &slog.HandlerOptions{Level: level}))
	if cfg.idleTimeout < 3*spool.Heartbeat {
		log.Warn("--idle-timeout is short next to the spool writers' heartbeat: a live wrapper whose child is quiet may be taken for a dead one",
			"idle_timeout", cfg.idleTimeout, "heartbeat", spool.Heartbeat)
	}
	if cfg.stateDir != "" {
		if err := follow.CheckStateDir(cfg.stateDir); err != nil {
			fmt.Fprintf(sio.err, "cbc-otel serve: %v\n", err)
			return exitFailure
		}
	}

	// The metrics side is built here without its server and outputs: serve
	// exposes the cumulative totals (restored base + this process), which
	// the plain registry does not hold.
	tf := cfg.tel
	tf.metrics.listen, tf.metrics.webConfig, tf.metrics.file = "", "", ""
	// One sidecar serves many streams: a TRACEPARENT of its own
	// environment is no parent of theirs.
	env := func(k string) string {
		if k == "TRACEPARENT" {
			return ""
		}
		return os.Getenv(k)
	}
	tel, err := tf.start(ctx, env, log)
	if err != nil {
		fmt.Fprintf(sio.err, "cbc-otel serve: %v\n", err)
		return exitUsage
	}
	cum := metrics.NewCumulative(tel.metrics.registry())

	// Every stream: the shared metrics sink and, when tracing, a traces
	// sink of its own (it keeps per-stream state).
	newStream := func() follow.StreamConfig {
		sinks := []ingest.Sink{tel.metrics.sink()}
		ckpt := map[string]ingest.StreamCheckpointer{metrics.CheckpointName: tel.metrics.metrics()}
		if tel.traces.enabled() {
			ts := traces.New(tel.traces.prov, traces.Options{CapturePreviews: tel.traces.previews})
			sinks = append(sinks, ts)
			ckpt[traces.CheckpointName] = ts
		}
		return follow.StreamConfig{
			Pipeline: ingest.PipelineOptions{
				MaxLine: cfg.tel.maxLine,
				Decode:  streamjson.DecodeOptions{KeepPreviews: tel.traces.capturePreviews(), KeepErrors: cfg.tel.captureErrors},
				Tracker: cfg.tel.trackerOptions(sinks, tel.stats),
			},
			Checkpointers: ckpt,
		}
	}
	eng, err := follow.New(follow.Options{
		Globs:           cfg.globs(),
		StateDir:        cfg.stateDir,
		IdleTimeout:     cfg.idleTimeout,
		Poll:            cfg.poll,
		CheckpointEvery: cfg.checkpointEvery,
		Keep:            cfg.keep,
		MaxSpoolBytes:   cfg.maxSpoolBytes,
		MaxStreams:      cfg.maxFiles,
		NewStream:       newStream,
		Checkpointers:   map[string]ingest.Checkpointer{metrics.CheckpointName: metrics.NewCheckpoint(tel.metrics.metrics(), cum)},
		Registerer:      tel.metrics.registry(),
		Logger:          log,
	})
	if err != nil {
		tel.shutdown(context.WithoutCancel(ctx))
		fmt.Fprintf(sio.err, "cbc-otel serve: %v\n", err)
		return exitUsage
	}

	// Serving starts before the restore so that /healthz answers at once;
	// /readyz says 503 until the state is restored and the followers run.
	var served chan error
	stopServer := func() {}
	if cfg.tel.metrics.listen != "" {
		srv, err := metrics.Listen(metrics.ServeOptions{
			Addr:          cfg.tel.metrics.listen,
			WebConfigFile: cfg.tel.metrics.webConfig,
			Gatherer:      cum,
			Logger:        log,
			Ready:         eng.Ready,
		})
		if err != nil {
			tel.shutdown(context.WithoutCancel(ctx))
			fmt.Fprintf(sio.err, "cbc-otel serve: %v\n", err)
			return exitFailure
		}
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		served = make(chan error, 1)
		go func() { served <- srv.Serve(sctx) }()
		stopServer = cancel
		log.Info("serving metrics", "addr", srv.Addr().String(), "tls_config", cfg.tel.metrics.webConfig != "")
	}

	code := exitOK
	if err := eng.Restore(); err != nil {
		log.Error("restoring state", "err", err)
		code = exitFailure
	} else {
		log.Info("following", "globs", cfg.globs(), "state_dir", cfg.stateDir, "traces", tel.traces.describe())
		if err := eng.Run(ctx); err != nil {
			log.Error("final checkpoint", "err", err)
			code = exitFailure
		}
	}

	// Shutdown: spans flushed under their deadline, the metrics file
	// written, then the server stopped (the final state stays scrapeable
	// until here).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.tel.traces.flushTimeout+cfg.tel.metrics.flushTimeout)
	defer cancel()
	tel.shutdown(sctx)
	if cfg.tel.metrics.file != "" {
		if err := metrics.WriteFile(cfg.tel.metrics.file, cum); err != nil {
			log.Error("writing the metrics file", "err", err)
		}
	}
	stopServer()
	if served != nil {
		select {
		case err := <-served:
			if err != nil {
				log.Error("metrics server", "err", err)
			}
		case <-sctx.Done():
		}
	}
	log.Info("stopped", "code", code)
	return code
}
