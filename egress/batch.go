package egress

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Defaults of the batching processor.
const (
	DefaultQueueSize     = 2048
	DefaultBatchSize     = 512
	DefaultBatchInterval = time.Second
	DefaultExportTimeout = 10 * time.Second
)

// FailedCollectorWait is the most a shutdown waits for an exporter whose
// collector has failed (an attempt or export failed, with no success since):
// the exit of a wrapper whose collector refuses connections or whose name
// does not resolve costs at most this, not the flush timeout.
const FailedCollectorWait = 500 * time.Millisecond

// batcher is a batching SpanProcessor with a bounded queue, like the SDK's
// BatchSpanProcessor, written here because the SDK's neither reports its
// drops nor lets a shutdown abandon an export that hangs: OnEnd never
// blocks (a full queue drops the span and counts it), every export runs
// under a timeout, and Shutdown returns at its context's deadline, counting
// whatever it could not deliver as dropped.
type batcher struct {
	exp           sdktrace.SpanExporter
	rep           *exportReporter // says failures as they happen; never nil
	queueSize     int
	maxBatch      int
	interval      time.Duration
	exportTimeout time.Duration

	// mu guards the queue and closed (no span is queued after shutdown
	// began). The queue is a slice the loop takes batches from, not a
	// channel: a send to the loop waiting on a channel woke it (a futex
	// and a goroutine switch) for every span; now it is woken only when
	// a batch is ready (full), at its tick, a flush or the stop.
	mu      sync.Mutex
	closed  bool
	pending []sdktrace.ReadOnlySpan // ≤ queueSize, oldest first
	full    chan struct{}           // cap 1: a batch's worth is pending

	flushReq chan chan struct{}
	stop     chan struct{}
	done     chan struct{}
	abort    context.Context // cancelled when shutdown's deadline passes
	cancel   context.CancelFunc
	stopOnce sync.Once
	shutErr  error

	accepted  atomic.Int64 // queued
	exported  atomic.Int64 // delivered
	failed    atomic.Int64 // in failed exports
	cutShort  atomic.Int64 // of failed, in exports shutdown abandoned or skipped
	queueFull atomic.Int64 // dropped at OnEnd
	late      atomic.Int64 // ended after shutdown
	errs      atomic.Int64 // failed export calls
	gaveUp    atomic.Bool  // shutdown's deadline passed with spans undelivered
	// failedCut: shutdown gave up early, the collector having failed;
	// waited: how long shutdown waited before it gave up. Set before
	// Shutdown returns, read after.
	failedCut bool
	waited    time.Duration
	// inFlight is the export call under way, if any: shutdown counts one
	// it abandons as failed, whoever of the two gets there first.
	inFlight atomic.Pointer[atomic.Bool]
}

var _ sdktrace.SpanProcessor = (*batcher)(nil)

func newBatcher(exp sdktrace.SpanExporter, rep *exportReporter, queue int, interval, exportTimeout time.Duration) *batcher {
	if queue <= 0 {
		queue = DefaultQueueSize
	}
	if interval <= 0 {
		interval = DefaultBatchInterval
	}
	if exportTimeout <= 0 {
		exportTimeout = DefaultExportTimeout
	}
	abort, cancel := context.WithCancel(context.Background())
	if rep == nil {
		rep = newExportReporter(nil, nil, 0, "", "")
	}
	b := &batcher{
		exp:           exp,
		rep:           rep,
		queueSize:     queue,
		full:          make(chan struct{}, 1),
		maxBatch:      min(DefaultBatchSize, queue),
		interval:      interval,
		exportTimeout: exportTimeout,
		flushReq:      make(chan chan struct{}),
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
		abort:         abort,
		cancel:        cancel,
	}
	go b.loop()
	return b
}

// OnStart does nothing: spans are only of interest once ended.
func (b *batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues s without ever blocking.
func (b *batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		b.late.Add(1)
		return
	case len(b.pending) >= b.queueSize:
		b.mu.Unlock()
		b.queueFull.Add(1)
		return
	}
	b.pending = append(b.pending, s)
	ready := len(b.pending) >= b.maxBatch
	b.mu.Unlock()
	b.accepted.Add(1)
	if ready {
		select {
		case b.full <- struct{}{}:
		default: // the loop is told already
		}
	}
}

func (b *batcher) loop() {
	defer close(b.done)
	t := time.NewTicker(b.interval)
	defer t.Stop()
	batch := make([]sdktrace.ReadOnlySpan, 0, b.maxBatch)
	// exportQueued exports the queue in batches of maxBatch, oldest
	// first: every span queued (all), or the full batches only.
	exportQueued := func(all bool) {
		for {
			b.mu.Lock()
			n := len(b.pending)
			if n == 0 || (!all && n < b.maxBatch) {
				b.mu.Unlock()
				return
			}
			k := min(n, b.maxBatch)
			batch = append(batch[:0], b.pending[:k]...)
			rest := copy(b.pending, b.pending[k:])
			clear(b.pending[rest:])
			b.pending = b.pending[:rest]
			b.mu.Unlock()
			b.export(batch)
			clear(batch)
		}
	}
	for {
		select {
		case <-b.full:
			exportQueued(false)
		case <-t.C:
			exportQueued(true)
		case ack := <-b.flushReq:
			exportQueued(true)
			close(ack)
		case <-b.stop:
			exportQueued(true)
			return
		}
	}
}

