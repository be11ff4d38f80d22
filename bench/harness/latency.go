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
	"strings"
	"time"
)

// stampField precedes the send time (wall clock, Unix ns, 19 digits) in
// every latency line. The wall clock, not a monotonic one, because in the
// stdout cases the sender is another process; both sides read the same
// CLOCK_REALTIME of this machine.
const stampField = `"t":`

// envLatGen makes the harness binary a line generator (the child of the
// stdout cases): "RATE:DURATION". It writes a warm-up line, waits for one
// byte on stdin, then writes stamped lines at RATE for DURATION.
const envLatGen = "CBC_BENCH_LATGEN"

// The latency cases. "rt" cases send lines into the stdin of cat and read
// them back (through run a line crosses both pumps); "out" cases have the
// child write the lines itself, which is the CLI's own path: one pipe hop
// without the wrapper, the stdout pump with it.
var latencyKinds = []struct{ name, desc string }{
	{"out-pipe", "stdout: gen | reader"},
	{"out-run", "stdout: run -- gen | reader"},
	{"rt-pipe", "round trip: cat"},
	{"rt-run", "round trip: run -- cat"},
}

// latency measures receive − send per line at fixed rates, with and
// without the wrapper, in both set-ups above.
func latency(ctx context.Context, c *config, rep *report) error {
	tdir := filepath.Join(c.work, "telemetry")
	if err := os.MkdirAll(tdir, 0o755); err != nil {
		return fmt.Errorf("telemetry dir: %w", err)
	}
	defer os.RemoveAll(tdir)
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("the harness binary (generator): %w", err)
	}
	type key struct {
		rate int
		kind string
	}
	p50, p99, pmax := map[key][]float64{}, map[key][]float64{}, map[key][]float64{}
	for i := range c.runs {
		for _, rate := range c.rates {
			for _, k := range latencyKinds {
				var run []string
				if strings.HasSuffix(k.name, "-run") {
					tel, err := telemetryOn(tdir, fmt.Sprintf("lat-%s-%d-%d", k.name, rate, i))
					if err != nil {
						return err
					}
					run = append(append([]string{c.bin, "run"}, tel...), "--")
				}
				var lats []int64
				var err error
				if strings.HasPrefix(k.name, "out-") {
					env := envLatGen + "=" + strconv.Itoa(rate) + ":" + c.latDur.String()
					lats, err = latencyOut(ctx, append(run, self), env, rate, c.latDur)
				} else {
					lats, err = latencyRoundTrip(ctx, append(run, "cat"), rate, c.latDur)
				}
				if err != nil {
					return fmt.Errorf("%s at %d lines/s: %w", k.desc, rate, err)
				}
				kk := key{rate, k.name}
				p50[kk] = append(p50[kk], float64(percentile(lats, 50))/1e3)
				p99[kk] = append(p99[kk], float64(percentile(lats, 99))/1e3)
				pmax[kk] = append(pmax[kk], float64(lats[len(lats)-1])/1e3)
			}
		}
	}
	for _, rate := range c.rates {
		sec := fmt.Sprintf("latency %dk lines/s", rate/1000)
		for _, k := range latencyKinds {
			kk := key{rate, k.name}
			rep.add(sec, k.desc+": p50 / p99 / max (µs)", fmt.Sprintf("%.0f / %.0f / %.0f", median(p50[kk]), median(p99[kk]), median(pmax[kk])))
		}
		for _, dir := range []struct{ prefix, what string }{{"out", "stdout (the CLI's path)"}, {"rt", "round trip (stdin and stdout pumps)"}} {
			run, pipe := key{rate, dir.prefix + "-run"}, key{rate, dir.prefix + "-pipe"}
			rep.add(sec, "added p50, "+dir.what, fmt.Sprintf("%.0f µs", median(p50[run])-median(p50[pipe])))
			added := median(p99[run]) - median(p99[pipe])
			if rate == 10000 && dir.prefix == "out" {
				rep.addTarget(sec, "added p99, "+dir.what, fmt.Sprintf("%.0f µs", added), "≤ 100 µs", added <= 100)
			} else {
				rep.add(sec, "added p99, "+dir.what, fmt.Sprintf("%.0f µs", added))
			}
		}
	}
	rep.note("latency: %s of ~190-byte task_progress lines per rate and case, one write per line paced by a 1 ms ticker (a burst of rate/1000 lines per tick, each stamped as written), after a warm-up line has made the trip; stdout cases: the harness itself (%s) is the child writing the lines, read from its stdout directly or through `run`; round-trip cases: lines sent into `cat` or `run -- cat` and read back (two pumps)", c.latDur, envLatGen)
	return nil
}

