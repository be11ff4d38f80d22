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
// without the wrapper, the stdout pump with it. "out-web" is "out-run" as a
// deployment runs it: spans exported over OTLP/gRPC to a live receiver, and
// the runs page and /metrics scraped while the lines flow.
var latencyKinds = []struct{ name, desc string }{
	{"out-pipe", "stdout: gen | reader"},
	{"out-run", "stdout: run -- gen | reader"},
	{"out-web", "stdout: run -- gen (runs page + OTLP) | reader"},
	{"rt-pipe", "round trip: cat"},
	{"rt-run", "round trip: run -- cat"},
}

// latencyTarget is the bound of the added p99 on the stdout path at a line
// rate, in µs; ok is false for a rate that is only informative (100k).
func latencyTarget(rate int) (bound float64, ok bool) {
	switch rate {
	case 1000:
		return 50, true
	case 10000:
		return 100, true
	}
	return 0, false
}

// latencyCycle is how many lines one probe task takes: a task_started,
// task_progress lines, a task_notification. Every cycle ends a plain task,
// which the wrapper exports as a span at once (no grace window): at 10k
// lines/s, 200 spans/s.
const latencyCycle = 50

// latencyQuantiles is what one case measured, in µs.
type latencyQuantiles struct{ p50, p99, max float64 }

// latencyKey names the runs of one case at one rate.
type latencyKey struct {
	rate int
	kind string
}

// latencyBench is what every case of the section shares: the generator
// (this binary), the directory of run's output files, the OTLP receiver.
type latencyBench struct {
	c    *config
	self string
	tdir string
	rcv  *otlpReceiver
}

// latency measures receive − send per line at fixed rates, with and
// without the wrapper, in the set-ups above, interleaved run after run;
// the added latency is taken run by run (each wrapped case against the
// baseline measured just before it) and reported as the median and the
// spread over the runs.
func latency(ctx context.Context, c *config, rep *report) error {
	b := &latencyBench{c: c, tdir: filepath.Join(c.work, "telemetry")}
	if err := os.MkdirAll(b.tdir, 0o755); err != nil {
		return fmt.Errorf("telemetry dir: %w", err)
	}
	defer os.RemoveAll(b.tdir)
	var err error
	if b.self, err = os.Executable(); err != nil {
		return fmt.Errorf("the harness binary (generator): %w", err)
	}
	if b.rcv, err = startOTLPReceiver(); err != nil {
		return err
	}
	defer func() {
		if err := b.rcv.stop(); err != nil {
			c.log.Warn("stopping the OTLP receiver", "err", err)
		}
	}()
	// One run of a case is a few seconds of noise on a shared machine:
	// a median needs at least three, even when -runs asks for fewer.
	runs := c.runs
	if !c.quick {
		runs = max(runs, 3)
	}
	got := map[latencyKey][]latencyQuantiles{}
	webs := map[int][]webStats{}
	for i := range runs {
		for _, rate := range c.rates {
			for _, k := range latencyKinds {
				lats, ws, err := b.measure(ctx, k.name, rate, i)
				if err != nil {
					return fmt.Errorf("%s at %d lines/s: %w", k.desc, rate, err)
				}
				kk := latencyKey{rate, k.name}
				got[kk] = append(got[kk], latencyQuantiles{
					p50: float64(percentile(lats, 50)) / 1e3,
					p99: float64(percentile(lats, 99)) / 1e3,
					max: float64(lats[len(lats)-1]) / 1e3,
				})
				if ws != nil {
					c.log.Info("runs page + OTLP", "rate", rate, "run", i+1, "got", ws.String())
					webs[rate] = append(webs[rate], *ws)
				}
			}
		}
	}
	for _, rate := range c.rates {
		latencyRows(c, rep, rate, got, webs[rate])
	}
	rep.note("latency: ~200-byte task event lines (cycles of %d: a task_started of a plain local_agent task, task_progress lines, its task_notification, so that `run` ends a task and makes a span every %d lines), each stamped (wall clock) as written, %s per run and case at 1k and 10k lines/s, %s at 100k; one write per line paced by a 1 ms ticker (a burst of rate/1000 lines per tick), after a warm-up line has made the trip; %d runs, the cases interleaved in each; stdout cases: the harness itself (%s) is the child writing the lines, read from its stdout directly or through `run`; round-trip cases: lines sent into `cat` or `run -- cat` and read back (two pumps)",
		latencyCycle, latencyCycle, c.latDur, latencyDur(c, 100000), runs, envLatGen)
	rep.note("latency: every `run` has telemetry on (/metrics listener, --traces-file, --metrics-file, --summary-file); `(runs page + OTLP)` adds --otlp.endpoint of a local OTLP/gRPC receiver in the harness, and a poller that GETs the runs page `/` every 1 s and /metrics every 5 s (both once at the start) while the lines flow; added = run − baseline taken run by run (the baseline measured just before in the same run), median over the runs and spread (min–max)")
	return nil
}

