package tap

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
)

// mergeRun runs Merge in the background and sends what it delivers, as
// "out:..." or "in:...", on the returned channel, closed at the end.
func mergeRun(t *testing.T, out, in *Tap) <-chan string {
	t.Helper()
	got := make(chan string, 64)
	go func() {
		defer close(got)
		err := Merge(context.Background(), out, in, MergeOptions{Chunk: func(src Source, c Chunk) {
			prefix := "out:"
			tap := out
			if src == SourceStdin {
				prefix, tap = "in:", in
			}
			got <- prefix + string(c.Data)
			tap.Release(c)
		}})
		if err != nil {
			t.Error(err)
		}
	}()
	return got
}

// Merge delivers the chunks of both taps in the order they passed the
// wrapper, stdin first on a tie.
func TestMergeOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps func(out, in *Tap)
		want  []string
	}{
		{
			name:  "in order of passage",
			steps: func(out, in *Tap) { out.Write([]byte("event")); in.Write([]byte("answer")) },
			want:  []string{"out:event", "in:answer"},
		},
		{
			name:  "a request before its effect",
			steps: func(out, in *Tap) { in.Write([]byte("interrupt")); out.Write([]byte("stopped")) },
			want:  []string{"in:interrupt", "out:stopped"},
		},
		{
			name: "interleaved",
			steps: func(out, in *Tap) {
				out.Write([]byte("e1"))
				in.Write([]byte("a1"))
				out.Write([]byte("e2"))
				out.Write([]byte("e3"))
				in.Write([]byte("a3"))
			},
			want: []string{"out:e1", "in:a1", "out:e2", "out:e3", "in:a3"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, in := NewTap(1<<20), NewTap(1<<20)
			tc.steps(out, in)
			out.Close()
			in.Close()
			var all []string
			for s := range mergeRun(t, out, in) {
				all = append(all, s)
			}
			if !slices.Equal(all, tc.want) {
				t.Errorf("order %q, want %q", all, tc.want)
			}
		})
	}
}

// The order of the taps holds whatever their wall anchors say: here the
// in tap's is an hour ahead (the wall clock stepped back an hour after it
// was anchored), so by At the interrupt would come after the notification
// it caused.
func TestMergeOrdersByMonotonicClock(t *testing.T) {
	out, in := NewTap(1<<20), NewTap(1<<20)
	in.baseNs += int64(time.Hour)
	out.Write([]byte("started"))
	in.Write([]byte("interrupt"))
	out.Write([]byte("stopped"))
	out.Close()
	in.Close()
	var got []string
	for s := range mergeRun(t, out, in) {
		got = append(got, s)
	}
	if want := []string{"out:started", "in:interrupt", "out:stopped"}; !slices.Equal(got, want) {
		t.Fatalf("merged %q, want %q", got, want)
	}
}

// Abandon after Close (run's exit giving up on a consumer that is behind):
// Merge hands over no chunk it had not taken yet, counts each as dropped,
// still calls End for both taps, and marks the tail missing. Every byte
// written is delivered or dropped, never both; the taken chunks come first.
func TestMergeAbandon(t *testing.T) {
	for _, eol := range []bool{true, false} {
		out, in := NewTap(1<<20), NewTap(1<<20)
		var written int64
		for i := range 100 {
			line := []byte(fmt.Sprintf("line %d\n", i))
			if i == 99 && !eol {
				line = line[:len(line)-1]
			}
			out.Write(line)
			in.Write(line)
			written += int64(len(line))
		}
		out.Close()
		in.Close()
		var delivered [NumSources]int64
		var ended [NumSources]bool
		taken := 0
		err := Merge(context.Background(), out, in, MergeOptions{
			Chunk: func(s Source, c Chunk) {
				delivered[s] += int64(len(c.Data))
				if taken++; taken == 10 {
					out.Abandon() // the exit gives up while the consumer works
					in.Abandon()
				}
				[NumSources]*Tap{out, in}[s].Release(c)
			},
			End: func(s Source) { ended[s] = true },
		})
		if err != nil {
			t.Fatal(err)
		}
		for s, tp := range []*Tap{out, in} {
			bytesIn, dropped, _ := tp.Stats()
			if bytesIn != written || delivered[s]+dropped != written || dropped == 0 || !ended[s] {
				t.Errorf("eol %v, %s: written %d, delivered %d + dropped %d, ended %v", eol, Source(s), written, delivered[s], dropped, ended[s])
			}
			if !tp.GapPending() || tp.GapPendingAtLineEnd() != eol {
				t.Errorf("eol %v, %s: gap pending %v at line end %v", eol, Source(s), tp.GapPending(), tp.GapPendingAtLineEnd())
			}
		}
	}
}

// mergeBatched runs Merge with a batch interval too long to ever elapse
// in a test: whatever it delivers after its first chunk, it delivered
// because something woke it (a filling queue, a close), not the interval.
// Delivered chunks are sent on got; Merge's error on done.
func mergeBatched(out *Tap, opts MergeOptions) (got <-chan string, done <-chan error) {
	g, d := make(chan string, 1024), make(chan error, 1)
	opts.Batch = time.Hour
	chunk := opts.Chunk
	opts.Chunk = func(src Source, c Chunk) {
		if chunk != nil {
			chunk(src, c)
		}
		g <- string(c.Data)
		out.Release(c)
	}
	go func() { d <- Merge(context.Background(), out, nil, opts) }()
	return g, d
}

