package ingest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// maxQueuedCalls bounds the calls submitted and not yet handled: the
// producer (an HTTP handler of the CLI's telemetry) never waits for the
// pipeline; beyond this, calls are dropped and counted.
const maxQueuedCalls = 8192

// callQueue hands model calls from other goroutines to the pipeline's.
type callQueue struct {
	mu      sync.Mutex
	q       []ModelCall
	wake    chan struct{}
	done    chan struct{}
	endOnce sync.Once
	// streamDone is closed when Consume has processed the whole stream
	// and waits for EndCalls only.
	streamDone chan struct{}
	dropped    atomic.Int64
}

func newCallQueue() *callQueue {
	return &callQueue{wake: make(chan struct{}, 1), done: make(chan struct{}), streamDone: make(chan struct{})}
}

// Submit queues one model call of the CLI's own telemetry for the pipeline's
// goroutine. It never blocks; false means the call was dropped (the queue
// is full, or the pipeline takes no calls: PipelineOptions.Calls unset).
// Safe for concurrent use.
func (p *Pipeline) Submit(c ModelCall) bool {
	cq := p.calls
	if cq == nil {
		return false
	}
	cq.mu.Lock()
	if len(cq.q) >= maxQueuedCalls {
		cq.mu.Unlock()
		cq.dropped.Add(1)
		return false
	}
	cq.q = append(cq.q, c)
	cq.mu.Unlock()
	select {
	case cq.wake <- struct{}{}:
	default: // a wake is pending already
	}
	return true
}

// EndCalls says no more calls will be submitted: Consume may close the
// pipeline once the stream has ended too. Safe for concurrent use, and to
// call more than once.
func (p *Pipeline) EndCalls() {
	if p.calls != nil {
		p.calls.endOnce.Do(func() { close(p.calls.done) })
	}
}

// StreamDone is closed when Consume has processed every byte of the
// stream and only waits for EndCalls: the lifecycle of every run the
// stream described has reached the sinks, but for finalization. nil when
// the pipeline takes no calls.
func (p *Pipeline) StreamDone() <-chan struct{} {
	if p.calls == nil {
		return nil
	}
	return p.calls.streamDone
}

// DroppedCalls returns how many submitted calls were dropped because the
// queue was full.
func (p *Pipeline) DroppedCalls() int64 {
	if p.calls == nil {
		return 0
	}
	return p.calls.dropped.Load()
}

// handleCalls handles the queued calls, on the pipeline's goroutine.
func (p *Pipeline) handleCalls() {
	cq := p.calls
	cq.mu.Lock()
	q := cq.q
	cq.q = nil
	cq.mu.Unlock()
	for i := range q {
		p.tr.HandleCall(q[i], p.clock(nil))
	}
}

// awaitCalls handles calls after the stream ended until EndCalls or ctx is
// done: the CLI flushes its telemetry as it exits, after its last line.
func (p *Pipeline) awaitCalls(ctx context.Context, every time.Duration) {
	cq := p.calls
	close(cq.streamDone)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-cq.wake:
			p.handleCalls()
		case <-tick.C:
			p.Tick()
		case <-cq.done:
			p.handleCalls()
			return
		case <-ctx.Done():
			p.handleCalls()
			return
		}
	}
}
