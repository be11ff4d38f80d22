package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// stampField precedes the send time (ns since the run's base, 19 digits) in
// every latency line.
const stampField = `"t":`

// latency writes timestamped lines at fixed rates into the stdin of
// `cbc-otel run -- cat` and of a plain `cat`, reads them back from their
// stdout, and reports receive − send per line. Through run a line crosses
// both pumps (stdin and stdout), so the added figure is an upper bound of
// what the wrapper adds to the stdout direction alone.
func latency(ctx context.Context, c *config, rep *report) error {
	tdir := filepath.Join(c.work, "telemetry")
	if err := os.MkdirAll(tdir, 0o755); err != nil {
		return fmt.Errorf("telemetry dir: %w", err)
	}
	defer os.RemoveAll(tdir)
	type key struct {
		rate int
		kind string
	}
	p50, p99, pmax := map[key][]float64{}, map[key][]float64{}, map[key][]float64{}
	for i := range c.runs {
		for _, rate := range c.rates {
			for _, kind := range []string{"pipe", "run"} {
				argv := []string{"cat"}
				if kind == "run" {
					tel, err := telemetryOn(tdir, fmt.Sprintf("lat-%d-%d", rate, i))
					if err != nil {
						return err
					}
					argv = append(append(append([]string{c.bin, "run"}, tel...), "--"), "cat")
				}
				lats, err := latencyRun(ctx, argv, rate, c.latDur)
				if err != nil {
					return fmt.Errorf("%s at %d lines/s: %w", kind, rate, err)
				}
				k := key{rate, kind}
				p50[k] = append(p50[k], float64(percentile(lats, 50))/1e3)
				p99[k] = append(p99[k], float64(percentile(lats, 99))/1e3)
				pmax[k] = append(pmax[k], float64(lats[len(lats)-1])/1e3)
			}
		}
	}
	for _, rate := range c.rates {
		sec := fmt.Sprintf("latency %dk lines/s", rate/1000)
		for _, kind := range []string{"pipe", "run"} {
			k := key{rate, kind}
			rep.add(sec, kind+": p50 / p99 / max (µs)", fmt.Sprintf("%.0f / %.0f / %.0f", median(p50[k]), median(p99[k]), median(pmax[k])))
		}
		run, pipe := key{rate, "run"}, key{rate, "pipe"}
		rep.add(sec, "added p50 (run − pipe)", fmt.Sprintf("%.0f µs", median(p50[run])-median(p50[pipe])))
		added := median(p99[run]) - median(p99[pipe])
		if rate == 10000 {
			rep.addTarget(sec, "added p99 (run − pipe)", fmt.Sprintf("%.0f µs", added), "≤ 100 µs", added <= 100)
		} else {
			rep.add(sec, "added p99 (run − pipe)", fmt.Sprintf("%.0f µs", added))
		}
	}
	rep.note("latency: %s of ~190-byte task_progress lines per rate and case, one write per line paced by a 1 ms ticker (a burst of rate/1000 lines per tick, each stamped as written), after a warm-up line has made the round trip; through `run` a line crosses the stdin and the stdout pump", c.latDur)
	return nil
}

// latencyRun starts argv, sends rate lines/s for dur into its stdin and
// returns the sorted receive − send of every line in nanoseconds.
func latencyRun(ctx context.Context, argv []string, rate int, dur time.Duration) ([]int64, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %v: %w", argv, err)
	}
	waited := false
	defer func() {
		if !waited { // an error path: do not leave the child behind
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()

	total := int(int64(rate) * int64(dur) / int64(time.Second))
	base := time.Now()
	lats := make([]int64, 0, total)
	done := make(chan error, 1)
	warmed := make(chan struct{})
	go func() {
		r := bufio.NewReaderSize(stdout, 1<<16)
		first := true
		for {
			line, err := r.ReadSlice('\n')
			if errors.Is(err, io.EOF) && len(line) == 0 {
				done <- nil
				return
			}
			if err != nil {
				done <- fmt.Errorf("read: %w", err)
				return
			}
			now := time.Since(base).Nanoseconds()
			i := bytes.Index(line, []byte(stampField))
			if i < 0 || len(line) < i+len(stampField)+19 {
				done <- fmt.Errorf("line without a stamp: %.80q", line)
				return
			}
			sent, err := strconv.ParseInt(string(line[i+len(stampField):i+len(stampField)+19]), 10, 64)
			if err != nil {
				done <- fmt.Errorf("bad stamp: %w", err)
				return
			}
			if first {
				first = false
				close(warmed)
				continue
			}
			lats = append(lats, now-sent)
		}
	}()

	pad := bytes.Repeat([]byte("x"), 64)
	buf := make([]byte, 0, 256)
	write := func(seq int) error {
		buf = fmt.Appendf(buf[:0], `{"type":"system","subtype":"task_progress","task_id":"lat-1","session_id":"bench","seq":%d,%s%019d,"description":"%s"}`+"\n",
			seq, stampField, time.Since(base).Nanoseconds(), pad)
		_, err := stdin.Write(buf)
		return err
	}
	// Handshake: the first line makes the round trip before the clock runs,
	// so process start-up is not measured.
	if err := write(-1); err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	select {
	case <-warmed:
	case err := <-done:
		return nil, fmt.Errorf("no warm-up line: %w", err)
	case <-time.After(30 * time.Second):
		return nil, errors.New("warm-up line did not come back within 30 s")
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for sent := 0; sent < total; {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		due := min(total, int(int64(time.Since(start))*int64(rate)/int64(time.Second)))
		for ; sent < due; sent++ {
			if err := write(sent); err != nil {
				return nil, fmt.Errorf("write: %w", err)
			}
		}
	}
	if err := stdin.Close(); err != nil {
		return nil, fmt.Errorf("close stdin: %w", err)
	}
	if err := <-done; err != nil {
		return nil, err
	}
	waited = true
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("%v: %w", argv, err)
	}
	if len(lats) != total {
		return nil, fmt.Errorf("sent %d lines, received %d", total, len(lats))
	}
	slices.Sort(lats)
	return lats, nil
}
