package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cbc-otel/cbc-otel/bench/internal/streamgen"
)

// Fixed inputs: the same seeds and epochs give the same bytes on every run.
const (
	mixedSeed = 1
	simSeed   = 7
	simEpoch  = 1785000000000
	// bytesPerRun is about what one simulated workflow run of the task-heavy
	// mix weighs (noise off); it turns a target size into a fixed run count,
	// so the stream does not depend on timing.
	bytesPerRun = 15500
)

// taskScenarios are cycled through by the task-heavy stream: every run is a
// workflow task, so every terminal notification is a workflow's and all
// three consumers count the same thing. (The stopped scenario needs an
// interrupt timed against the run, which a file fed to simulate cannot do.)
var taskScenarios = []string{"completed", "failed", "completed", "cached"}

// mixedFile returns the path of the mixed stream of sizeMB MiB, generating it
// if the work directory does not hold it yet.
func mixedFile(c *config, sizeMB int64) (string, error) {
	path := filepath.Join(c.work, fmt.Sprintf("mixed-%dm-seed%d.ndjson", sizeMB, mixedSeed))
	if fileExists(path) {
		return path, nil
	}
	c.log.Info("generating mixed stream", "MiB", sizeMB)
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return "", fmt.Errorf("mixed stream: %w", err)
	}
	if _, err := streamgen.Mixed(f, sizeMB<<20, mixedSeed); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("mixed stream: %w", err)
	}
	return path, os.Rename(path+".tmp", path)
}

// taskFile returns the path of the task-heavy stream of about sizeMB MiB:
// `cbc-otel simulate` (no delays, virtual clock, no noise) driven with one
// user message per workflow run, cycling through taskScenarios.
func taskFile(ctx context.Context, c *config, sizeMB int64) (string, error) {
	runs := int(sizeMB << 20 / bytesPerRun)
	path := filepath.Join(c.work, fmt.Sprintf("tasks-%druns-seed%d-cfcc.ndjson", runs, simSeed))
	if fileExists(path) {
		return path, nil
	}
	c.log.Info("generating task-heavy stream with cbc-otel simulate", "runs", runs)
	in := filepath.Join(c.work, "tasks-input.ndjson")
	f, err := os.Create(in)
	if err != nil {
		return "", fmt.Errorf("simulate input: %w", err)
	}
	w := bufio.NewWriter(f)
	for i := range runs {
		fmt.Fprintf(w, `{"type":"user","message":{"role":"user","content":"[[SCENARIO:%s]] task %d"}}`+"\n", taskScenarios[i%len(taskScenarios)], i)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return "", fmt.Errorf("simulate input: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("simulate input: %w", err)
	}
	defer os.Remove(in)
	return path, simulate(ctx, c, path, in, "-noise", "0")
}

// interleavedFile returns the path of the mixed replay stream made from
// the task-heavy stream at tasks (streamgen.Interleave: its lines with
// large conversation lines between them, about as many bytes again),
// generating it if the work directory does not hold it yet.
func interleavedFile(c *config, tasks string) (string, error) {
	path := strings.TrimSuffix(tasks, ".ndjson") + fmt.Sprintf("-interleaved-seed%d.ndjson", mixedSeed)
	if fileExists(path) {
		return path, nil
	}
	c.log.Info("generating the mixed replay stream", "from", filepath.Base(tasks))
	in, err := os.Open(tasks)
	if err != nil {
		return "", fmt.Errorf("mixed replay stream: %w", err)
	}
	defer in.Close()
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return "", fmt.Errorf("mixed replay stream: %w", err)
	}
	if _, err := streamgen.Interleave(f, in, mixedSeed); err != nil {
		f.Close()
		os.Remove(path + ".tmp")
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("mixed replay stream: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return "", fmt.Errorf("mixed replay stream: %w", err)
	}
	return path, nil
}

// agentsFile returns the path of one many-agents workflow with n agents.
func agentsFile(ctx context.Context, c *config, n int) (string, error) {
	path := filepath.Join(c.work, fmt.Sprintf("agents-%d-seed%d.ndjson", n, simSeed))
	if fileExists(path) {
		return path, nil
	}
	in := filepath.Join(c.work, "agents-input.ndjson")
	if err := os.WriteFile(in, []byte(`{"type":"user","message":{"role":"user","content":"scale"}}`+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("simulate input: %w", err)
	}
	defer os.Remove(in)
	return path, simulate(ctx, c, path, in, "-noise", "0", "-scenario", "many-agents", "-agents", strconv.Itoa(n))
}

// simulate runs `cbc-otel simulate` with stdin from the file in and writes
// its stdout to out (through a temporary name, so a half file is never reused).
func simulate(ctx context.Context, c *config, out, in string, args ...string) error {
	stdin, err := os.Open(in)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	defer stdin.Close()
	stdout, err := os.Create(out + ".tmp")
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	argv := append([]string{"simulate", "-speed", "0", "-seed", strconv.Itoa(simSeed), "-epoch", strconv.Itoa(simEpoch)}, args...)
	cmd := exec.CommandContext(ctx, c.bin, argv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, os.Stderr
	runErr := cmd.Run()
	if err := stdout.Close(); err != nil && runErr == nil {
		runErr = err
	}
	if runErr != nil {
		os.Remove(out + ".tmp")
		return fmt.Errorf("cbc-otel simulate %v: %w", argv, runErr)
	}
	return os.Rename(out+".tmp", out)
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

func fileSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("stat: %w", err)
	}
	return st.Size(), nil
}

// warm reads path once so that every case starts from the page cache.
func warm(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("warm: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Read(buf); err != nil {
			return nil
		}
	}
}

// freePort returns a loopback port free at the time of the call.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// telemetryOn returns the flags of `run` with telemetry fully on: the
// /metrics endpoint on a loopback port, spans written to a file as OTLP/JSON,
// the final metrics and the runs' summary written to files at exit. The spool
// (a copy of the whole stream to disk, the serve deployment) stays off: it is
// another mode, not more telemetry. Files land under dir with the given tag.
func telemetryOn(n flagNames, dir, tag string) ([]string, error) {
	flags, _, err := telemetryOnAt(n, dir, tag)
	return flags, err
}

// telemetryOnAt is telemetryOn that also returns the host:port of the web
// listener (/metrics and the runs page), for a case that scrapes it.
func telemetryOnAt(n flagNames, dir, tag string) ([]string, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	return []string{
		"--web.listen-address", addr,
		n.of("traces.file", "traces-file"), filepath.Join(dir, tag+"-traces.jsonl"),
		n.of("metrics.file", "metrics-file"), filepath.Join(dir, tag+"-metrics.prom"),
		n.of("summary.file", "summary-file"), filepath.Join(dir, tag+"-summary.json"),
	}, addr, nil
}

// measured is what one process (and the children it waited for) cost.
type measured struct {
	wall     time.Duration
	cpu      time.Duration // user + system
	maxRSSKB int64         // the largest of the process and its waited-for children
}

// timed runs cmd to completion and measures it.
func timed(cmd *exec.Cmd) (measured, error) {
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return measured{}, fmt.Errorf("%s: %w", cmd.String(), err)
	}
	return measuredOf(cmd, time.Since(start)), nil
}

func measuredOf(cmd *exec.Cmd, wall time.Duration) measured {
	m := measured{wall: wall}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		m.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		m.maxRSSKB = ru.Maxrss
	}
	return m
}
