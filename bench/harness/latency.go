package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cbc-otel/cbc-otel/bench/internal/pacegen"
	"github.com/cbc-otel/cbc-otel/bench/internal/promtext"
)

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
		if err := b.rcv.Stop(); err != nil {
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
		pacegen.LatencyCycle, pacegen.LatencyCycle, c.latDur, latencyDur(c, 100000), runs, pacegen.EnvLatGen)
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
		argv := append(append([]string{b.c.bin, "run"}, tel...), "--otlp.endpoint", b.rcv.Addr, "--otlp.protocol", "grpc", "--", b.self)
		before, _ := b.rcv.Received()
		lats, ws, err := latencyOut(ctx, argv, latGenEnv(rate, dur), rate, dur, addr)
		if err != nil {
			return nil, nil, err
		}
		// run has exited: its spans were flushed on the way out, and
		// its final metrics say what it dropped.
		after, _ := b.rcv.Received()
		ws.Spans = after - before
		body, err := os.ReadFile(filepath.Join(b.tdir, tag+"-metrics.prom"))
		if err != nil {
			return nil, nil, fmt.Errorf("run wrote no metrics file: %w", err)
		}
		ws.TapDropped = promtext.Text(string(body), "cbc_otel_tap_dropped_bytes_total", "")
		ws.SpansDropped = promtext.Text(string(body), "cbc_otel_spans_dropped_total", "")
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
		spans = append(spans, float64(w.Spans))
		pages = append(pages, float64(w.Page))
		scrapes = append(scrapes, float64(w.Metrics))
		failed = append(failed, float64(w.Failed))
		tapDropped = max(tapDropped, w.TapDropped)
		spansDropped = max(spansDropped, w.SpansDropped)
		if w.Spans == 0 {
			rep.note("latency %dk lines/s, run %d: the OTLP receiver got NO span from `run -- gen (runs page + OTLP)`", rate/1000, i+1)
		}
		if w.Page == 0 {
			rep.note("latency %dk lines/s, run %d: no GET of the runs page succeeded during `run -- gen (runs page + OTLP)`", rate/1000, i+1)
		}
	}
	tasks := int64(rate) * int64(latencyDur(c, rate)) / int64(time.Second) / pacegen.LatencyCycle
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
	return pacegen.EnvLatGen + "=" + strconv.Itoa(rate) + ":" + dur.String()
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
