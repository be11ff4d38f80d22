package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cbc-otel/cbc-otel/internal/count"
	"github.com/cbc-otel/cbc-otel/internal/runcost"
	"github.com/cbc-otel/cbc-otel/simulate"
	"github.com/cbc-otel/cbc-otel/simulate/drive"

	"github.com/cbc-otel/cbc-otel/telemetry"
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
	live      bool
	pace      time.Duration
	logLevel  string
	logFormat string
	joinCLI   bool
	budget    float64 // --budget.show-usd
	tel       telemetry.Flags
	// scenarioList is --simulate.scenarios as given, split into scenarios.
	scenarioList string
	// renamedUsed lists the deprecated flag names used.
	renamedUsed []string
}

// register defines demo's flags on fs.
func (c *demoConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.scenarioList, "simulate.scenarios", "completed,failed,stopped,cached,mixed", "comma-separated simulator scenarios, one workflow each")
	fs.StringVar(&c.dialect, "simulate.dialect", "cbc", "stream dialect of the simulated CLI: cbc or claude")
	fs.Float64Var(&c.speed, "simulate.speed", 0.3, "simulator time scale (1 = realistic, 0 = no delays)")
	fs.BoolVar(&c.json, "summary.json", false, "print the replay --summary.json lines instead of the waterfall")
	fs.IntVar(&c.width, "summary.width", 100, "width of the waterfall in columns")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "give up if the demo takes longer than this")
	fs.BoolVar(&c.hold, "hold", false, "after the summary, keep serving /metrics until interrupted (for dashboard work)")
	fs.BoolVar(&c.live, "live", false, "keep running the scenarios in turn, one workflow every --pace, until interrupted; /metrics (and OTLP, when configured) stay up the whole time")
	fs.DurationVar(&c.pace, "pace", 2*time.Second, "with --live, the pause between two workflows")
	fs.StringVar(&c.logLevel, "log.level", "error", "log level of cbc-otel's own messages on stderr: error, warn, info or debug")
	registerLogFormat(fs, &c.logFormat)
	fs.BoolVar(&c.joinCLI, "cli-telemetry.join", false, "the simulator emits the CLI's own telemetry (model and tool spans, cost per call) and the wrapper joins it, as run --cli-telemetry.join does with Claude Code")
	fs.Float64Var(&c.budget, "budget.show-usd", defaultDemoBudget, "a budget for show: the summary and the runs page show the session's spend (the joined cost, with --cli-telemetry.join) against it; nothing is stopped (that is run --budget.max-cost-usd); 0: none")
	c.tel.Register(fs, telemetry.Demo)
}

// defaultDemoBudget is the demo's budget for show: the default scenarios
// spend about half of it with --cli-telemetry.join ($0.12), and demo
// --live passes it after a few rounds of them: the line and the runs
// page's meter are seen filling, then over.
const defaultDemoBudget = 0.25

const demoUsage = `usage: cbc-otel demo [flags]

Runs simulated workflows under the wrapper and prints what cbc-otel observed.
With --live they keep coming, one every --pace, until SIGINT or SIGTERM
(exit 0), with /metrics up the whole time: something to scrape and look at.

examples:
  # five scenarios, the waterfall of what was observed
  cbc-otel demo
  # workflows until interrupted: /metrics and the runs page on :9478, spans to a collector
  cbc-otel demo --live --web.listen-address 127.0.0.1:9478 --otlp.endpoint http://127.0.0.1:4317
  # Claude Code's dialect with its own telemetry joined, fast, as JSON lines
  cbc-otel demo --simulate.dialect claude --cli-telemetry.join --simulate.speed 0 --summary.json

flags:
`

// validate checks the configuration after parsing, in the order the
// messages are worth reading: the simulator's flags, then the rest.
func (c *demoConfig) validate() error {
	if len(c.scenarios) == 0 || (c.dialect != "cbc" && c.dialect != "claude") || c.speed < 0 || c.pace < 0 || !(c.budget >= 0) {
		return errors.New("need at least one scenario, --simulate.dialect cbc|claude, --simulate.speed >= 0, --pace >= 0 and --budget.show-usd >= 0")
	}
	for _, s := range c.scenarios {
		if !slices.Contains(simulate.Scenarios(), s) {
			return fmt.Errorf("--simulate.scenarios: unknown scenario %q (have %s)", s, strings.Join(simulate.Scenarios(), ", "))
		}
	}
	_, lerr := parseLogLevel(c.logLevel)
	return errors.Join(lerr, checkLogFormat(c.logFormat), c.tel.Validate())
}

