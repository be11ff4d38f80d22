package telemetry

import (
	"context"
	"log/slog"
	"runtime"
	"syscall"
	"testing"

	"github.com/cbc-otel/cbc-otel/tap"
)

// threadNice is the nice value of the calling thread (getpriority's raw
// result is 20 - nice). It runs on the consumer's goroutine: Errorf, not
// Fatal.
func threadNice(t *testing.T) int {
	t.Helper()
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Gettid())
	if err != nil {
		t.Errorf("getpriority: %v", err)
	}
	return 20 - p
}

// TestYieldWhenBehind: the consumer's thread is lowered only once it falls
// behind (a queue past an eighth), on the consumer's own goroutine, and
// then for every later chunk. The yield is supervise.YieldToPassthrough's
// two steps (which this package may not import): lock the thread, lower it.
func TestYieldWhenBehind(t *testing.T) {
	const queue = 64 << 10 // mark: 8 KiB, sixteen 512-byte buffers
	const nice = 10
	yield := func() error {
		runtime.LockOSThread()
		return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), nice)
	}
	for _, tc := range []struct {
		name   string
		burst  int // 512-byte class writes queued before the consumer starts
		lowers bool
	}{
		{name: "keeping up", burst: 4},
		{name: "behind a burst", burst: 40, lowers: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := tap.NewTap(queue)
			yieldWhenBehind(slog.New(slog.DiscardHandler), yield, out, nil)
			for range tc.burst {
				out.Write([]byte("line\n"))
			}
			out.Close()
			nices := make(chan []int, 1)
			go func() {
				// The goroutine may end locked to a lowered thread: the
				// runtime then discards the thread.
				before := threadNice(t)
				var seen []int
				tap.Merge(context.Background(), out, nil, tap.MergeOptions{Chunk: func(_ tap.Source, c tap.Chunk) {
					seen = append(seen, threadNice(t)-before)
					out.Release(c)
				}})
				nices <- seen
			}()
			seen := <-nices
			if len(seen) != tc.burst {
				t.Fatalf("%d chunks, want %d", len(seen), tc.burst)
			}
			for i, d := range seen {
				want := 0
				if tc.lowers {
					want = nice
				}
				if d != want {
					t.Fatalf("chunk %d handled at nice +%d, want +%d", i, d, want)
				}
			}
		})
	}
}
