// The latency probe (latencyRoundTrip, latencyOut) measures the latency a
// command adds to lines: it reads the stamped probe lines of pacegen back
// from the command's stdout and takes receive − send of each (both stamps from this machine's wall
// clock), the lines either sent into the command's stdin (a round trip) or
// written by the command's own child (the stdout path of a wrapped CLI).
// (Folded from bench/internal/latprobe: the harness is its one user.)

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
	"slices"
	"strconv"
	"time"

	"github.com/cbc-otel/cbc-otel/bench/internal/pacegen"
)

// startReader reads stamped lines from r: the first (warm-up) one closes
// warmed, every other one appends receive − send to *lats; done gets the
// end (nil at EOF).
func startReader(r io.Reader, lats *[]int64, warmed chan<- struct{}, done chan<- error) {
	go func() {
		br := bufio.NewReaderSize(r, 1<<16)
		first := true
		for {
			line, err := br.ReadSlice('\n')
			if errors.Is(err, io.EOF) && len(line) == 0 {
				done <- nil
				return
			}
			if err != nil {
				done <- fmt.Errorf("read: %w", err)
				return
			}
			now := time.Now().UnixNano()
			i := bytes.Index(line, []byte(pacegen.StampField))
			if i < 0 || len(line) < i+len(pacegen.StampField)+19 {
				done <- fmt.Errorf("line without a stamp: %.80q", line)
				return
			}
			sent, err := strconv.ParseInt(string(line[i+len(pacegen.StampField):i+len(pacegen.StampField)+19]), 10, 64)
			if err != nil {
				done <- fmt.Errorf("bad stamp: %w", err)
				return
			}
			if first {
				first = false
				close(warmed)
				continue
			}
			*lats = append(*lats, now-sent)
		}
	}()
}

// started is a started latency case: the process with its pipes.
type started struct {
	cmd           *exec.Cmd
	stdin         io.WriteCloser
	lats          []int64
	warmed        chan struct{}
	done          chan error
	waited, ended bool
}

// startLatency starts argv (with env added to the environment when not
// "") and a reader of its stdout that expects want lines.
func startLatency(ctx context.Context, argv []string, env string, want int) (*started, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	if env != "" {
		cmd.Env = append(os.Environ(), env)
	}
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
	s := &started{cmd: cmd, stdin: stdin, lats: make([]int64, 0, want), warmed: make(chan struct{}), done: make(chan error, 1)}
	startReader(stdout, &s.lats, s.warmed, s.done)
	return s, nil
}

// warm waits for the warm-up line, so process start-up is not measured.
func (s *started) warm() error {
	select {
	case <-s.warmed:
		return nil
	case err := <-s.done:
		s.ended = true
		return fmt.Errorf("no warm-up line: %w", err)
	case <-time.After(30 * time.Second):
		return errors.New("warm-up line did not come through within 30 s")
	}
}

// finish closes stdin, waits for EOF and the process, and returns the
// sorted latencies; want is the number of lines sent.
func (s *started) finish(want int) ([]int64, error) {
	if err := s.stdin.Close(); err != nil {
		return nil, fmt.Errorf("close stdin: %w", err)
	}
	if !s.ended {
		if err := <-s.done; err != nil {
			return nil, err
		}
	}
	s.waited = true
	if err := s.cmd.Wait(); err != nil {
		return nil, fmt.Errorf("%v: %w", s.cmd.Args, err)
	}
	if len(s.lats) != want {
		return nil, fmt.Errorf("sent %d lines, received %d", want, len(s.lats))
	}
	slices.Sort(s.lats)
	return s.lats, nil
}

// abandon kills a case left on an error path.
func (s *started) abandon() {
	if !s.waited {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// latencyRoundTrip starts argv (cat, or run -- cat), sends rate lines/s for
// dur into its stdin and returns the sorted receive − send of every line,
// in ns.
func latencyRoundTrip(ctx context.Context, argv []string, rate int, dur time.Duration) ([]int64, error) {
	total := int(int64(rate) * int64(dur) / int64(time.Second))
	s, err := startLatency(ctx, argv, "", total)
	if err != nil {
		return nil, err
	}
	defer s.abandon()
	buf := make([]byte, 0, 256)
	if _, err := s.stdin.Write(pacegen.StampLine(buf, -1)); err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	if err := s.warm(); err != nil {
		return nil, err
	}
	if err := pacegen.Pace(ctx, rate, dur, func(seq int) error {
		buf = pacegen.StampLine(buf, seq)
		_, err := s.stdin.Write(buf)
		return err
	}); err != nil {
		return nil, err
	}
	return s.finish(total)
}

// latencyOut starts argv, whose last element is the generator (the harness binary,
// with env: pacegen.LatencyGenMain), gives it the go-ahead once its warm-up
// line arrived, and returns the sorted receive − send of every line it
// wrote, in ns.
// With web (the host:port of run's listener) a poller scrapes the runs
// page and /metrics while the lines flow, and its counts are returned.
func latencyOut(ctx context.Context, argv []string, env string, rate int, dur time.Duration, web string) ([]int64, webStats, error) {
	total := int(int64(rate) * int64(dur) / int64(time.Second))
	s, err := startLatency(ctx, argv, env, total)
	if err != nil {
		return nil, webStats{}, err
	}
	defer s.abandon()
	if err := s.warm(); err != nil {
		return nil, webStats{}, err
	}
	var ws webStats
	stopPoll := func() webStats { return webStats{} }
	if web != "" {
		stopPoll = pollWeb(ctx, web)
	}
	if _, err := s.stdin.Write([]byte("g")); err != nil {
		stopPoll()
		return nil, ws, fmt.Errorf("go-ahead: %w", err)
	}
	// The generator ends by itself; stdin is closed only after it has.
	select {
	case err := <-s.done:
		s.ended = true
		ws = stopPoll()
		if err != nil {
			return nil, ws, err
		}
	case <-ctx.Done():
		stopPoll()
		return nil, ws, ctx.Err()
	}
	lats, err := s.finish(total)
	return lats, ws, err
}
