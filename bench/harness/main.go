// Command harness is the whole-process benchmark of cbc-otel (issue #11): it
// generates its inputs from fixed seeds, runs every case several times
// interleaved, and prints one markdown table of medians and of the ratios
// against the targets, with a short description of the machine.
//
// Sections: passthrough throughput (run vs cat and cat|cat on a mixed and a
// task-heavy stream), added latency per line at fixed line rates, replay
// throughput against a Node consumer and an OpenTelemetry Collector, scaling
// of one workflow to 1000 agents, peak RSS of run on a long stream and on one
// huge line, the CPU per task event of replay, run and serve (and of
// serve following many growing files), side by side with a baseline binary
// when one is given, and run's CPU per line next to cat's on the same paced
// stream (runcat). It asserts no timing: it fails only when the harness
// itself breaks (a command fails, bytes go missing, the peers disagree on
// counts).
//
//	go run ./bench/harness                 # the full run (~10 min)
//	go run ./bench/harness -quick          # smoke check of the harness (CI)
//	CBC_OTEL_BIN=/path/cbc-otel go run ./bench/harness -only replay,scaling
//	go run ./bench/harness -only cpu -baseline-rev HEAD~10   # or -baseline-bin OLD
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cbc-otel/cbc-otel/bench/internal/pacegen"
	"github.com/cbc-otel/cbc-otel/internal/testbin"
)

// config is everything the sections need: sizes, run counts and the tools.
type config struct {
	quick    bool
	runs     int
	bin      string // the cbc-otel binary under test
	root     string // source tree: bench/peers lives there
	node     string // node executable, "" = not run
	otelcol  string // ocb-built collector, "" = not run
	work     string // scratch directory of generated inputs and outputs
	mixedMB  int64
	taskMB   int64
	latDur   time.Duration
	rates    []int
	agents   []int
	memMB    int64
	lineMB   int64
	peerWait time.Duration
	// cpu section
	cpuTaskMB    int64         // size of the task-heavy stream of replay and serve
	cpuRunMB     int64         // the start of it that run's paced child writes
	cpuRunRate   int           // lines/s of that child
	cpuFiles     int           // files serve follows at once
	cpuFileRate  int           // lines/s appended to each of them
	cpuFollowDur time.Duration // how long they grow
	baselineBin  string        // binary to compare with, "" = none
	baselineRev  string        // or a git revision of root to build it from
	names        flagNames     // the flag names bin takes
	log          *slog.Logger
}

// sectionNames lists the sections in the order they run and print.
var sectionNames = []string{"passthrough", "latency", "replay", "scaling", "memory", "cpu", "serve", "runcat"}