// export delivers one batch under the export timeout; after shutdown's
// deadline it does not even try.
func (b *batcher) export(batch []sdktrace.ReadOnlySpan) {
	if b.abort.Err() != nil {
		b.failed.Add(int64(len(batch)))
		b.cutShort.Add(int64(len(batch)))
		return
	}
	ctx, cancel := context.WithTimeout(b.abort, b.exportTimeout)
	defer cancel()
	counted := new(atomic.Bool)
	b.inFlight.Store(counted)
	err := b.exp.ExportSpans(ctx, batch)
	b.inFlight.Store(nil)
	if err != nil {
		if counted.CompareAndSwap(false, true) {
			b.errs.Add(1)
		}
		b.failed.Add(int64(len(batch)))
		// An export that shutdown abandoned failed because we stopped
		// waiting, not because of the collector: the exit summary says it.
		if b.abort.Err() != nil {
			b.cutShort.Add(int64(len(batch)))
		} else {
			b.rep.exportFailed(err, len(batch))
		}
		return
	}
	b.exported.Add(int64(len(batch)))
	b.rep.exportOK()
}

// ForceFlush exports everything queued, waiting at most until ctx is done.
func (b *batcher) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case b.flushReq <- ack:
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown stops accepting spans, exports what is queued and shuts the
// exporter down, returning when done or when ctx is, whichever is first.
// It is idempotent.
func (b *batcher) Shutdown(ctx context.Context) error {
	b.stopOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		b.mu.Unlock()
		close(b.stop)
		start := time.Now()
		var err error
		// A collector that has failed (refused, no such host, an error
		// answer) is given FailedCollectorWait, not the whole deadline:
		// gRPC would retry it until the deadline, and the exit with it.
		// Only one that does not answer at all holds the exit to ctx's.
		var cut <-chan time.Time
		cutTimer := time.NewTimer(FailedCollectorWait)
		cutTimer.Stop()
		defer cutTimer.Stop()
		cutNow := func() {
			if cut == nil {
				cutTimer.Reset(FailedCollectorWait)
				cut = cutTimer.C
			}
		}
		select {
		case <-b.rep.fails: // a failure before a success since is no news
		default:
		}
		if b.rep.isFailing() {
			cutNow()
		}
	wait:
		for {
			select {
			case <-b.done:
				break wait
			case <-b.rep.fails:
				cutNow()
			case <-cut:
				b.failedCut = true
				err = fmt.Errorf("collector failed: %w", context.DeadlineExceeded)
			case <-ctx.Done():
				err = ctx.Err()
			}
			if err == nil {
				continue
			}
			b.waited = time.Since(start)
			// Abandon the export in flight and whatever is still queued:
			// a collector that hangs must not hang the process.
			b.gaveUp.Store(true)
			// The call under way is a failed export even though it
			// returns (and would count itself) only after we are gone.
			if c := b.inFlight.Load(); c != nil && c.CompareAndSwap(false, true) {
				b.errs.Add(1)
			}
			b.cancel()
			break wait
		}
		if err == nil {
			err = b.shutdownExporter(ctx)
		} else {
			go b.exp.Shutdown(b.abort) //nolint:errcheck // best effort after the deadline
		}
		b.cancel()
		b.shutErr = err
	})
	return b.shutErr
}

func (b *batcher) shutdownExporter(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- b.exp.Shutdown(ctx) }()
	select {
	case err := <-errc:
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dropped is every span that will not reach the backend: dropped at a full
// queue, ended after shutdown, lost in a failed export, and, once shutdown
// gave up, still queued or in flight.
func (b *batcher) dropped() int64 {
	n := b.queueFull.Load() + b.late.Load() + b.failed.Load()
	if b.gaveUp.Load() {
		n = b.queueFull.Load() + b.late.Load() + max(0, b.accepted.Load()-b.exported.Load())
	}
	return n
}

func (b *batcher) exportErrors() int64 { return b.errs.Load() }

// loss is what this batcher did not deliver, and why; Items is 0 when
// everything was delivered. Meant for after Shutdown.
func (b *batcher) loss() Loss {
	l := Loss{Items: b.dropped(), Signal: "spans", ExportErrors: b.exportErrors(), Endpoint: b.rep.endpoint, Protocol: b.rep.protocol}
	if !b.failedCut {
		l.Waited = b.waited // an unresponsive collector held the exit this long
	}
	if l.Items == 0 {
		return l
	}
	// failed counts the spans of exports cut short by shutdown too: here
	// they are abandoned, not refused.
	failed, qf, late := b.failed.Load()-b.cutShort.Load(), b.queueFull.Load(), b.late.Load()
	var abandoned int64
	if b.gaveUp.Load() {
		abandoned = max(0, b.accepted.Load()-b.exported.Load()-failed)
	}
	var why []string
	if c := b.rep.lastCause(); c != "" && failed+abandoned > 0 {
		why = append(why, c)
	}
	switch {
	case abandoned > 0 && b.failedCut:
		why = append(why, fmt.Sprintf("%d abandoned at exit, the collector having failed", abandoned))
	case abandoned > 0:
		why = append(why, fmt.Sprintf("%d abandoned at the shutdown deadline", abandoned))
	}
	if qf > 0 {
		why = append(why, fmt.Sprintf("%d dropped at a full queue", qf))
	}
	if late > 0 {
		why = append(why, fmt.Sprintf("%d ended after shutdown", late))
	}
	if len(why) == 0 {
		why = append(why, "export failed")
	}
	l.Cause = strings.Join(why, "; ")
	return l
}