// measure runs the case kind once (run i) at rate and returns the sorted
// latencies, in ns, and for the runs page + OTLP case what the poller, the
// receiver and run's final metrics say.
func (b *latencyBench) measure(ctx context.Context, kind string, rate, i int) ([]int64, *webStats, error) {
	dur := latencyDur(b.c, rate)
	tag := fmt.Sprintf("lat-%s-%d-%d", kind, rate, i)
	switch kind {
	case "out-pipe":
		lats, _, err := latencyOut(ctx, []string{b.self}, latGenEnv(rate, dur), rate, dur, "")
		return lats, nil, err
	case "out-run":
		tel, err := telemetryOn(b.tdir, tag)
		if err != nil {
			return nil, nil, err
		}
		lats, _, err := latencyOut(ctx, append(append([]string{b.c.bin, "run"}, tel...), "--", b.self), latGenEnv(rate, dur), rate, dur, "")
		return lats, nil, err
	case "out-web":
		tel, addr, err := telemetryOnAt(b.tdir, tag)
		if err != nil {
			return nil, nil, err
		}
		argv := append(append([]string{b.c.bin, "run"}, tel...), "--otlp.endpoint", b.rcv.addr, "--otlp.protocol", "grpc", "--", b.self)
		before, _ := b.rcv.received()
		lats, ws, err := latencyOut(ctx, argv, latGenEnv(rate, dur), rate, dur, addr)
		if err != nil {
			return nil, nil, err
		}
		// run has exited: its spans were flushed on the way out, and
		// its final metrics say what it dropped.
		after, _ := b.rcv.received()
		ws.spans = after - before
		body, err := os.ReadFile(filepath.Join(b.tdir, tag+"-metrics.prom"))
		if err != nil {
			return nil, nil, fmt.Errorf("run wrote no metrics file: %w", err)
		}
		ws.tapDropped = promText(string(body), "cbc_otel_tap_dropped_bytes_total", "")
		ws.spansDropped = promText(string(body), "cbc_otel_spans_dropped_total", "")
		return lats, &ws, nil
	case "rt-pipe":
		lats, err := latencyRoundTrip(ctx, []string{"cat"}, rate, dur)
		return lats, nil, err
	case "rt-run":
		tel, err := telemetryOn(b.tdir, tag)
		if err != nil {
			return nil, nil, err
		}
		lats, err := latencyRoundTrip(ctx, append(append([]string{b.c.bin, "run"}, tel...), "--", "cat"), rate, dur)
		return lats, nil, err
	}
	return nil, nil, fmt.Errorf("unknown latency case %q", kind)
}

// latencyRows adds the rows of one rate: every case's quantiles, the added
// latencies against their baselines (the stdout ones held to the
// targets), and what the runs page + OTLP case exported and scraped.
func latencyRows(c *config, rep *report, rate int, got map[latencyKey][]latencyQuantiles, ws []webStats) {
	sec := fmt.Sprintf("latency %dk lines/s", rate/1000)
	for _, k := range latencyKinds {
		p50, p99, pmax := quantileSeries(got[latencyKey{rate, k.name}])
		rep.add(sec, k.desc+": p50 / p99 / max (µs)", fmt.Sprintf("%.0f%s / %.0f%s / %.0f",
			median(p50), spread(p50, "%.0f"), median(p99), spread(p99, "%.0f"), median(pmax)))
	}
	for _, cmp := range []struct{ run, base, what string }{
		{"out-run", "out-pipe", "stdout, run -- gen"},
		{"out-web", "out-pipe", "stdout, run -- gen (runs page + OTLP)"},
		{"rt-run", "rt-pipe", "round trip, run -- cat (stdin and stdout pumps)"},
	} {
		a50, a99 := addedSeries(got[latencyKey{rate, cmp.run}], got[latencyKey{rate, cmp.base}])
		rep.add(sec, "added p50, "+cmp.what, fmt.Sprintf("%.0f µs%s", median(a50), spread(a50, "%.0f")))
		m := median(a99)
		v := fmt.Sprintf("%.0f µs%s", m, spread(a99, "%.0f"))
		if bound, ok := latencyTarget(rate); ok && strings.HasPrefix(cmp.run, "out-") {
			rep.addTarget(sec, "added p99, "+cmp.what, v, fmt.Sprintf("≤ %.0f µs", bound), m <= bound)
		} else {
			rep.add(sec, "added p99, "+cmp.what, v)
		}
	}
	var spans, pages, scrapes, failed []float64
	var tapDropped, spansDropped float64
	for i, w := range ws {
		spans = append(spans, float64(w.spans))
		pages = append(pages, float64(w.page))
		scrapes = append(scrapes, float64(w.metrics))
		failed = append(failed, float64(w.failed))
		tapDropped = max(tapDropped, w.tapDropped)
		spansDropped = max(spansDropped, w.spansDropped)
		if w.spans == 0 {
			rep.note("latency %dk lines/s, run %d: the OTLP receiver got NO span from `run -- gen (runs page + OTLP)`", rate/1000, i+1)
		}
		if w.page == 0 {
			rep.note("latency %dk lines/s, run %d: no GET of the runs page succeeded during `run -- gen (runs page + OTLP)`", rate/1000, i+1)
		}
	}
	tasks := int64(rate) * int64(latencyDur(c, rate)) / int64(time.Second) / latencyCycle
	rep.add(sec, "runs page + OTLP: spans received of tasks ended; dropped bytes (tap) and spans, worst run; GETs of / and /metrics (failed), per run",
		fmt.Sprintf("%.0f%s of %d; %.0f B and %.0f; %.0f and %.0f (%.0f)", median(spans), spread(spans, "%.0f"), tasks,
			tapDropped, spansDropped, median(pages), median(scrapes), median(failed)))
}

