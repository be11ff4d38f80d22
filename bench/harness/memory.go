package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/cbc-otel/cbc-otel/bench/internal/procstat"
	"github.com/cbc-otel/cbc-otel/bench/internal/streamgen"
)

// memoryLimitKB is the bound of the wrapper's peak RSS (32 MiB).
const memoryLimitKB = 32 << 10

// memory measures the peak RSS of `cbc-otel run -- cat` (telemetry on) while
// the harness streams, generated on the fly, a long mixed stream and a single
// huge line into its stdin and reads them back from its stdout: nothing is
// stored on disk. The figure is the wrapper's own VmHWM, polled while it
// runs (see hwmWatcher). Then the state attack of the chaos suite (see
// memoryAttack): the state the wrapper must bound rather than the bytes.
func memory(ctx context.Context, c *config, rep *report) error {
	tdir := filepath.Join(c.work, "telemetry")
	if err := os.MkdirAll(tdir, 0o755); err != nil {
		return fmt.Errorf("telemetry dir: %w", err)
	}
	defer os.RemoveAll(tdir)
	cases := []struct {
		name string
		size int64
		gen  func(io.Writer, int64, uint64) (int64, error)
	}{
		{fmt.Sprintf("%d MiB mixed stream", c.memMB), c.memMB << 20, streamgen.Mixed},
		{fmt.Sprintf("one line of %d MiB", c.lineMB), c.lineMB << 20, streamgen.OneLine},
	}
	runs := min(c.runs, 3)
	for _, cs := range cases {
		var rss, wall []float64
		for i := range runs {
			tel, err := telemetryOn(c.names, tdir, fmt.Sprintf("mem-%d", i))
			if err != nil {
				return err
			}
			m, err := streamThrough(ctx, append(append([]string{"run"}, tel...), "--", "cat"), c.bin, cs.size, cs.gen)
			if err != nil {
				return fmt.Errorf("%s: %w", cs.name, err)
			}
			rss = append(rss, float64(m.maxRSSKB)/1024)
			wall = append(wall, m.wall.Seconds())
		}
		peak := median(rss)
		rep.addTarget("memory", "run peak RSS, "+cs.name, fmt.Sprintf("%.1f MiB%s, in %.1f s", peak, spread(rss, "%.1f"), median(wall)),
			"≤ 32 MiB", peak*1024 <= memoryLimitKB)
	}
	return memoryAttack(ctx, c, rep, tdir)
}

// streamThrough starts bin with args, writes gen's bytes to its stdin while
// counting what comes back on its stdout, and checks that every byte did.
func streamThrough(ctx context.Context, args []string, bin string, size int64, gen func(io.Writer, int64, uint64) (int64, error)) (measured, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return measured{}, fmt.Errorf("stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return measured{}, fmt.Errorf("stdout: %w", err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return measured{}, fmt.Errorf("start: %w", err)
	}
	hwm := procstat.WatchHWM(cmd.Process.Pid)
	read := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(io.Discard, stdout)
		read <- n
	}()
	sent, genErr := gen(stdin, size, 3)
	if err := stdin.Close(); genErr == nil && err != nil {
		genErr = fmt.Errorf("close stdin: %w", err)
	}
	got := <-read
	peak := hwm.PeakKB()
	waitErr := cmd.Wait()
	if genErr != nil {
		return measured{}, genErr
	}
	if waitErr != nil {
		return measured{}, fmt.Errorf("%s: %w", cmd.String(), waitErr)
	}
	if got != sent {
		return measured{}, fmt.Errorf("sent %d bytes, got %d back", sent, got)
	}
	m := measuredOf(cmd, time.Since(start))
	m.maxRSSKB = peak
	return m, nil
}
