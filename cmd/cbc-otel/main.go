// Command cbc-otel makes CodeBuddy CLI and Claude Code stream-json workflows
// observable: it wraps the CLI (run), follows the spool files or stream
// logs of CLIs run elsewhere as a sidecar (serve), replays recordings
// (replay), stands in for the CLI (simulate), shows the whole pipeline end
// to end (demo), and copies itself into a directory for an init container
// (install).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// Exit codes of the wrapper's own failures. Everything else is the child's.
const (
	exitOK       = 0
	exitFailure  = 1   // the wrapper itself failed (I/O, internal error)
	exitUsage    = 2   // bad flags or arguments
	exitNoExec   = 126 // the command exists but cannot be executed
	exitNotFound = 127 // the command was not found
)

// version is set at build time with -ldflags "-X main.version=..." (make
// build: git describe). Without it, buildVersion reads the build's own
// record.
var version = "dev"

// buildVersion is the version the binary reports (`version`,
// cbc_otel_build_info, service.version).
func buildVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return resolveVersion(version, bi)
}

// resolveVersion picks, in order: the version set at link time; the
// module's version (`go install ...@v1.2.3`); the VCS revision of a
// checkout build ("devel+<12 hex>", "-dirty" when modified); "dev".
func resolveVersion(linked string, bi *debug.BuildInfo) string {
	if linked != "" && linked != "dev" {
		return linked
	}
	if bi == nil {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	v := "devel+" + rev[:min(12, len(rev))]
	if dirty {
		v += "-dirty"
	}
	return v
}

// stdio carries the process's standard streams so that every subcommand can
// be run in-process by tests.
type stdio struct {
	in       io.Reader
	out, err io.Writer
	// inFile and outFile are the real files when the streams are the
	// process's own; run passes them to the child's pumps.
	inFile, outFile *os.File
}

// stdin is the stream to pass to a child as its stdin: the real file when
// there is one (the pump then reads it directly).
func (s stdio) stdin() io.Reader {
	if s.inFile != nil {
		return s.inFile
	}
	return s.in
}

// stdout is the stream to pass a child's stdout to: the real file when
// there is one (the child writes to it through the pump).
func (s stdio) stdout() io.Writer {
	if s.outFile != nil {
		return s.outFile
	}
	return s.out
}

// runMemoryLimit is run's soft Go memory limit unless GOMEMLIMIT is set.
// What run holds is bounded (tap queues, one line of interest, a few
// snapshots), but with the default GOGC alone the heap grows to twice that
// before a collection; the limit makes the collector run earlier instead,
// which keeps the wrapper's resident set under 32 MiB on any stream
// (BENCHMARKS.md) for a cost lost in the noise. 18 MiB, not 20: about
// 17 MiB of the resident set is the idle binary, and with 20 the state
// attack of docs/reliability.md (100,000 open runs, a 4 MiB snapshot)
// peaked at 32.2-32.9 MiB, with 18 at 29.0. Not 16 either: a failing OTLP
// backend keeps the span queue full, and at 16 the collector thrashed
// (throughput 0.65 of the reference, where 18 and 20 give 0.95-1.0).
// 17 since issue 20: the receiver and forwarders of the CLI's telemetry
// add about 0.3 MiB of binary to the idle resident set, and the state
// attack peaked at 31.2-32.7 MiB with 18; with 17 it is 30.5-30.8, and the
// slow OTLP backend (with the tap queue halved to 2 MiB) keeps 0.977.
// 16 since issue 30: each tap's queue held its chunks' 72-byte headers in
// 4,097 slots (590 KB for the two taps, counted by the limit, touched once
// a long stream cycled through them) and now holds pointers (66 KB), so
// half of the step is room the collector never had for anything else; the
// reason against 16 above, a failing OTLP backend, is now under
// runMemoryLimitOTLP. It pays for the binary's start-up pages, grown by
// about 0.9 MiB of file-backed resident set with the code of issues 30-33:
// run's peak RSS on the 4 GiB stream 28.3 MiB (28.1-28.5) against 28.5-28.8
// for f7e5218, the state attack 29.5-30.0 against 30.5-30.8, in the same
// wall time (bench memory section, interleaved, medians of 3; with 17 MiB
// and the old queue it was 29.3).
const runMemoryLimit = 16 << 20

// runMemoryLimitOTLP is run's soft memory limit when spans go to an OTLP
// endpoint (set once the flags are read): the exporter's queue of up to
// --traces.queue spans and the batch in flight are live heap the 16 MiB
// limit has no room for. Under it a slow or unreachable backend kept the
// collector running on the pump's core: the chaos suite's blast runs fell
// to 0.85 of the no-telemetry run (CPU 0.88 vs 0.62 s); at 24 MiB 0.97
// (0.557 vs 0.504 s). The resident sets bounded at 32 MiB (docs/reliability.md,
// BENCHMARKS.md) are measured without an OTLP endpoint, as before; with one
// docs/cli.md says what a hostile stream costs.
const runMemoryLimitOTLP = 24 << 20

// runGCPercent is run's GOGC unless GOGC is set. Under the memory limit the
// heap is bounded anyway; collecting only at 5x the live heap instead of 2x
// spares the start-up (package init allocates past the first 4 MiB goal)
// and every small run about a fifth of their CPU.
const runGCPercent = 400

// replayGCPercent is replay's GOGC unless GOGC is set: a batch job over a
// file, whose live heap is the open runs and the runs it keeps to print;
// collecting at 5x it instead of 2x took 13-16 % off replay's CPU on a
// task-heavy recording (median of 15 interleaved runs).
const replayGCPercent = 400

func main() {
	if len(os.Args) > 1 && os.Args[1] == "run" {
		if os.Getenv("GOMEMLIMIT") == "" {
			debug.SetMemoryLimit(runMemoryLimit)
		}
		if os.Getenv("GOGC") == "" {
			debug.SetGCPercent(runGCPercent)
		}
	}
	if len(os.Args) > 1 && os.Args[1] == "replay" && os.Getenv("GOGC") == "" {
		debug.SetGCPercent(replayGCPercent)
	}
	// SIGINT and SIGTERM are handled per subcommand (run forwards them to the
	// child); this context only serves subcommands that simply stop.
	ctx := context.Background()
	os.Exit(realMain(ctx, os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr, inFile: os.Stdin, outFile: os.Stdout}))
}

