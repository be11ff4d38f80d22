package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/report"
	"github.com/cbc-otel/cbc-otel/supervise"
)

// demoConfig holds demo's flags.
type demoConfig struct {
	scenarios []string
	dialect   string
	speed     float64
	json      bool
	width     int
	timeout   time.Duration
	hold      bool
	logLevel  string
	tel       telemetryFlags
}

// cmdDemo is the embedded default: it starts `cbc-otel simulate` as a child
// under the same supervisor and pipeline as `run`, drives it the way an SDK
// would (initialize, one user message per scenario, an interrupt for the
// stopped scenario), and prints what the pipeline observed.
func cmdDemo(ctx context.Context, args []string, sio stdio) int {
	cfg := demoConfig{}
	var scenarios string
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(sio.err)
	fs.Usage = func() {
		fmt.Fprintf(sio.err, "usage: cbc-otel demo [flags]\n\nRuns simulated workflows under the wrapper and prints what cbc-otel observed.\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&scenarios, "scenarios", "completed,failed,stopped,cached,mixed", "comma-separated simulator scenarios, one workflow each")
	fs.StringVar(&cfg.dialect, "dialect", "cbc", "stream dialect of the simulated CLI: cbc or claude")
	fs.Float64Var(&cfg.speed, "speed", 0.3, "simulator time scale (1 = realistic, 0 = no delays)")
	fs.BoolVar(&cfg.json, "json", false, "print the replay --json lines instead of the waterfall")
	fs.IntVar(&cfg.width, "width", 100, "width of the waterfall in columns")
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "give up if the demo takes longer than this")
	fs.BoolVar(&cfg.hold, "hold", false, "after the summary, keep serving /metrics until interrupted (for dashboard work)")
	fs.StringVar(&cfg.logLevel, "log.level", "error", "log level of cbc-otel's own messages on stderr: error, warn, info or debug")
	cfg.tel.register(fs, true)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(sio.err, "cbc-otel demo: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	for _, s := range strings.Split(scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.scenarios = append(cfg.scenarios, s)
		}
	}
	if len(cfg.scenarios) == 0 || (cfg.dialect != "cbc" && cfg.dialect != "claude") || cfg.speed < 0 {
		fmt.Fprintln(sio.err, "cbc-otel demo: need at least one scenario, --dialect cbc|claude and --speed >= 0")
		return exitUsage
	}
	level, lerr := parseLogLevel(cfg.logLevel)
	if err := errors.Join(lerr, cfg.tel.validate()); err != nil {
		fmt.Fprintf(sio.err, "cbc-otel demo: %v\n", err)
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(sio.err, &slog.HandlerOptions{Level: level}))
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(sio.err, "cbc-otel demo: locating own binary: %v\n", err)
		return exitFailure
	}
	tel, err := cfg.tel.start(ctx, os.Getenv, logger)
	if err != nil {
		fmt.Fprintf(sio.err, "cbc-otel demo: %v\n", err)
		return exitUsage
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.tel.traces.flushTimeout+cfg.tel.metrics.flushTimeout)
		defer cancel()
		tel.shutdown(sctx)
	}()
	runCtx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	fmt.Fprintf(sio.err, "cbc-otel demo: running %d simulated %s workflow(s) under the wrapper: %s\n", len(cfg.scenarios), cfg.dialect, strings.Join(cfg.scenarios, ", "))
	if a := tel.metrics.listenAddr(); a != nil {
		fmt.Fprintf(sio.err, "cbc-otel demo: metrics at http://%s/metrics\n", displayAddr(a))
	}
	if tel.traces.enabled() {
		fmt.Fprintf(sio.err, "cbc-otel demo: traces to %s\n", tel.traces.describe())
	}
	obs := startObserver(runCtx, 4<<20, tel.pipelineOptions(&cfg.tel, true))
	childIn, drvOut := io.Pipe() // driver → child stdin
	drvIn, childOut := io.Pipe() // child stdout → driver
	drvErr := make(chan error, 1)
	go func() {
		err := driveDemo(cfg, drvOut, drvIn)
		drvOut.Close()
		io.Copy(io.Discard, drvIn) // keep the child unblocked until it exits
		drvErr <- err
	}()
	res, err := supervise.Run(runCtx, supervise.Config{
		Path:         exe,
		Args:         []string{"simulate", "--dialect", cfg.dialect, "--speed", fmt.Sprint(cfg.speed), "--noise", "4096"},
		Stdin:        childIn,
		Stdout:       childOut,
		Stderr:       sio.err,
		StdoutTap:    obs.stdout,
		StdinTap:     obs.stdin,
		KillTimeout:  5 * time.Second,
		DrainTimeout: 2 * time.Second,
	})
	childOut.Close()
	childIn.Close()
	if err != nil {
		fmt.Fprintf(sio.err, "cbc-otel demo: %v\n", err)
		return exitFailure
	}
	if err := <-drvErr; err != nil {
		fmt.Fprintf(sio.err, "cbc-otel demo: driving the simulator: %v\n", err)
		return exitFailure
	}
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer fcancel()
	if err := obs.finish(fctx); err != nil {
		fmt.Fprintf(sio.err, "cbc-otel demo: %v\n", err)
		return exitFailure
	}
	if res.ExitCode != 0 {
		fmt.Fprintf(sio.err, "cbc-otel demo: simulator exited with status %d\n", res.ExitCode)
		return exitFailure
	}
	if cfg.json {
		err = report.WriteJSON(sio.out, obs.runs.Runs, obs.stats())
	} else {
		err = report.WriteWaterfall(sio.out, obs.runs.Runs, obs.stats(), report.WaterfallOptions{Width: cfg.width})
	}
	if err != nil {
		fmt.Fprintf(sio.err, "cbc-otel demo: %v\n", err)
		return exitFailure
	}
	if cfg.hold && tel.metrics.listenAddr() != nil {
		fmt.Fprintf(sio.err, "cbc-otel demo: serving http://%s/metrics until interrupted\n", displayAddr(tel.metrics.listenAddr()))
		<-ctx.Done()
	}
	return exitOK
}

