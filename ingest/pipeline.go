package ingest

import (
	"context"
	"io"
	"time"

	"github.com/cbc-otel/cbc-otel/ndjson"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// probeBytes is how much of a line still arriving the framer buffers before
// it asks whether the line is worth keeping (see ndjson.Framer.SetProbe).
const probeBytes = 4 << 10

// squeezeBytes is how much of a line still arriving the framer buffers
// before a streamjson.Squeezer reads it, so that a snapshot's elements
// beyond what the decoder reads are not held (the 4 MiB snapshot of the
// state attack was the peak of run's heap). Shorter lines, nearly all,
// cost the Squeezer nothing.
const squeezeBytes = 64 << 10

// maxClockLeap bounds how far one event may move a replay's clock.
const maxClockLeap = 24 * 60 * 60 * 1000

// PipelineOptions configures a Pipeline.
type PipelineOptions struct {
	// MaxLine caps what is buffered of one line; 0 means
	// ndjson.DefaultMaxLine.
	MaxLine int
	Decode  streamjson.DecodeOptions
	Tracker TrackerOptions
	// Live selects the clock: the wall clock for a live stream, the
	// stream's own timestamps for a replay (see Tracker).
	Live bool
	// Now returns the wall clock; nil means time.Now. Tests replace it.
	Now func() time.Time
	// Calls, when set, is where the pipeline takes the CLI's own model
	// calls from (CallQueue.Submit) and attributes them to agents
	// (TrackerOptions.AttributeCalls); Consume then waits for the queue's
	// EndCalls before it closes the pipeline.
	Calls *CallQueue
}

// Pipeline frames, decodes and tracks one stream: the CLI's stdout and the
// control requests on its stdin. It is driven from one goroutine.
type Pipeline struct {
	framers     [numSources]*ndjson.Framer
	dec         *streamjson.Decoder
	tr          *Tracker
	stats       *Stats
	live        bool
	now         func() time.Time
	streamClock int64
	cur         tap.Source
	chunkAt     int64 // Unix ns the chunk being processed passed the tap; 0 outside Consume
	calls       *CallQueue
}

// NewPipeline returns a pipeline feeding opts.Tracker.Sinks.
func NewPipeline(opts PipelineOptions) *Pipeline {
	if opts.MaxLine <= 0 {
		opts.MaxLine = ndjson.DefaultMaxLine
	}
	if opts.Tracker.Stats == nil {
		opts.Tracker.Stats = new(Stats)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Decode.MaxElements == 0 {
		// No snapshot element beyond what a run may keep is decoded.
		c := opts.Tracker.Caps.withDefaults()
		opts.Decode.MaxElements = c.Agents + c.Phases
	}
	if opts.Calls != nil {
		opts.Tracker.AttributeCalls = true
	}
	p := &Pipeline{
		dec:   streamjson.NewDecoder(opts.Decode),
		tr:    NewTracker(opts.Tracker),
		stats: opts.Tracker.Stats,
		live:  opts.Live,
		now:   opts.Now,
		calls: opts.Calls,
	}
	for i := range p.framers {
		p.framers[i] = ndjson.NewFramer(opts.MaxLine, p.line)
		p.framers[i].SetProbe(probeBytes, streamjson.WorthBuffering)
		if n := opts.Decode.MaxElements; n > 0 {
			p.framers[i].SetSqueezer(squeezeBytes, streamjson.NewSqueezer(n))
		}
	}
	return p
}

// Stats returns the pipeline's counters.
func (p *Pipeline) Stats() *Stats { return p.stats }

// Tracker returns the pipeline's tracker.
func (p *Pipeline) Tracker() *Tracker { return p.tr }

// Write feeds bytes of src.
func (p *Pipeline) Write(src tap.Source, b []byte) {
	p.cur = src
	p.framers[src%numSources].Write(b)
}

// Gap tells the pipeline that bytes of src were lost before the next Write.
func (p *Pipeline) Gap(src tap.Source) {
	p.cur = src // the framer emits what the gap cut
	p.framers[src%numSources].Gap()
}

// GapAtLineEnd tells the pipeline that bytes of src were lost before the next
// Write, and that they ended with a newline: the next Write starts a line.
func (p *Pipeline) GapAtLineEnd(src tap.Source) {
	p.cur = src
	p.framers[src%numSources].GapAtLineEnd()
}

// EndOfStream flushes an unterminated last line of src.
func (p *Pipeline) EndOfStream(src tap.Source) {
	p.cur = src
	p.framers[src%numSources].Flush()
}

// Tick advances a live pipeline's clock so that grace windows close while
// the stream is quiet. It does nothing in replay, whose clock is the stream.
func (p *Pipeline) Tick() {
	if p.live {
		p.tr.Advance(p.now().UnixMilli())
	}
}

// Close flushes both sources and ends the stream: open runs are abandoned
// and every run is finalized.
func (p *Pipeline) Close() {
	if p.calls != nil {
		p.handleCalls()
	}
	for src := range p.framers {
		p.EndOfStream(tap.Source(src))
	}
	p.tr.Close(p.clock(nil))
}

func (p *Pipeline) clock(ev *streamjson.Event) int64 {
	if p.live {
		if p.chunkAt > 0 {
			return p.chunkAt / int64(time.Millisecond)
		}
		return p.now().UnixMilli()
	}
	if ev != nil {
		// One absurd timestamp must not close every later grace window at
		// once: the clock follows the stream, but not by leaps of a day.
		if t := ev.Times(); p.streamClock == 0 || t <= p.streamClock+maxClockLeap {
			p.streamClock = max(p.streamClock, t)
		}
	}
	return p.streamClock
}

func (p *Pipeline) line(l ndjson.Line) {
	if l.Cut {
		// A piece of a line a tap drop cut: no line to decode, but its
		// bytes are counted (so that every tapped byte is), and the head
		// of a line of interest over the cap is what it would have been
		// whole, too_long.
		p.stats.incomplete[p.cur%numSources].Add(l.Len)
		if l.Truncated && streamjson.LongLineOfInterest(l.Data) {
			p.stats.reject(streamjson.ReasonTooLong, l.Len)
		}
		return
	}
	p.stats.countLine(p.cur, l.Len)
	if l.Truncated {
		// Only lines we would have decoded count as rejected: a long
		// assistant message is ordinary traffic.
		if streamjson.LongLineOfInterest(l.Data) {
			p.stats.reject(streamjson.ReasonTooLong, l.Len)
		}
		return
	}
	ev, reason := p.dec.Decode(p.cur, l.Data)
	if reason != streamjson.ReasonNone {
		p.stats.reject(reason, l.Len)
		return
	}
	if ev == nil {
		return
	}
	p.tr.Handle(ev, p.clock(ev))
}

// Consume drains the taps of a wrapped child until both are closed, then
// closes the pipeline. Either tap may be nil. tick is how often a live
// pipeline's grace windows are checked while the stream is quiet.
//
// When both taps hold data, the chunk that passed through the wrapper first
// is processed first, and a live pipeline's clock is the time a chunk passed
// through, not when it is processed: so an interrupt written to the child is
// seen before the stopped notification it caused, whichever queue the
// consumer happened to look at first.
func (p *Pipeline) Consume(ctx context.Context, stdout, stdin *tap.Tap, tick time.Duration) {
	if tick <= 0 {
		tick = 500 * time.Millisecond
	}
	taps := [numSources]*tap.Tap{stdout, stdin}
	m := tap.MergeOptions{
		Chunk: func(s tap.Source, c tap.Chunk) {
			p.chunkAt = c.At
			p.chunk(s, taps[s], c)
			p.chunkAt = 0
		},
		End:   func(s tap.Source) { p.endTap(s, taps[s]) },
		Tick:  p.Tick,
		Every: tick,
	}
	if p.calls != nil {
		m.Wake, m.OnWake = p.calls.wake, p.handleCalls
	}
	_ = tap.Merge(ctx, stdout, stdin, m)
	if p.calls != nil {
		p.awaitCalls(ctx, tick)
	}
	p.Close()
}

func (p *Pipeline) chunk(src tap.Source, t *tap.Tap, c tap.Chunk) {
	switch {
	case c.Gap && c.GapAtLineEnd:
		p.GapAtLineEnd(src) // the next line is whole: keep it
	case c.Gap:
		p.Gap(src)
	}
	p.Write(src, c.Data)
	t.Release(c)
}

func (p *Pipeline) endTap(src tap.Source, t *tap.Tap) {
	_, dropped, _ := t.Stats()
	p.stats.AddDropped(src, dropped)
	switch {
	case t.GapPendingAtLineEnd():
		p.GapAtLineEnd(src) // the partial last line is incomplete: do not parse it
	case t.GapPending():
		p.Gap(src) // likewise
	}
	p.EndOfStream(src)
}

// Feed copies r into the pipeline as src until EOF (not closing the
// pipeline) or until ctx is done.
func Feed(ctx context.Context, p *Pipeline, src tap.Source, r io.Reader) error {
	// Large reads: a snapshot line of a big workflow is hundreds of KiB,
	// and a line split across reads is copied into the framer's buffer.
	buf := make([]byte, 1<<20)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := r.Read(buf)
		if n > 0 {
			p.Write(src, buf[:n])
		}
		if err == io.EOF {
			p.EndOfStream(src)
			return nil
		}
		if err != nil {
			return err
		}
	}
}
