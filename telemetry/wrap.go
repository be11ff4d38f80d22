package telemetry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/runcost"
	"github.com/cbc-otel/cbc-otel/report"
	"github.com/cbc-otel/cbc-otel/tap"
)

// ConsumeFunc reads both taps until they are closed.
type ConsumeFunc func(stdout, stdin *tap.Tap, log *slog.Logger)

// Summaries are the outputs written once the child is done: the
// waterfall on stderr (--summary.waterfall), the runs file (--summary.file), the
// step summary (--summary.step-file, $GITHUB_STEP_SUMMARY) and the step
// outputs (--summary.step-output, $GITHUB_OUTPUT); "" or false: not written.
type Summaries struct {
	Waterfall                      bool
	File, StepSummary, StepOutputs string
}

func (s Summaries) any() bool {
	return s.Waterfall || s.File != "" || s.StepSummary != "" || s.StepOutputs != ""
}

// WrapOptions says what reads the taps of one wrapped child.
type WrapOptions struct {
	// TapQueue is the bytes each tap may queue before it drops.
	TapQueue int
	// Spool is --spool.dir and --spool.process.
	Spool SpoolFlags
	// Summaries are written by WriteSummaries.
	Summaries Summaries
	// Collect keeps the runs seen for the caller even without summaries
	// (demo).
	Collect bool
	// Extra sinks come after the collector, the join and the spend (the
	// budget cap).
	Extra []ingest.Sink
	// Register, when set, registers the caller's collectors on the
	// process's registry (with the const labels).
	Register func(prometheus.Registerer)
	// Consume reads both taps until they are closed; nil means the ingest
	// pipeline feeding the telemetry sinks. Tests swap in stuck consumers.
	Consume ConsumeFunc
	// BudgetCap is --budget.max-cost-usd (0: none), BudgetShow the demo's
	// budget for show (demo --budget.show-usd; 0: none): the summaries and
	// the runs page show the session's spend against the first set.
	BudgetCap, BudgetShow float64
	// Command is the wrapped command (its name names the join's minted
	// parent span).
	Command string
	// Yield, when set, runs on the consumer's goroutine the first time a
	// tap falls behind a burst: it lowers its priority below the
	// passthrough's (supervise.YieldToPassthrough; see yieldWhenBehind).
	Yield func() error
}

// Wrapped is what reads the taps of one run: the pipeline feeding the
// telemetry sinks and the spool writer, either or both.
type Wrapped struct {
	tel      *Telemetry // nil when only spooling
	pipe     *tap.Tap   // stdout tap of the pipeline; nil when only spooling
	pipeIn   *tap.Tap
	sp       *spooling // nil without --spool.dir
	runs     report.Collector
	collect  bool
	consumed chan struct{}
	join     *cliJoin      // --cli-telemetry.join; nil without
	spend    *report.Spend // --summary.step-output or a budget; nil without
	sums     Summaries
	// budgetUSD is the budget shown against spend (0: none); showOnly
	// when it is the demo's, which nothing acts on.
	budgetUSD float64
	showOnly  bool
}

// Outcome is what the pipeline of a run (or of a replay) saw: the runs
// kept, when they were asked for, and the counters.
type Outcome struct {
	Runs     []ingest.Run
	Sessions []report.Session // the main conversation's cost (--cli-telemetry.join)
	Stats    *ingest.Stats
	Budget   *runcost.Budget   // the spend against the budget shown; nil: none
	col      *report.Collector // replay's, which may hold the --summary.json lines only
}

// Lines is how many lines of the child's stdout were read; 0 without a
// pipeline.
func (o Outcome) Lines() int64 {
	if o.Stats == nil {
		return 0
	}
	return o.Stats.Lines(tap.SourceStdout)
}

// Events is how many events of interest were seen; 0 without a pipeline.
func (o Outcome) Events() int64 {
	if o.Stats == nil {
		return 0
	}
	return o.Stats.Events()
}

// Telemetry is the running telemetry; nil when the wrapper only spools.
func (c *Wrapped) Telemetry() *Telemetry { return c.tel }