// receive waits for n deliveries, failing the test after a generous
// deadline (far below the batch interval of mergeBatched).
func receive(t *testing.T, got <-chan string, n int) []string {
	t.Helper()
	var s []string
	deadline := time.After(30 * time.Second)
	for len(s) < n {
		select {
		case c := <-got:
			s = append(s, c)
		case <-deadline:
			t.Fatalf("got %d of %d chunks: the consumer was not woken", len(s), n)
		}
	}
	return s
}

// A batching Merge hands over a quiet tap's first chunk at once, and is
// woken early, whatever its interval, by a queue filling past an eighth
// (a consumer asleep must not make the tap drop) and by Close.
func TestMergeBatchWakes(t *testing.T) {
	const queue = 64 << 10 // wake mark: 8 KiB, sixteen 512-byte buffers
	for _, tc := range []struct {
		name   string
		writes int // 512-byte class writes after the first chunk
		close  bool
	}{
		// The sixteenth buffer reaches the mark: all sixteen are
		// queued when it wakes the consumer. (Fewer would wait for the
		// interval.)
		{name: "a filling queue wakes it", writes: 16},
		{name: "a filling queue wakes it, then close", writes: 40, close: true},
		{name: "close wakes it", writes: 1, close: true},
		{name: "close wakes it with nothing queued", close: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := NewTap(queue)
			got, done := mergeBatched(out, MergeOptions{})
			out.Write([]byte("first"))
			if c := receive(t, got, 1); c[0] != "first" {
				t.Fatalf("first delivery %q", c[0])
			}
			var want []string
			for i := range tc.writes {
				want = append(want, fmt.Sprintf("w%03d", i))
				out.Write([]byte(want[i]))
			}
			if tc.close {
				out.Close()
			}
			if got := receive(t, got, len(want)); !slices.Equal(got, want) {
				t.Errorf("delivered %q, want %q", got, want)
			}
			if tc.close {
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(30 * time.Second):
					t.Fatal("Merge did not return after Close")
				}
			}
			if _, dropped, _ := out.Stats(); dropped != 0 {
				t.Errorf("the tap dropped %d bytes", dropped)
			}
		})
	}
}

// OnBehind's function runs once, on the merging goroutine, when Merge
// first finds the queue past an eighth, and never while the queue stays
// below. (calls is a plain int read in Chunk: under -race a call from
// another goroutine is reported.)
func TestTapOnBehind(t *testing.T) {
	const queue = 64 << 10 // wake mark: 8 KiB
	for _, tc := range []struct {
		name      string
		burst     int // 512-byte class writes queued before Merge starts
		wantCalls int
	}{
		{name: "below the mark", burst: 4, wantCalls: 0},
		{name: "past the mark", burst: 20, wantCalls: 1},
		{name: "far past the mark", burst: 100, wantCalls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := NewTap(queue)
			calls, seen := 0, 0
			out.OnBehind(func() { calls++ })
			for i := range tc.burst {
				out.Write([]byte(fmt.Sprintf("b%03d", i)))
			}
			got, done := mergeBatched(out, MergeOptions{Chunk: func(Source, Chunk) { seen = calls }})
			receive(t, got, tc.burst)
			out.Close()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if calls != tc.wantCalls || seen != tc.wantCalls {
				t.Errorf("OnBehind's function ran %d times (%d seen by the last chunk), want %d", calls, seen, tc.wantCalls)
			}
		})
	}
}

// A negative Batch hands every chunk over as soon as it is queued: each
// write is delivered before the next one is made.
func TestMergeNoBatch(t *testing.T) {
	out := NewTap(64 << 10)
	got := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Merge(context.Background(), out, nil, MergeOptions{Batch: -1, Chunk: func(_ Source, c Chunk) {
			got <- string(c.Data)
			out.Release(c)
		}})
	}()
	for i := range 5 {
		w := fmt.Sprintf("w%d", i)
		out.Write([]byte(w))
		if c := receive(t, got, 1); c[0] != w {
			t.Fatalf("delivered %q, want %q", c[0], w)
		}
	}
	out.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Between two chunks of a batch Merge lets a runnable goroutine run first
// (the pump, woken while every P is busy): with one P, a goroutine made
// runnable by the first chunk's handler has run before the second chunk
// is handled.
func TestMergeBatchYieldsBetweenChunks(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	out := NewTap(64 << 10)
	for range 3 {
		out.Write([]byte("line\n"))
	}
	out.Close()
	release, ran := make(chan struct{}), make(chan struct{})
	go func() { <-release; close(ran) }()
	var handled int
	var ranBefore []bool
	err := Merge(context.Background(), out, nil, MergeOptions{Chunk: func(_ Source, c Chunk) {
		select {
		case <-ran:
			ranBefore = append(ranBefore, true)
		default:
			ranBefore = append(ranBefore, false)
		}
		if handled++; handled == 1 {
			close(release) // the goroutine is runnable, not running: one P, ours
		}
		out.Release(c)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{false, true, true}; !slices.Equal(ranBefore, want) {
		t.Errorf("the woken goroutine had run before chunk i: %v, want %v", ranBefore, want)
	}
}
