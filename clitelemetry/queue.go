package clitelemetry

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// queue is a bounded queue of items in front of one export goroutine. put
// never blocks: when the queue is full, or after shutdown, the item is
// dropped and counted. Items are exported in batches of at most maxBatch,
// every interval or when a batch is full, one export at a time.
type queue[T any] struct {
	ch       chan T
	export   func(context.Context, []T) error
	size     func(T) int // how many counted units (records, points) an item holds
	maxBatch int
	interval time.Duration
	timeout  time.Duration
	onErr    func(error)

	flushc  chan chan struct{}
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once
	// stopCtx is the context of the final export, set before stop closes.
	stopCtx context.Context
	closed  atomic.Bool

	stats QueueStats
}

// QueueStats counts, in units of one signal (log records or metric data
// points), what a Forwarder did with what it was handed.
type QueueStats struct {
	// Received counts everything handed to the Forwarder.
	Received atomic.Int64
	// Exported counts what the exporter accepted.
	Exported atomic.Int64
	// QueueFull counts what was dropped at a full queue.
	QueueFull atomic.Int64
	// Late counts what came after Shutdown.
	Late atomic.Int64
	// Unsupported counts what could not be converted or exceeded the
	// bound on distinct resources.
	Unsupported atomic.Int64
	// Failed counts what was in failed exports.
	Failed atomic.Int64
	// ExportErrors counts failed export calls.
	ExportErrors atomic.Int64
}

// Lost is what was received and not exported. After Shutdown it is final:
// dropped, failed, or still queued when the deadline came.
func (s *QueueStats) Lost() int64 { return s.Received.Load() - s.Exported.Load() }

func newQueue[T any](capacity, maxBatch int, interval, timeout time.Duration, export func(context.Context, []T) error, size func(T) int, onErr func(error)) *queue[T] {
	q := &queue[T]{
		ch:       make(chan T, capacity),
		export:   export,
		size:     size,
		maxBatch: maxBatch,
		interval: interval,
		timeout:  timeout,
		onErr:    onErr,
		flushc:   make(chan chan struct{}),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	go q.run()
	return q
}

// put enqueues it without blocking; n is its size, already counted in
// Received by the caller.
func (q *queue[T]) put(it T) {
	n := int64(q.size(it))
	if q.closed.Load() {
		q.stats.Late.Add(n)
		return
	}
	select {
	case q.ch <- it:
	default:
		q.stats.QueueFull.Add(n)
	}
}

func (q *queue[T]) run() {
	defer close(q.stopped)
	t := time.NewTicker(q.interval)
	defer t.Stop()
	batch := make([]T, 0, q.maxBatch)
	flush := func(ctx context.Context) {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(ctx, q.timeout)
		q.exportBatch(ctx, batch)
		cancel()
		clear(batch)
		batch = batch[:0]
	}
	// base is the context exports start from: once Shutdown began, its
	// context, so that nothing is exported past its deadline.
	base := func() context.Context {
		select {
		case <-q.stop:
			return q.stopCtx
		default:
			return context.Background()
		}
	}
	drain := func(ctx context.Context) {
		for {
			select {
			case it := <-q.ch:
				batch = append(batch, it)
				if len(batch) >= q.maxBatch {
					flush(ctx)
				}
			default:
				flush(ctx)
				return
			}
		}
	}
	for {
		select {
		case it := <-q.ch:
			batch = append(batch, it)
			if len(batch) >= q.maxBatch {
				flush(base())
			}
		case <-t.C:
			flush(base())
		case done := <-q.flushc:
			drain(base())
			close(done)
		case <-q.stop:
			drain(q.stopCtx)
			return
		}
	}
}

func (q *queue[T]) exportBatch(ctx context.Context, batch []T) {
	n := 0
	for _, it := range batch {
		n += q.size(it)
	}
	if err := ctx.Err(); err != nil {
		// Past the shutdown deadline: abandoned, not attempted.
		return
	}
	if err := q.export(ctx, batch); err != nil {
		q.stats.Failed.Add(int64(n))
		q.stats.ExportErrors.Add(1)
		if q.onErr != nil {
			q.onErr(err)
		}
		return
	}
	q.stats.Exported.Add(int64(n))
}

// flush exports what is queued, waiting until ctx is done.
func (q *queue[T]) flush(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case q.flushc <- done:
	case <-q.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutdown refuses new items, exports what is queued under ctx and waits
// for that until ctx is done. Safe to call more than once.
func (q *queue[T]) shutdown(ctx context.Context) error {
	q.once.Do(func() {
		q.closed.Store(true)
		q.stopCtx = ctx
		close(q.stop)
	})
	select {
	case <-q.stopped:
		return nil
	case <-ctx.Done():
		return errors.Join(errors.New("export abandoned at the deadline"), ctx.Err())
	}
}
