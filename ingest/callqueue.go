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

// CallQueue hands the CLI's own model calls (run --join-cli-telemetry)
// from other goroutines to one pipeline's. It is made first and handed to
// both sides: the producer (join.SessionOptions.Calls) and the pipeline
// (PipelineOptions.Calls), so that neither needs the other to exist. One
// queue serves one pipeline. A nil *CallQueue takes no calls.
type CallQueue struct {
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

// NewCallQueue returns an empty queue.
func NewCallQueue() *CallQueue {
	return &CallQueue{wake: make(chan struct{}, 1), done: make(chan struct{}), streamDone: make(chan struct{})}
}

// Submit queues one model call of the CLI's own telemetry for the pipeline's
// goroutine. It never blocks; false means the call was dropped (the queue
// is full, or cq is nil). Safe for concurrent use.
func (cq *CallQueue) Submit(c ModelCall) bool {
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

// EndCalls says no more calls will be submitted: the pipeline's Consume may
// close it once the stream has ended too. Safe for concurrent use, and to
// call more than once.
func (cq *CallQueue) EndCalls() {
	if cq != nil {
		cq.endOnce.Do(func() { close(cq.done) })
	}
}

// StreamDone is closed when the pipeline's Consume has processed every byte of the
// stream and only waits for EndCalls: the lifecycle of every run the
// stream described has reached the sinks, but for finalization. nil on a
// nil queue.
func (cq *CallQueue) StreamDone() <-chan struct{} {
	if cq == nil {
		return nil
	}
	return cq.streamDone
}

// Dropped returns how many submitted calls were dropped because the queue
// was full.
func (cq *CallQueue) Dropped() int64 {
	if cq == nil {
		return 0
	}
	return cq.dropped.Load()
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
