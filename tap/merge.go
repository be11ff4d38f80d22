package tap

import (
	"context"
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
}

// Merge drains the stdout and stdin taps of a wrapped child until both
// are closed (either may be nil) or ctx is done. When both hold data, the
// chunk that passed through the wrapper first comes first; ties go to stdin,
// since a request precedes its effects. So an interrupt written to the child
// is always handled before the stopped notification it caused, whichever
// queue a plain select would have looked at first. It returns ctx's error
// if ctx ended it.
func Merge(ctx context.Context, stdout, stdin *Tap, m MergeOptions) error {
	var tick <-chan time.Time
	if m.Tick != nil && m.Every > 0 {
		t := time.NewTicker(m.Every)
		defer t.Stop()
		tick = t.C
	}
	taps := [NumSources]*Tap{stdout, stdin}
	var chans [NumSources]<-chan Chunk
	for i, tp := range taps {
		if tp != nil {
			chans[i] = tp.Chunks()
		}
	}
	var pend [NumSources]*Chunk
	take := func(i int, c Chunk, ok bool) {
		if !ok {
			chans[i] = nil
			if m.End != nil {
				m.End(Source(i))
			}
			return
		}
		if taps[i].abandoned.Load() {
			taps[i].abandon(c)
			return
		}
		pend[i] = &c
	}
	for {
		if pend[0] == nil && pend[1] == nil {
			if chans[0] == nil && chans[1] == nil {
				return nil
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
		}
		if m.Idle != nil && pend[0] == nil && pend[1] == nil && len(chans[0]) == 0 && len(chans[1]) == 0 {
			m.Idle()
		}
	}
}