// Wrap starts the telemetry and the spool writer that f and o ask for.
// With --spool.dir (and no --spool.process) the wrapper only spools: no
// pipeline, no telemetry.
func (f *Flags) Wrap(ctx context.Context, o WrapOptions, log *slog.Logger) (*Wrapped, error) {
	c := &Wrapped{consumed: make(chan struct{}), collect: o.Collect || o.Summaries.any(), sums: o.Summaries}
	if o.Spool.Dir == "" || o.Spool.Process {
		var err error
		if c.tel, err = New(ctx, f, os.Getenv, log); err != nil {
			return nil, err
		}
		c.tel.command = o.Command
		_ = c.tel.Start(ctx, StartOptions{}) // not serve: a server that cannot start is logged
	}
	if o.Spool.Dir != "" {
		c.sp = startSpool(o.Spool.Dir, o.TapQueue, log)
		if c.tel != nil {
			c.tel.register(c.sp.collector(), "spool")
		}
	}
	if c.tel == nil {
		close(c.consumed)
		return c, nil
	}
	c.pipe, c.pipeIn = tap.NewTap(o.TapQueue), tap.NewTap(o.TapQueue)
	consume := o.Consume
	if consume == nil {
		// Runs are kept only when asked for: a days-long session must not
		// grow with every run it saw.
		var extra []ingest.Sink
		if c.collect {
			extra = append(extra, &c.runs)
		}
		join := c.tel.join
		if join != nil {
			extra = append(extra, join.s.Joiner)
		}
		if o.Summaries.StepOutputs != "" || o.BudgetCap > 0 || o.BudgetShow > 0 {
			c.spend = &report.Spend{}
			extra = append(extra, c.spend)
			c.showBudget(o)
		}
		extra = append(extra, o.Extra...)
		if o.Register != nil {
			o.Register(c.tel.self)
		}
		p := c.tel.newPipeline(stream{live: true, extra: extra, calls: join != nil})
		if join != nil {
			join.start(ctx, c.tel, log)
			c.join = join
		}
		consume = func(stdout, stdin *tap.Tap, log *slog.Logger) {
			p.Consume(context.WithoutCancel(ctx), stdout, stdin, 0)
			logTapTotals(log, p.Stats(), stdout, stdin)
		}
	}
	if o.Yield != nil {
		yieldWhenBehind(log, o.Yield, c.pipe, c.pipeIn)
	}
	go func() {
		defer close(c.consumed)
		consume(c.pipe, c.pipeIn, log)
	}()
	return c, nil
}

// showBudget makes the summaries and the runs page show the session's
// spend against the cap (--budget.max-cost-usd: the figure it weighs, as
// c.spend sums the same events) or against the demo's budget for show.
func (c *Wrapped) showBudget(o WrapOptions) {
	c.budgetUSD, c.showOnly = o.BudgetCap, o.BudgetCap <= 0
	if c.showOnly {
		c.budgetUSD = o.BudgetShow
	}
	if c.budgetUSD > 0 && c.tel.page != nil {
		c.tel.page.SetBudget(func() runcost.Budget { return *c.budget() })
	}
}

// budget is the spend against the budget shown; nil without one.
func (c *Wrapped) budget() *runcost.Budget {
	if c.spend == nil || c.budgetUSD <= 0 {
		return nil
	}
	b := c.spend.Budget(c.budgetUSD, c.showOnly)
	return &b
}

// StdoutTap is what the supervisor writes the child's stdout to: the
// pipeline's tap, the spool's, or both (nil when neither).
func (c *Wrapped) StdoutTap() io.Writer {
	return tap.Join(c.pipe, c.sp.tapOf(tap.SourceStdout))
}

// StdinTap is what the supervisor writes the child's stdin to.
func (c *Wrapped) StdinTap() io.Writer {
	return tap.Join(c.pipeIn, c.sp.tapOf(tap.SourceStdin))
}

// ChildEnv is the child's environment: nil means the wrapper's own; under
// --cli-telemetry.join, the CLI's telemetry pointed at the receiver.
func (c *Wrapped) ChildEnv() []string { return c.join.env() }

// ChildDone tells the join the child has exited.
func (c *Wrapped) ChildDone(ctx context.Context) { c.join.childDone(ctx) }