// demoMsg is what the driver reads of the child's stdout lines.
type demoMsg struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`
	TaskID    string `json:"task_id"`
	TaskType  string `json:"task_type"`
}

// driveDemo plays the SDK: initialize, then per scenario a user message and
// a wait for that turn's workflow notification. For "stopped" it sends an
// interrupt once the workflow shows progress.
func driveDemo(cfg demoConfig, w io.Writer, r io.Reader) error {
	send := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	type obj = map[string]any
	if err := send(obj{"type": "control_request", "request_id": "init", "request": obj{"subtype": "initialize", "hooks": obj{}, "capabilities": obj{}, "hasPrompt": true}}); err != nil {
		return err
	}
	br := bufio.NewReaderSize(r, 64<<10)
	var session string
	for i, sc := range cfg.scenarios {
		msg := obj{"type": "user", "message": obj{"role": "user", "content": fmt.Sprintf("[[SCENARIO:%s]] demo turn %d", sc, i+1)}, "parent_tool_use_id": nil, "session_id": session}
		if err := send(msg); err != nil {
			return err
		}
		workflow, interrupted := "", false
		for done := false; !done; {
			line, err := br.ReadBytes('\n')
			if err != nil {
				return fmt.Errorf("scenario %s: simulator output ended: %w", sc, err)
			}
			var m demoMsg
			if json.Unmarshal(line, &m) != nil || m.Type != "system" {
				continue
			}
			switch m.Subtype {
			case "init":
				session = m.SessionID
			case "task_started":
				if m.TaskType == "local_workflow" {
					workflow = m.TaskID
				}
			case "task_progress":
				if sc == "stopped" && !interrupted && m.TaskID == workflow {
					interrupted = true
					err := send(obj{"type": "control_request", "request_id": fmt.Sprintf("stop-%d", i+1), "request": obj{"subtype": "interrupt", "session_id": session, "reason": "user cancel"}})
					if err != nil {
						return err
					}
				}
			case "task_notification":
				done = m.TaskID == workflow
			}
		}
	}
	return nil
}

var _ ingest.Sink = (*report.Collector)(nil)

// displayAddr turns a wildcard listen address into one a person can open.
func displayAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}
