package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/cbc-otel/cbc-otel/bench/internal/procstat"
	"github.com/cbc-otel/cbc-otel/bench/internal/promtext"
	"github.com/cbc-otel/cbc-otel/internal/attackgen"
)

// attackRate is the pace of the state attack, bytes per second: the chaos
// suite's memRate, brisk for a CLI and slow enough that the tap's queue
// keeps up, so every line reaches the Tracker and the peak is that of the
// whole state (a dropped byte would make the figure one of less state).
const attackRate = 4 << 20

// attackResult is what one run of the state attack measured.
type attackResult struct {
	peakKB  int64
	wall    time.Duration
	lines   float64 // stdout lines the wrapper counted (--metrics.file)
	dropped float64 // bytes its tap dropped
	overCap float64 // over_capacity violations: the caps at work
}

// memoryAttack measures the peak RSS of `run` under the chaos suite's state
// attack (internal/attackgen: workflow runs opened and never closed, then
// one huge snapshot of a fresh run), its child writing the stream to stdout
// at attackRate. With -quick the attack is small (5,000 runs, a 2,000-agent
// snapshot), only a check that the case works.
func memoryAttack(ctx context.Context, c *config, rep *report, tdir string) error {
	spec := attackgen.Default()
	if c.quick {
		spec = attackgen.Spec{OpenRuns: 5000, WorkflowNames: 300, SnapshotAgents: 2000, SnapshotPhases: 8}
	}
	path, lines, err := attackFile(c, spec)
	if err != nil {
		return err
	}
	size, err := fileSize(path)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%d open runs + a %d-agent snapshot", spec.OpenRuns, spec.SnapshotAgents)
	var rss, wall []float64
	var worstDrop float64
	worstLines := float64(lines)
	// The caps are judged, as in the chaos suite, on the last run whose
	// tap dropped nothing: a drop loses lines and makes the counts inexact.
	clean := -1.0
	for i := range min(c.runs, 3) {
		r, err := attackOnce(ctx, c, path, size, filepath.Join(tdir, fmt.Sprintf("attack-%d", i)))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		c.log.Info("state attack", "run", i+1, "peak_MiB", float64(r.peakKB)/1024, "wall", r.wall.Round(10*time.Millisecond),
			"lines", r.lines, "dropped_bytes", r.dropped, "over_capacity", r.overCap)
		rss = append(rss, float64(r.peakKB)/1024)
		wall = append(wall, r.wall.Seconds())
		worstDrop = max(worstDrop, r.dropped)
		worstLines = min(worstLines, r.lines)
		if r.dropped > 0 || r.lines != float64(lines) {
			rep.note("memory, %s, run %d: the tap dropped %.0f bytes (%.0f of %d lines counted): that run's peak is of less state than the stream holds, or of a queue that filled", name, i+1, r.dropped, r.lines, lines)
		} else {
			clean = r.overCap
		}
	}
	peak := median(rss)
	rep.addTarget("memory", "run peak RSS, "+name, fmt.Sprintf("%.1f MiB%s, in %.1f s", peak, spread(rss, "%.1f"), median(wall)),
		"≤ 32 MiB", peak*1024 <= memoryLimitKB)
	overCap := "- (every run dropped)"
	if clean >= 0 {
		overCap = fmt.Sprintf("%.0f", clean)
	}
	rep.add("memory", name+": tap dropped bytes / lines counted, worst run; over_capacity, last run without drops",
		fmt.Sprintf("%.0f / %.0f of %d; %s", worstDrop, worstLines, lines, overCap))
	rep.note("memory, state attack: the stream of chaos/memory_test.go (internal/attackgen, %.0f MiB), written to `run`'s stdout by its child (`cat` of a FIFO the harness feeds at %d MiB/s, so that the tap keeps up); `run` with the /metrics listener and --metrics.file, as in the chaos suite: --summary.file keeps every run seen by design (it grows with the stream), and --traces.file (a span tree per run given up) would make the tap drop at this rate", mib(size), attackRate>>20)
	return nil
}