// Finish closes the taps and waits for the consumers, at most wait in all:
// telemetry never holds up the exit.
func (c *Wrapped) Finish(ctx context.Context, wait time.Duration, log *slog.Logger) Outcome {
	if c.pipe != nil {
		c.pipe.Close()
		c.pipeIn.Close()
	}
	if c.sp != nil {
		c.sp.close()
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	c.join.streamDone(wctx)
	if c.sp != nil {
		select {
		case <-c.sp.done:
			c.sp.logTotals(log)
		case <-wctx.Done():
			log.Warn("spool writer did not finish; exiting without it (the file stays .open and the sidecar finalizes it after its idle timeout)", "waited", wait)
		}
	}
	select {
	case <-c.consumed:
	case <-wctx.Done():
	}
	select {
	case <-c.consumed: // also when both were ready
		if c.tel != nil {
			return Outcome{Runs: c.runs.Runs, Sessions: c.runs.Sessions(), Stats: c.tel.stats, Budget: c.budget()}
		}
		return Outcome{}
	default:
	}
	// The consumer is still behind: what it has not read is given up, and
	// counted as dropped before anything is written out (the metrics file,
	// the summaries), so that every tapped byte is either in the counts or
	// in the drops; the consumer then only finalizes.
	before := c.droppedBytes()
	c.pipe.Abandon()
	c.pipeIn.Abandon()
	t := time.NewTimer(abandonWait)
	defer t.Stop()
	select {
	case <-c.consumed:
		c.tel.traces.lossLogger.Warn("telemetry fell behind: tapped bytes not read when the wrapper exited were given up and counted as dropped (cbc_otel_tap_dropped_bytes_total)",
			"waited", wait, "given_up_bytes", c.droppedBytes()-before)
		return Outcome{Runs: c.runs.Runs, Sessions: c.runs.Sessions(), Stats: c.tel.stats, Budget: c.budget()}
	case <-t.C:
		c.tel.traces.lossLogger.Warn("telemetry consumer did not finish; exiting without it (its counts are incomplete)", "waited", wait+abandonWait)
		c.collect = false // what was collected is incomplete and still being written
	}
	return Outcome{}
}

// abandonWait bounds the wait for the consumer to finalize once the
// wrapper has given up what it had not read (see Wrapped.Finish).
const abandonWait = time.Second

// droppedBytes is what the pipeline's taps dropped so far.
func (c *Wrapped) droppedBytes() int64 {
	_, a, _ := c.pipe.Stats()
	_, b, _ := c.pipeIn.Stats()
	return a + b
}

// Shutdown ends the telemetry (Telemetry.Shutdown); nothing when the
// wrapper only spools.
func (c *Wrapped) Shutdown(ctx context.Context) error { return c.tel.Shutdown(ctx) }

// WriteSummaries writes the waterfall (--summary.waterfall) and the runs file
// (--summary.file), the step summary and the step outputs of a consumer
// that finished.
func (c *Wrapped) WriteSummaries(stderr io.Writer, log *slog.Logger) {
	cfg := c.sums
	if c.tel == nil || !c.collect {
		return
	}
	if cfg.Waterfall {
		if err := report.WriteWaterfall(stderr, c.runs.Runs, c.tel.stats, report.WaterfallOptions{Sessions: c.runs.Sessions(), Budget: c.budget()}); err != nil {
			log.Error("writing the summary", "err", err)
		}
	}
	if cfg.File != "" {
		if err := report.WriteJSONFile(cfg.File, c.runs.Runs, c.runs.Sessions(), c.tel.stats); err != nil {
			log.Error("writing the summary file", "err", err)
		}
	}
	if cfg.StepSummary != "" {
		if err := appendStepSummary(cfg.StepSummary, c.runs.Runs, c.runs.Sessions(), c.tel.stats, c.budget()); err != nil {
			log.Error("writing the step summary", "err", err)
		}
	}
	if cfg.StepOutputs != "" && c.spend != nil {
		if err := appendStepOutputs(cfg.StepOutputs, c.runs.Runs, c.spend.Totals()); err != nil {
			log.Error("writing the step outputs", "err", err)
		}
	}
}

// appendStepSummary appends the Markdown section of the runs to path
// (--summary.step-file, $GITHUB_STEP_SUMMARY), creating it if need be: the
// file holds the job's other steps' summaries too, never truncated.
func appendStepSummary(path string, runs []ingest.Run, sessions []report.Session, stats *ingest.Stats, budget *runcost.Budget) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	var b bytes.Buffer // one write: a half section is less likely on a full disk
	if err := report.WriteStepSummary(&b, runs, sessions, report.StepSummaryOptions{Stats: stats, Budget: budget}); err != nil {
		f.Close()
		return err
	}
	_, err = f.Write(b.Bytes())
	return errors.Join(err, f.Close())
}

// logTapTotals logs at debug level what the pipeline and the taps saw.
func logTapTotals(log *slog.Logger, st *ingest.Stats, stdout, stdin *tap.Tap) {
	for _, t := range []struct {
		src tap.Source
		tap *tap.Tap
	}{{tap.SourceStdout, stdout}, {tap.SourceStdin, stdin}} {
		in, dropped, droppedChunks := t.tap.Stats()
		// Drops are counted in the metrics too; a warning says at exit that
		// the telemetry of this run is incomplete.
		level, msg := slog.LevelDebug, "tap totals"
		if dropped > 0 {
			level, msg = slog.LevelWarn, "tap totals: telemetry fell behind and dropped bytes (the passthrough did not wait)"
		}
		log.Log(context.Background(), level, msg, "source", t.src, "lines", st.Lines(t.src), "bytes", st.Bytes(t.src), "incomplete_bytes", st.Incomplete(t.src),
			"tapped_bytes", in, "dropped_bytes", dropped, "dropped_chunks", droppedChunks)
	}
}

// yieldWhenBehind has the goroutine that merges the taps (the telemetry
// consumer) call yield (supervise.YieldToPassthrough: a locked thread at a
// lower priority) once it first falls behind a burst (a queue filled past
// an eighth: tap.Tap.OnBehind), and not before. The locked, niced thread
// is what keeps a busy consumer from slowing the passthrough down, but
// each wake-up of a goroutine locked to its thread costs two thread
// hand-overs more: with a paced child, whose lines never fill the queue,
// it cost 12 % of the wrapper's CPU per line (`run` at 200 and 2,000
// lines/s, telemetry on). Call it before the consumer starts.
func yieldWhenBehind(log *slog.Logger, yield func() error, taps ...*tap.Tap) {
	f := func() {
		if err := yield(); err != nil {
			log.Debug("lowering the telemetry consumer's priority", "err", err)
		}
		log.Debug("the telemetry consumer fell behind: it now yields to the passthrough (own thread, lower priority)")
	}
	for _, t := range taps {
		if t != nil {
			t.OnBehind(f)
		}
	}
}
