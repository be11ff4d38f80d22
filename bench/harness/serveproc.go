// serveProc runs `cbc-otel serve` for the benchmark harness and
// watches it from outside, as a deployment would: its /metrics (how many
// lines it has counted) and its peak RSS, and stops it with SIGTERM. The
// cpu section's serve cases share it: each waits until serve has taken in
// what was written before it reads serve's CPU.
// (Folded from bench/internal/serveproc: the harness is its one user.)

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/cbc-otel/cbc-otel/bench/internal/procstat"
	"github.com/cbc-otel/cbc-otel/bench/internal/promtext"
)

// serveProc is a running `cbc-otel serve`.
type serveProc struct {
	cmd     *exec.Cmd
	url     string // its /metrics
	logPath string
	exited  chan error
	done    bool // exited has been read
	hwm     *procstat.HWMWatcher
	client  *http.Client
	stopped bool // Stop has run: peak and stopErr are its result
	peak    int64
	stopErr error
}

// startServeProc starts `serve` of the binary bin with args and a /metrics endpoint
// on the loopback port; its stderr goes to a log file named from tag in dir,
// next to its other files.
func startServeProc(ctx context.Context, bin string, port int, args []string, dir, tag string) (*serveProc, error) {
	logPath := filepath.Join(dir, tag+"-serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("serve log: %w", err)
	}
	defer logf.Close() // the child holds its own descriptor
	argv := append([]string{"serve", "--web.listen-address", "127.0.0.1:" + strconv.Itoa(port)}, args...)
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start serve: %w", err)
	}
	s := &serveProc{
		cmd: cmd, url: fmt.Sprintf("http://127.0.0.1:%d/metrics", port), logPath: logPath,
		exited: make(chan error, 1), hwm: procstat.WatchHWM(cmd.Process.Pid),
		client: &http.Client{Timeout: 2 * time.Second},
	}
	go func() { s.exited <- cmd.Wait() }()
	return s, nil
}

// Metric scrapes serve's /metrics for the sum of one metric's samples.
func (s *serveProc) Metric(name string) (float64, error) {
	resp, err := s.client.Get(s.url)
	if err != nil {
		return 0, fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape: %s", resp.Status)
	}
	v, found, err := promtext.Sum(resp.Body, name)
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("serve's /metrics has no %s", name)
	}
	return v, nil
}

// linesCounted is serve's cbc_otel_lines_total over every source.
func (s *serveProc) linesCounted() (int64, error) {
	n, err := s.Metric("cbc_otel_lines_total")
	return int64(n), err
}

// WaitLines polls /metrics every 50 ms (often enough to stop soon after
// the last line, seldom enough that the scrapes cost serve little) until
// serve has counted want lines. It returns the last count, and an error
// if serve exits or the deadline passes first (the count is then < want).
func (s *serveProc) WaitLines(ctx context.Context, want int64, within time.Duration) (int64, error) {
	deadline := time.Now().Add(within)
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	var got int64
	for {
		n, err := s.linesCounted()
		if err == nil {
			got = n
			if got >= want {
				return got, nil
			}
		}
		if time.Now().After(deadline) {
			return got, fmt.Errorf("serve counted %d of %d lines within %s (last scrape error: %v)", got, want, within, err)
		}
		select {
		case <-poll.C:
		case err := <-s.exited:
			s.done = true
			return got, fmt.Errorf("serve exited (%v) having counted %d of %d lines; see %s", err, got, want, s.logPath)
		case <-ctx.Done():
			return got, ctx.Err()
		}
	}
}

// Stop sends SIGTERM, waits up to 10 s for a clean exit (then kills), and
// returns serve's peak VmHWM and its exit error. Later calls return the
// same, so it can also be deferred for the error paths.
func (s *serveProc) Stop() (int64, error) {
	if s.stopped {
		return s.peak, s.stopErr
	}
	s.stopped = true
	var err error
	if !s.done {
		s.done = true
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err = <-s.exited:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Kill()
			<-s.exited
			err = errors.New("serve did not stop within 10 s of SIGTERM")
		}
	}
	s.peak = s.hwm.PeakKB()
	if err != nil {
		s.stopErr = fmt.Errorf("serve: %w; see %s", err, s.logPath)
	}
	return s.peak, s.stopErr
}

// Pid is serve's process id, for its CPU and memory in /proc.
func (s *serveProc) Pid() int { return s.cmd.Process.Pid }
