package tap

import (
	"context"
	"runtime"
	"time"
)

// MergeOptions says what Merge does with what it reads. Nil funcs are
// skipped.
type MergeOptions struct {
	// Chunk receives every chunk, in the order its bytes passed the
	// wrapper; it must give the chunk back to its tap (Tap.Release).
	Chunk func(src Source, c Chunk)
	// End is called once per tap, when it is closed and drained.
	End func(src Source)
	// Tick is called every Every while no data arrives.
	Tick  func()
	Every time.Duration
	// Idle is called after a chunk when both queues are momentarily empty:
	// the moment to flush buffered output.
	Idle func()
	// Wake, when it fires, calls OnWake on the merging goroutine: how
	// another producer (the CLI's own telemetry) gets its work serialized
	// with the chunks without a lock on the consumer's state.
	Wake   <-chan struct{}
	OnWake func()
	// Batch is how long Merge lets chunks gather once it has handled
	// some, before it looks again: 0 is DefaultBatch, a negative value
	// hands over every chunk as soon as it is queued. See Merge.
	Batch time.Duration
}

// DefaultBatch is the batch interval of Merge when MergeOptions.Batch is 0.
// A paced child's lines then cost the consumer one wake-up per 20 ms rather
// than one per line (at 2,000 lines/s, 40 lines a wake-up; at 200, 4):
// waking a goroutine on the consumer's own thread cost more than handling
// the line (strace of `run` at 2,000 lines/s: 5 futex, 2.4 nanosleep and
// 2.2 epoll_pwait calls per line). The telemetry's clock is each chunk's
// passage (Chunk.At), not when it is handled, so the delay changes no
// timestamp, and the passthrough never waits for the consumer at all.
const DefaultBatch = 20 * time.Millisecond

// Merge drains the stdout and stdin taps of a wrapped child until both
// are closed (either may be nil) or ctx is done. When both hold data, the
// chunk that passed through the wrapper first comes first; ties go to stdin,
// since a request precedes its effects. So an interrupt written to the child
// is always handled before the stopped notification it caused, whichever
// queue a plain select would have looked at first. It returns ctx's error
// if ctx ended it.
//
// Merge is woken by the first chunk after a quiet spell and handles it at
// once; while chunks keep coming it then looks every Batch only, handling
// all that gathered, or sooner when a tap's queue fills past an eighth (a
// burst must not make the tap drop for a consumer asleep) or closes. The
// first interval that brings nothing makes it wait for a chunk again.
func Merge(ctx context.Context, stdout, stdin *Tap, m MergeOptions) error {
	var tick <-chan time.Time
	if m.Tick != nil && m.Every > 0 {
		t := time.NewTicker(m.Every)
		defer t.Stop()
		tick = t.C
	}
	batch := m.Batch
	if batch == 0 {
		batch = DefaultBatch
	}
	var (
		batchTimer *time.Timer
		// wakes and ends: a queue past its wake mark, a tap closed.
		wakes, ends [NumSources]<-chan struct{}
		busy        bool // the last look found chunks: wait a Batch before the next
	)
	if batch > 0 {
		batchTimer = time.NewTimer(batch)
		batchTimer.Stop()
		defer batchTimer.Stop()
		for i, tp := range [NumSources]*Tap{stdout, stdin} {
			if tp != nil {
				wakes[i], ends[i] = tp.wake, tp.ended
			}
		}
	}
	taps := [NumSources]*Tap{stdout, stdin}
	var chans [NumSources]<-chan *Chunk
	for i, tp := range taps {
		if tp != nil {
			chans[i] = tp.Chunks()
		}
	}
	var pend [NumSources]*Chunk
	behindSeen := false
	take := func(i int, c *Chunk, ok bool) {
		if !ok {
			chans[i], wakes[i], ends[i] = nil, nil, nil
			if m.End != nil {
				m.End(Source(i))
			}
			return
		}
		if taps[i].abandoned.Load() {
			taps[i].abandon(*c)
			return
		}
		if !behindSeen && taps[i].behind != nil && taps[i].queued.Load() >= taps[i].wakeAt {
			behindSeen = true
			taps[i].behind()
		}
		pend[i] = c
	}
	for {
		if pend[0] == nil && pend[1] == nil {
			if chans[0] == nil && chans[1] == nil {
				return nil
			}
			if busy && len(chans[0]) == 0 && len(chans[1]) == 0 {
				// Let the next chunks gather: the queues' chunks do
				// not wake us, only the interval, a filling queue
				// (Tap.signal) or a close.
				busy = false
				batchTimer.Reset(batch)
				select {
				case <-batchTimer.C:
				case <-wakes[0]:
				case <-wakes[1]:
				case <-ends[0]:
				case <-ends[1]:
				case <-tick:
					m.Tick()
				case <-m.Wake:
					m.OnWake()
				case <-ctx.Done():
					return ctx.Err()
				}
				batchTimer.Stop()
				continue
			}
			select {
			case c, ok := <-chans[0]:
				take(0, c, ok)
			case c, ok := <-chans[1]:
				take(1, c, ok)
			case <-tick:
				m.Tick()
				continue
			case <-m.Wake:
				m.OnWake()
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// Look at the other queue without waiting: what is already there
		// may have passed through earlier.
		for i := range pend {
			if pend[i] == nil && chans[i] != nil {
				select {
				case c, ok := <-chans[i]:
					take(i, c, ok)
				default:
				}
			}
		}
		i := SourceStdout
		if pend[0] == nil || (pend[1] != nil && pend[1].PassedBefore(pend[0])) {
			i = SourceStdin
		}
		if c := pend[i]; c != nil {
			pend[i] = nil
			m.Chunk(i, *c)
			busy = batch > 0
			if busy && (len(chans[0]) > 0 || len(chans[1]) > 0) {
				// A batch is many chunks' work in one go: between
				// two, let a goroutine that waits for a P run first
				// (the pump, woken by its pipe while every P is busy),
				// so the batch never delays the passthrough by more
				// than one chunk's work.
				runtime.Gosched()
			}
		}
		if m.Idle != nil && pend[0] == nil && pend[1] == nil && len(chans[0]) == 0 && len(chans[1]) == 0 {
			m.Idle()
		}
	}
}