// attackFile returns the path of the attack spec and its line count,
// generating it if the work directory does not hold it yet.
func attackFile(c *config, spec attackgen.Spec) (string, int, error) {
	path := filepath.Join(c.work, fmt.Sprintf("attack-%druns-%dnames-%dagents-%dphases.ndjson", spec.OpenRuns, spec.WorkflowNames, spec.SnapshotAgents, spec.SnapshotPhases))
	if fileExists(path) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", 0, fmt.Errorf("state attack: %w", err)
		}
		return path, bytes.Count(b, []byte{'\n'}), nil
	}
	c.log.Info("generating the state attack", "runs", spec.OpenRuns, "agents", spec.SnapshotAgents)
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return "", 0, fmt.Errorf("state attack: %w", err)
	}
	lines, _, err := attackgen.Write(f, spec)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("state attack: %w", cerr)
	}
	if err != nil {
		os.Remove(path + ".tmp")
		return "", 0, err
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return "", 0, fmt.Errorf("state attack: %w", err)
	}
	return path, lines, nil
}

// countWriter counts the bytes written to it.
type countWriter struct{ n int64 }

// Write counts p.
func (w *countWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

// attackOnce runs `run -- cat FIFO` once, feeds the FIFO the file at path
// (size bytes) at attackRate, and measures the wrapper. Files of the run
// are named from tag.
func attackOnce(ctx context.Context, c *config, path string, size int64, tag string) (attackResult, error) {
	fifo := tag + ".fifo"
	os.Remove(fifo)
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		return attackResult{}, fmt.Errorf("fifo: %w", err)
	}
	defer os.Remove(fifo)
	port, err := freePort()
	if err != nil {
		return attackResult{}, err
	}
	metricsFile := tag + "-metrics.prom"
	cmd := exec.CommandContext(ctx, c.bin, "run", "--web.listen-address", "127.0.0.1:"+strconv.Itoa(port), c.names.of("metrics.file", "metrics-file"), metricsFile, "--", "cat", fifo)
	out := &countWriter{}
	cmd.Stdout, cmd.Stderr = out, os.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return attackResult{}, fmt.Errorf("start: %w", err)
	}
	hwm := procstat.WatchHWM(cmd.Process.Pid)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	feedErr := feedFIFO(ctx, fifo, path, exited)
	var waitErr error
	if feedErr != nil {
		cmd.Process.Kill()
	}
	waitErr = <-exited
	peak := hwm.PeakKB()
	r := attackResult{peakKB: peak, wall: time.Since(start)}
	if feedErr != nil {
		return r, feedErr
	}
	if waitErr != nil {
		return r, fmt.Errorf("%s: %w", cmd.String(), waitErr)
	}
	if out.n != size {
		return r, fmt.Errorf("sent %d bytes, got %d back", size, out.n)
	}
	b, err := os.ReadFile(metricsFile)
	if err != nil {
		return r, fmt.Errorf("metrics file: %w", err)
	}
	body := string(b)
	if len(body) == 0 {
		return r, errors.New("run wrote an empty metrics file")
	}
	r.lines = promtext.Text(body, "cbc_otel_lines_total", `source="stdout"`)
	r.dropped = promtext.Text(body, "cbc_otel_tap_dropped_bytes_total", "")
	r.overCap = promtext.Text(body, "cbc_protocol_violations_total", `kind="over_capacity"`)
	return r, nil
}

// feedFIFO opens fifo for writing once the child has opened it for reading
// (polling: opening a FIFO blocks until both ends are there, and a child
// that never comes would block the harness), and writes the file at path
// into it at attackRate, then closes it: the child's EOF. exited is the
// wrapper's end; it is put back if seen.
func feedFIFO(ctx context.Context, fifo, path string, exited chan error) error {
	in, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("state attack: %w", err)
	}
	defer in.Close()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(30 * time.Second)
	var w *os.File
	for w == nil {
		// O_NONBLOCK makes the open fail (ENXIO) rather than wait while
		// no reader is there; the *os.File still blocks on full writes
		// (the runtime poller waits for room).
		w, err = os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ENXIO) || time.Now().After(deadline) {
			return fmt.Errorf("open the fifo for the child: %w", err)
		}
		select {
		case <-tick.C:
		case e := <-exited:
			exited <- e
			return fmt.Errorf("run exited (%v) before its child opened the fifo", e)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer w.Close()
	start := time.Now()
	var sent int64
	for {
		due := int64(time.Since(start).Seconds() * attackRate)
		n, err := io.CopyN(w, in, due-sent)
		sent += n
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("feed the fifo: %w", err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("close the fifo: %w", err)
	}
	return nil
}