const usageText = `usage: cbc-otel <command> [flags] [args]

commands:
  run [flags] -- CMD [ARGS...]   wrap a CLI: pass stdio through byte-exact, observe its workflows
  serve [flags]                  the long-lived sidecar: follow spooled streams, serve /metrics, export traces
  replay [flags] FILE...         run a recording (- for stdin) through the pipeline, print a summary
  simulate [flags]               a protocol-faithful stand-in for the CLI on stdio
  demo [flags]                   run simulated workflows under the wrapper and show what is observed
  install DIR                    copy this binary to DIR/cbc-otel (the Helm chart's init container)
  version                        print the version

Run 'cbc-otel <command> -h' for a command's flags.
`

// realMain dispatches to a subcommand and returns the process exit code.
func realMain(ctx context.Context, args []string, sio stdio) int {
	if len(args) == 0 {
		fmt.Fprint(sio.err, usageText)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return cmdRun(ctx, rest, sio)
	case "serve":
		return withStopSignals(ctx, func(ctx context.Context) int { return cmdServe(ctx, rest, sio) })
	case "replay":
		return withStopSignals(ctx, func(ctx context.Context) int { return cmdReplay(ctx, rest, sio) })
	case "simulate":
		return withStopSignals(ctx, func(ctx context.Context) int { return cmdSimulate(ctx, rest, sio) })
	case "demo":
		return withStopSignals(ctx, func(ctx context.Context) int { return cmdDemo(ctx, rest, sio) })
	case "install":
		return cmdInstall(ctx, rest, sio)
	case "version", "--version", "-version":
		fmt.Fprintf(sio.out, "cbc-otel %s\n", buildVersion())
		return exitOK
	case "help", "-h", "--help", "-help":
		fmt.Fprint(sio.out, usageText)
		return exitOK
	default:
		fmt.Fprintf(sio.err, "cbc-otel: unknown command %q\n\n%s", cmd, usageText)
		return exitUsage
	}
}

// withStopSignals runs f with a context cancelled by SIGINT or SIGTERM.
func withStopSignals(ctx context.Context, f func(context.Context) int) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return f(ctx)
}
