package egress

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestQueueBounds: a full queue drops and counts; Shutdown past its
// deadline returns, and what was not exported is lost.
func TestQueueBounds(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	export := func(ctx context.Context, items []int) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	q := newQueue(2, 1, time.Hour, time.Hour, export, func(int) int { return 1 }, nil)
	q.stats.Received.Add(1)
	q.put(0)
	<-entered // the first item is being exported, the queue is empty
	for i := 1; i <= 5; i++ {
		q.stats.Received.Add(1)
		q.put(i)
	}
	if got := q.stats.QueueFull.Load(); got != 3 {
		t.Errorf("QueueFull = %d, want 3", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("shutdown past its deadline: %v", err)
	}
	q.stats.Received.Add(1)
	q.put(6)
	if q.stats.Late.Load() != 1 {
		t.Errorf("Late = %d, want 1", q.stats.Late.Load())
	}
	close(release)
	<-q.stopped
	// The first export succeeded once released; the two queued ones were
	// abandoned (their context was done).
	if q.stats.Exported.Load() != 1 || q.stats.Lost() != 6 {
		t.Errorf("exported %d, lost %d; want 1, 6", q.stats.Exported.Load(), q.stats.Lost())
	}
}