// stampLine appends one stamped line to buf.
func stampLine(buf []byte, seq int) []byte {
	return fmt.Appendf(buf[:0], `{"type":"system","subtype":"task_progress","task_id":"lat-1","session_id":"bench","seq":%d,%s%019d,"description":"%s"}`+"\n",
		seq, stampField, time.Now().UnixNano(), latencyPad)
}

var latencyPad = strings.Repeat("x", 64)

// pace calls write for seq 0..total-1 at rate per second: every
// millisecond, the lines that are due.
func pace(ctx context.Context, rate int, dur time.Duration, write func(seq int) error) error {
	total := int(int64(rate) * int64(dur) / int64(time.Second))
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for sent := 0; sent < total; {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		due := min(total, int(int64(time.Since(start))*int64(rate)/int64(time.Second)))
		for ; sent < due; sent++ {
			if err := write(sent); err != nil {
				return fmt.Errorf("write: %w", err)
			}
		}
	}
	return nil
}

// latencyGenMain is the generator child: spec is "RATE:DURATION".
func latencyGenMain(spec string) int {
	r, d, _ := strings.Cut(spec, ":")
	rate, err1 := strconv.Atoi(r)
	dur, err2 := time.ParseDuration(d)
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, "latency generator:", err)
		return 2
	}
	out := os.Stdout
	buf := make([]byte, 0, 256)
	if _, err := out.Write(stampLine(buf, -1)); err != nil {
		return 1
	}
	// The reader has the warm-up line: start.
	if _, err := os.Stdin.Read(make([]byte, 1)); err != nil {
		fmt.Fprintln(os.Stderr, "latency generator: no go-ahead:", err)
		return 1
	}
	err := pace(context.Background(), rate, dur, func(seq int) error {
		buf = stampLine(buf, seq)
		_, err := out.Write(buf)
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "latency generator:", err)
		return 1
	}
	return 0
}

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
	if _, err := s.stdin.Write(stampLine(buf, -1)); err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	if err := s.warm(); err != nil {
		return nil, err
	}
	if err := pace(ctx, rate, dur, func(seq int) error {
		buf = stampLine(buf, seq)
		_, err := s.stdin.Write(buf)
		return err
	}); err != nil {
		return nil, err
	}
	return s.finish(total)
}

// latencyOut starts argv, whose last element is the generator (this
// binary, with env), gives it the go-ahead once its warm-up line arrived,
// and returns the sorted receive − send of every line it wrote, in ns.
func latencyOut(ctx context.Context, argv []string, env string, rate int, dur time.Duration) ([]int64, error) {
	total := int(int64(rate) * int64(dur) / int64(time.Second))
	s, err := startLatency(ctx, argv, env, total)
	if err != nil {
		return nil, err
	}
	defer s.abandon()
	if err := s.warm(); err != nil {
		return nil, err
	}
	if _, err := s.stdin.Write([]byte("g")); err != nil {
		return nil, fmt.Errorf("go-ahead: %w", err)
	}
	// The generator ends by itself; stdin is closed only after it has.
	select {
	case err := <-s.done:
		s.ended = true
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.finish(total)
}