func main() {
	if spec := os.Getenv(pacegen.EnvLatGen); spec != "" {
		os.Exit(pacegen.LatencyGenMain(spec))
	}
	if spec := os.Getenv(pacegen.EnvCPUGen); spec != "" {
		os.Exit(pacegen.CPUGenMain(spec))
	}
	if spec := os.Getenv(envRunCatGen); spec != "" {
		os.Exit(runCatGenMain(spec))
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, log); err != nil {
		log.Error("benchmark failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("harness", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "smoke check: tiny sizes, one run of every case")
	runs := fs.Int("runs", 0, "runs of every case (default 5, or 1 with -quick; replay, scaling and memory take at most 3)")
	bin := fs.String("bin", os.Getenv("CBC_OTEL_BIN"), "cbc-otel binary to measure (default $CBC_OTEL_BIN, else built from -root)")
	root := fs.String("root", ".", "source tree to build ./cmd/cbc-otel from when -bin is empty")
	node := fs.String("node", "node", "Node.js executable of the replay peer (\"\" = do not run it)")
	otelcol := fs.String("otelcol", os.Getenv("CBC_OTELCOL_BIN"), "ocb-built collector of the replay peer (default $CBC_OTELCOL_BIN; tools/otelcol/build.sh)")
	work := fs.String("work", "", "scratch directory (default a temporary one, removed at exit); generated inputs in it are reused")
	only := fs.String("only", strings.Join(sectionNames, ","), "comma-separated sections to run")
	out := fs.String("o", "", "also write the report (markdown) to this file")
	baseBin := fs.String("baseline-bin", os.Getenv("CBC_OTEL_BASELINE_BIN"), "cpu and runcat sections: also measure this cbc-otel binary (e.g. the previous release), interleaved, and show the ratio new/baseline (default $CBC_OTEL_BASELINE_BIN)")
	baseRev := fs.String("baseline-rev", "", "cpu and runcat sections: build the baseline from this git revision of -root (instead of -baseline-bin)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("flags: %w", err)
	}
	c := &config{quick: *quick, runs: *runs, root: *root, node: *node, otelcol: *otelcol, baselineBin: *baseBin, baselineRev: *baseRev, log: log}
	// The run case's child writes one line per write at a pace the tap
	// keeps up with on a loaded 2-core machine (at 5000 lines/s it drops:
	// every line costs the wrapper a wake-up), still far above a real
	// CLI's few events per second.
	c.cpuRunRate, c.cpuFileRate = 2000, 50
	if *quick {
		c.mixedMB, c.taskMB, c.memMB, c.lineMB = 16, 4, 64, 16
		c.cpuTaskMB, c.cpuRunMB, c.cpuFiles, c.cpuFollowDur = 4, 4, 32, time.Second
		c.latDur = 300 * time.Millisecond
		c.agents = []int{25, 50, 100, 125}
		c.peerWait = 2 * time.Minute
		if c.runs == 0 {
			c.runs = 1
		}
	} else {
		c.mixedMB, c.taskMB, c.memMB, c.lineMB = 1024, 256, 4096, 1024
		// 64 MiB (~45k task events) makes start-up and /proc's 10 ms
		// ticks small next to the figures; 8 MiB (~10k lines) is ~5 s of
		// the run case's paced child.
		c.cpuTaskMB, c.cpuRunMB, c.cpuFiles, c.cpuFollowDur = 64, 8, 256, 10*time.Second
		c.latDur = 3 * time.Second
		c.agents = []int{125, 250, 500, 1000}
		c.peerWait = 10 * time.Minute
		if c.runs == 0 {
			c.runs = 5
		}
	}
	c.rates = []int{1000, 10000, 100000}
	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		known := false
		for _, n := range sectionNames {
			known = known || n == s
		}
		if !known {
			return fmt.Errorf("unknown section %q (have %s)", s, strings.Join(sectionNames, ","))
		}
		want[s] = true
	}

	if *work != "" {
		if err := os.MkdirAll(*work, 0o755); err != nil {
			return fmt.Errorf("work dir: %w", err)
		}
		c.work = *work
	} else {
		dir, err := os.MkdirTemp("", "cbc-bench-")
		if err != nil {
			return fmt.Errorf("work dir: %w", err)
		}
		defer os.RemoveAll(dir)
		c.work = dir
	}
	if *bin == "" {
		c.bin = filepath.Join(c.work, "cbc-otel")
		log.Info("building cbc-otel", "root", *root)
		if _, err := testbin.Build(ctx, c.bin, testbin.Dir(*root)); err != nil {
			return fmt.Errorf("build cbc-otel: %w", err)
		}
	} else {
		abs, err := filepath.Abs(*bin)
		if err != nil {
			return fmt.Errorf("bin: %w", err)
		}
		c.bin = abs
	}
	c.names = probeFlagNames(ctx, c.bin)
	if c.node != "" {
		if p, err := exec.LookPath(c.node); err != nil {
			log.Warn("node not found: the Node peer will not run", "node", c.node)
			c.node = ""
		} else {
			c.node = p
		}
	}

	rep := &report{}
	rep.machine = describeMachine(ctx, c)
	start := time.Now()
	var errs []error
	for _, name := range sectionNames {
		if !want[name] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		log.Info("section", "name", name)
		var err error
		switch name {
		case "passthrough":
			err = passthrough(ctx, c, rep)
		case "latency":
			err = latency(ctx, c, rep)
		case "replay":
			err = replayPeers(ctx, c, rep)
		case "scaling":
			err = scaling(ctx, c, rep)
		case "memory":
			err = memory(ctx, c, rep)
		case "cpu":
			err = cpuSection(ctx, c, rep)
		case "serve":
			err = serveSection(ctx, c, rep)
		case "runcat":
			err = runCat(ctx, c, rep)
		}
		if err != nil {
			// One broken section must not hide the figures of the others,
			// but the run as a whole fails.
			log.Error("section failed", "name", name, "err", err)
			rep.notes = append(rep.notes, fmt.Sprintf("**%s failed**: %v", name, err))
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	rep.elapsed = time.Since(start)
	text := rep.markdown(c)
	if _, err := io.WriteString(stdout, text); err != nil {
		return fmt.Errorf("print report: %w", err)
	}
	if *out != "" {
		if err := os.WriteFile(*out, []byte(text), 0o644); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	}
	return errors.Join(errs...)
}