// latencyDur is how long one case sends at rate: 100k lines/s (informative)
// gets a third of the time, still 100,000 lines, so that the five cases at
// three rates and several runs stay within a few minutes.
func latencyDur(c *config, rate int) time.Duration {
	if rate >= 100000 {
		return c.latDur / 3
	}
	return c.latDur
}

// latGenEnv is the environment entry that makes the harness binary the
// generator child at rate for dur.
func latGenEnv(rate int, dur time.Duration) string {
	return envLatGen + "=" + strconv.Itoa(rate) + ":" + dur.String()
}

// quantileSeries splits the runs of one case into p50, p99 and max series.
func quantileSeries(q []latencyQuantiles) (p50, p99, pmax []float64) {
	for _, x := range q {
		p50 = append(p50, x.p50)
		p99 = append(p99, x.p99)
		pmax = append(pmax, x.max)
	}
	return p50, p99, pmax
}

// addedSeries is run − base of p50 and p99, run by run: a slow moment of
// the machine hits a case and the baseline next to it, not another run's.
func addedSeries(run, base []latencyQuantiles) (a50, a99 []float64) {
	for i := range min(len(run), len(base)) {
		a50 = append(a50, run[i].p50-base[i].p50)
		a99 = append(a99, run[i].p99-base[i].p99)
	}
	return a50, a99
}

// stampLine appends to buf the line seq of the probe stream, stamped with
// the time it is written: seq −1 is the warm-up line (an init), then cycles
// of latencyCycle lines, each a plain task from task_started to
// task_notification, so that the wrapper does its whole work on them
// (Tracker, a span per task, metrics).
func stampLine(buf []byte, seq int) []byte {
	now := time.Now().UnixNano()
	if seq < 0 {
		return fmt.Appendf(buf[:0], `{"type":"system","subtype":"init","session_id":"bench","seq":%d,%s%019d,"description":"%s"}`+"\n",
			seq, stampField, now, latencyPad)
	}
	task := seq / latencyCycle
	switch seq % latencyCycle {
	case 0:
		return fmt.Appendf(buf[:0], `{"type":"system","subtype":"task_started","task_id":"lat-%d","task_type":"local_agent","session_id":"bench","seq":%d,%s%019d,"description":"%s"}`+"\n",
			task, seq, stampField, now, latencyPad)
	case latencyCycle - 1:
		return fmt.Appendf(buf[:0], `{"type":"system","subtype":"task_notification","task_id":"lat-%d","status":"completed","session_id":"bench","seq":%d,%s%019d,"usage":{"total_tokens":%d,"tool_uses":1,"duration_ms":%d}}`+"\n",
			task, seq, stampField, now, 1000+task%997, latencyCycle)
	default:
		return fmt.Appendf(buf[:0], `{"type":"system","subtype":"task_progress","task_id":"lat-%d","session_id":"bench","seq":%d,%s%019d,"usage":{"total_tokens":%d,"tool_uses":1,"duration_ms":%d},"description":"%s"}`+"\n",
			task, seq, stampField, now, 10*(seq%latencyCycle), seq%latencyCycle, latencyPad[:32])
	}
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
