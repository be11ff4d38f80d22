package egress

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	rep      *exportReporter // says failures; nil: not said

	flushc  chan chan struct{}
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once
	// stopCtx is the context of the final export, set before stop closes.
	stopCtx context.Context
	closed  atomic.Bool

	stats queueStats
}

// queueStats counts, in units of one signal (log records or metric data
// points), what a forwarder did with what it was handed.
type queueStats struct {
	// Received counts everything handed to the forwarder.
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
func (s *queueStats) Lost() int64 { return s.Received.Load() - s.Exported.Load() }

func newQueue[T any](capacity, maxBatch int, interval, timeout time.Duration, export func(context.Context, []T) error, size func(T) int, rep *exportReporter) *queue[T] {
	q := &queue[T]{
		ch:       make(chan T, capacity),
		export:   export,
		size:     size,
		maxBatch: maxBatch,
		interval: interval,
		timeout:  timeout,
		rep:      rep,
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
		if q.rep != nil {
			q.rep.exportFailed(err, n)
		}
		return
	}
	q.stats.Exported.Add(int64(n))
	if q.rep != nil {
		q.rep.exportOK()
	}
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

// loss is what the queue did not deliver, and why (see Loss); Items is 0
// when everything was delivered. Meant for after shutdown.
func (q *queue[T]) loss() Loss {
	st := &q.stats
	l := Loss{Items: st.Lost(), ExportErrors: st.ExportErrors.Load()}
	if q.rep != nil {
		l.Endpoint, l.Protocol = q.rep.endpoint, q.rep.protocol
		l.Signal = map[string]string{"log_records_lost": "log records", "metric_points_lost": "metric points"}[q.rep.lostKey]
	}
	if l.Items == 0 {
		return l
	}
	failed, qf, late, unsup := st.Failed.Load(), st.QueueFull.Load(), st.Late.Load(), st.Unsupported.Load()
	var why []string
	if q.rep != nil && failed > 0 {
		if c := q.rep.lastCause(); c != "" {
			why = append(why, c)
		}
	}
	if abandoned := l.Items - failed - qf - late - unsup; abandoned > 0 {
		why = append(why, fmt.Sprintf("%d abandoned at the shutdown deadline", abandoned))
	}
	if qf > 0 {
		why = append(why, fmt.Sprintf("%d dropped at a full queue", qf))
	}
	if late > 0 {
		why = append(why, fmt.Sprintf("%d came after shutdown", late))
	}
	if unsup > 0 {
		why = append(why, fmt.Sprintf("%d not convertible or past the bound on resources", unsup))
	}
	if len(why) == 0 {
		why = append(why, "export failed")
	}
	l.Cause = strings.Join(why, "; ")
	return l
}
