package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cbc-otel/cbc-otel/simulate"
)

// exitSignalled is the conventional status of a process stopped by SIGINT;
// simulate returns it when its context ends before stdin does.
const exitSignalled = 130

const simulateUsage = `usage: cbc-otel simulate [flags] < stdin.ndjson

Reads stream-json control requests and user messages on stdin and writes
the CLI's stdout stream; one workflow run per user message.

flags:
`

// cmdSimulate stands in for the CLI on stdio: it speaks the stream-json
// protocol and runs scripted workflows (see package simulate).
func cmdSimulate(ctx context.Context, args []string, sio stdio) int {
	fs := newFlagSet("simulate", simulateUsage, sio.err)
	// The CLI's own telemetry, when its environment switches it on
	// (demo --cli-telemetry.join), as Claude Code does.
	cfg := simulate.Config{Getenv: os.Getenv, Stderr: sio.err}
	var record, expect string
	fs.StringVar(&cfg.Scenario, "scenario", simulate.ScenarioCompleted,
		"scenario of every turn unless a user message says [[SCENARIO:name]]: "+strings.Join(simulate.Scenarios(), ", "))
	fs.StringVar(&cfg.Dialect, "dialect", simulate.DialectCBC, "stream dialect: cbc or claude")
	fs.Float64Var(&cfg.Speed, "speed", 1, "time scale: 1 = realistic delays, 0 = no delays")
	fs.Int64Var(&cfg.Seed, "seed", 1, "seed of ids and noise")
	fs.Int64Var(&cfg.Epoch, "epoch", 0, "if set, timestamps come from a virtual clock starting at this epoch ms (reproducible output)")
	fs.IntVar(&cfg.Agents, "agents", 50, "number of agents of the many-agents scenario")
	fs.IntVar(&cfg.Noise, "noise", 8<<10, "size in bytes of the large assistant messages interleaved (0 = none)")
	fs.IntVar(&cfg.InterruptAfter, "interrupt-after", 0, "test aid: interrupt itself after the Nth agent start (0 = never)")
	fs.StringVar(&record, "record", "", "also write every stdout byte to this file")
	fs.StringVar(&expect, "expect", "", "write the ground truth, one JSON line per task run, to this file")
	simulate.IgnoreCLIFlags(fs)
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(sio.err, "cbc-otel simulate: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(sio.err, "cbc-otel simulate: %v\n", err)
		return exitUsage
	}

	out := sio.out
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	if record != "" {
		f, err := os.Create(record)
		if err != nil {
			fmt.Fprintf(sio.err, "cbc-otel simulate: %v\n", err)
			return exitFailure
		}
		closers = append(closers, f)
		out = io.MultiWriter(out, f)
	}
	if expect != "" {
		f, err := os.Create(expect)
		if err != nil {
			fmt.Fprintf(sio.err, "cbc-otel simulate: %v\n", err)
			return exitFailure
		}
		closers = append(closers, f)
		cfg.Expect = f
	}
	err := simulate.Run(ctx, cfg, sio.in, out)
	for _, c := range closers {
		if cerr := c.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	closers = nil
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, context.Canceled):
		return exitSignalled
	default:
		fmt.Fprintf(sio.err, "cbc-otel simulate: %v\n", err)
		return exitFailure
	}
}