// parseDemoArgs parses and validates demo's command line.
func parseDemoArgs(args []string, stderr io.Writer) (cfg demoConfig, ok bool, code int) {
	fs := newFlagSet("demo", demoUsage, stderr)
	registerVersion(fs)
	cfg.register(fs)
	if ok, code := parseFlags(fs, args); !ok {
		return cfg, false, code
	}
	if fs.NArg() > 0 {
		return cfg, false, fail(stderr, "demo", exitUsage, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	cfg.renamedUsed = aliasesUsed(fs)
	for _, s := range strings.Split(cfg.scenarioList, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.scenarios = append(cfg.scenarios, s)
		}
	}
	if err := cfg.validate(); err != nil {
		return cfg, false, fail(stderr, "demo", exitUsage, err)
	}
	return cfg, true, exitOK
}

// runConfig is what demo runs: this binary's simulate as the child, under
// the same runner, supervisor and pipeline as `run`.
func (c *demoConfig) runConfig(exe string) runConfig {
	rc := defaultRunConfig()
	rc.command = []string{exe, "simulate", "--dialect", c.dialect, "--speed", fmt.Sprint(c.speed), "--noise", "4096"}
	rc.killTimeout, rc.drainTimeout = 5*time.Second, 2*time.Second
	rc.logLevel, rc.logFormat = c.logLevel, c.logFormat
	rc.tel = c.tel
	rc.joinCLI = c.joinCLI
	rc.budgetShow = c.budget // shown, never a cap: the demo stops nothing by it
	rc.renamedUsed = c.renamedUsed
	rc.collect = !c.live // a live demo runs for hours: keep no run
	return rc
}

// cmdDemo is the embedded default: it runs `cbc-otel simulate` as a child
// through the runner of `run` (supervisor, taps, pipeline, sinks), drives it
// the way an SDK would (initialize, one user message per scenario, an
// interrupt for the stopped scenario), and prints what the pipeline
// observed.
func cmdDemo(ctx context.Context, args []string, sio stdio) int {
	cfg, ok, code := parseDemoArgs(args, sio.err)
	if !ok {
		return code
	}
	exe, err := os.Executable()
	if err != nil {
		return fail(sio.err, "demo", exitFailure, fmt.Errorf("locating own binary: %w", err))
	}
	// A live demo ends when ctx does (SIGINT, SIGTERM), through its driver:
	// it interrupts the workflow running and closes the simulator's stdin,
	// which then exits cleanly; the child is not killed.
	runCtx, cancel := context.WithTimeout(ctx, cfg.timeout)
	if cfg.live {
		runCtx, cancel = context.WithCancel(context.WithoutCancel(ctx))
	}
	defer cancel()
	childIn, drvOut := io.Pipe() // driver → child stdin
	drvIn, childOut := io.Pipe() // child stdout → driver
	// Closed by finished once the child is done (the driver then gets EOF),
	// or here when the child never started.
	defer childIn.Close()
	defer childOut.Close()
	drvErr := make(chan error, 1)
	ran := false
	r := runner{
		name:         "demo",
		signals:      func() (<-chan os.Signal, func()) { return nil, func() {} },
		consumerWait: 10 * time.Second,
		started: func(tel *telemetry.Telemetry) {
			announceDemo(sio.err, &cfg, tel)
			go func() {
				err := drive.Run(ctx, drive.Options{Scenarios: cfg.scenarios, Live: cfg.live, Pace: cfg.pace}, drvOut, drvIn)
				drvOut.Close()
				io.Copy(io.Discard, drvIn) // keep the child unblocked until it exits
				drvErr <- err
			}()
		},
		finished: func(tel *telemetry.Telemetry, out outcome) {
			childOut.Close()
			childIn.Close()
			code, ran = finishDemo(ctx, &cfg, sio, tel, out, <-drvErr), true
		},
	}
	out := r.exec(runCtx, cfg.runConfig(exe), stdio{in: childIn, out: childOut, err: sio.err})
	if !ran {
		return out.code // the telemetry did not start: exec said why
	}
	return code
}

// announceDemo says what the demo runs and where to look.
func announceDemo(w io.Writer, cfg *demoConfig, tel *telemetry.Telemetry) {
	what := count.Of(len(cfg.scenarios), "simulated "+cfg.dialect+" workflow")
	if cfg.live {
		what = fmt.Sprintf("simulated %s workflows, one every %v until interrupted (Ctrl-C),", cfg.dialect, cfg.pace)
	}
	fmt.Fprintf(w, "cbc-otel demo: running %s under the wrapper: %s\n", what, strings.Join(cfg.scenarios, ", "))
	switch a := tel.Addr(); {
	case a != nil && (cfg.live || cfg.hold):
		fmt.Fprintf(w, "cbc-otel demo: metrics at http://%s/metrics\n", displayAddr(a))
		if tel.HasPage() {
			fmt.Fprintf(w, "cbc-otel demo: the runs at http://%s/\n", displayAddr(a))
		}
	case a != nil:
		// Its URLs would be dead a second later: say how to keep them.
		fmt.Fprintln(w, "cbc-otel demo: /metrics and the runs page are up only while the demo runs; add --hold to keep them up after the summary, or --live")
	}
	if cfg.budget > 0 {
		why := "the joined cost, which burns it"
		if !cfg.joinCLI {
			why = "none without --cli-telemetry.join: the simulator's result lines report no cost, as CodeBuddy's"
		}
		fmt.Fprintf(w, "cbc-otel demo: a budget of %s for show (--budget.show-usd; nothing is stopped by it) against the session's spend: %s\n", runcost.USD(cfg.budget), why)
	}
	if cfg.joinCLI {
		fmt.Fprintln(w, "cbc-otel demo: costs come from the simulated CLI's own telemetry, joined (cbc_workflow_cost_usd_total, cbc_cli_cost_usd_total, the $ in the summary); cbc_cost_usd_total, which counts the CLI's result lines, stays 0: the simulator writes total_cost_usd 0 there, as CodeBuddy does (Claude Code writes the session's total)")
	}
	switch {
	case tel.TracesEnabled():
		fmt.Fprintf(w, "cbc-otel demo: traces to %s\n", tel.DescribeTraces())
	case cfg.live:
		fmt.Fprintln(w, "cbc-otel demo: no traces: start Jaeger (README, \"Quick start on a laptop\") and add --otlp.endpoint http://127.0.0.1:4317")
	}
}

// finishDemo prints what the pipeline saw once the simulator and the
// driver are done, and with --hold keeps /metrics up until ctx ends.
func finishDemo(ctx context.Context, cfg *demoConfig, sio stdio, tel *telemetry.Telemetry, out outcome, drvErr error) int {
	switch {
	case out.err != nil:
		return exitFailure // exec said why; the driver's error is only its consequence
	case drvErr != nil:
		return fail(sio.err, "demo", exitFailure, fmt.Errorf("driving the simulator: %w", drvErr))
	case out.Stats == nil:
		return fail(sio.err, "demo", exitFailure, errors.New("telemetry pipeline did not finish"))
	case out.code != exitOK:
		return fail(sio.err, "demo", exitFailure, fmt.Errorf("simulator exited with status %d", out.code))
	}
	if cfg.live {
		fmt.Fprintf(sio.err, "cbc-otel demo: stopped after %d lines (%d events of interest)\n", out.Lines(), out.Events())
		return exitOK
	}
	if err := telemetry.WriteRuns(sio.out, cfg.json, cfg.width, out.Outcome); err != nil {
		return fail(sio.err, "demo", exitFailure, err)
	}
	if a := tel.Addr(); cfg.hold && a != nil {
		fmt.Fprintf(sio.err, "cbc-otel demo: serving http://%s/metrics until interrupted\n", displayAddr(a))
		<-ctx.Done()
	}
	return exitOK
}

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
