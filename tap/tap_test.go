package tap

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// drain receives every chunk until Chunks is closed and returns the
// concatenated data and the number of gap flags seen.
func drain(tap *Tap) (data []byte, gaps int) {
	for c := range tap.Chunks() {
		if c.Gap {
			gaps++
		}
		data = append(data, c.Data...)
		tap.Release(*c)
	}
	return data, gaps
}

func TestTapDeliversInOrderWithoutLoss(t *testing.T) {
	tap := NewTap(1 << 20)
	var want []byte
	for i, n := range []int{1, 0, 511, 512, 513, 4096, 5000, 65536, 70000, 131072, 131073, 400000} {
		p := bytes.Repeat([]byte{byte('a' + i)}, n)
		want = append(want, p...)
		if k, err := tap.Write(p); k != n || err != nil {
			t.Fatalf("Write(%d) = %d, %v", n, k, err)
		}
	}
	tap.Close()
	got, gaps := drain(tap)
	if !bytes.Equal(got, want) || gaps != 0 || tap.GapPending() {
		t.Fatalf("got %d bytes (want %d), %d gaps, pending %v", len(got), len(want), gaps, tap.GapPending())
	}
	in, dropped, chunks := tap.Stats()
	if in != int64(len(want)) || dropped != 0 || chunks != 0 {
		t.Fatalf("Stats = %d, %d, %d", in, dropped, chunks)
	}
}

func TestTapWriteDoesNotRetainInput(t *testing.T) {
	tap := NewTap(1 << 16)
	p := []byte("hello\n")
	tap.Write(p)
	copy(p, "XXXXXX")
	tap.Close()
	if got, _ := drain(tap); string(got) != "hello\n" {
		t.Fatalf("got %q: the tap kept a reference to the caller's buffer", got)
	}
}

// A consumer that never reads must not block the writer; the queue stays
// within its byte budget and everything beyond it is counted as dropped.
func TestTapNeverBlocksAndBoundsQueue(t *testing.T) {
	const queue = 64 << 10
	tap := NewTap(queue)
	done := make(chan struct{})
	var total int64
	go func() {
		defer close(done)
		p := make([]byte, 3000)
		for i := 0; i < 10000; i++ { // 30 MB into a 64 KiB queue
			tap.Write(p)
			total += int64(len(p))
			if q := tap.queued.Load(); q > queue {
				t.Errorf("queued %d > budget %d", q, queue)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Write blocked with a consumer that never reads")
	}
	in, dropped, chunks := tap.Stats()
	if in != total || dropped == 0 || chunks == 0 {
		t.Fatalf("Stats = in %d (want %d), dropped %d, chunks %d", in, total, dropped, chunks)
	}
	tap.Close()
	got, gaps := drain(tap)
	if int64(len(got))+dropped != total {
		t.Fatalf("delivered %d + dropped %d != written %d", len(got), dropped, total)
	}
	if gaps != 0 || !tap.GapPending() {
		// Nothing was delivered after the first drop, so the gap is pending.
		t.Fatalf("gaps %d, pending %v; want 0, true", gaps, tap.GapPending())
	}
}

func TestTapGapFlag(t *testing.T) {
	tap := NewTap(1024) // two 512-byte buffers
	a, b, c, d := []byte("aaaa"), []byte("bbbb"), []byte("cccc"), []byte("dddd")
	tap.Write(a)
	tap.Write(b)
	tap.Write(c) // queue full: dropped
	first, second := <-tap.Chunks(), <-tap.Chunks()
	if first.Gap || second.Gap || string(first.Data) != "aaaa" || string(second.Data) != "bbbb" {
		t.Fatalf("first %+v second %+v", first, second)
	}
	tap.Release(*first)
	tap.Release(*second)
	tap.Write(d)
	got := <-tap.Chunks()
	if !got.Gap || string(got.Data) != "dddd" {
		t.Fatalf("after a drop got %q gap=%v, want dddd gap=true", got.Data, got.Gap)
	}
	tap.Release(*got)
	tap.Close()
	if _, gaps := drain(tap); gaps != 0 || tap.GapPending() {
		t.Fatalf("gaps %d pending %v after a clean tail", gaps, tap.GapPending())
	}
	if _, dropped, chunks := tap.Stats(); dropped != 4 || chunks != 1 {
		t.Fatalf("dropped %d bytes in %d chunks, want 4 in 1", dropped, chunks)
	}
}

// With a budget below the largest class, big writes are split into pieces
// that fit instead of being dropped whole.
func TestTapSmallBudgetSplits(t *testing.T) {
	tap := NewTap(64 << 10)
	p := pattern(100 << 10)
	tap.Write(p[:40<<10])
	tap.Close()
	got, _ := drain(tap)
	if !bytes.Equal(got, p[:40<<10]) {
		t.Fatalf("delivered %d of %d bytes", len(got), 40<<10)
	}
}

func pattern(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i * 7)
	}
	return p
}

func TestTapCloseIdempotentAndWriteAfterClose(t *testing.T) {
	tap := NewTap(4096)
	tap.Write([]byte("x"))
	tap.Close()
	tap.Close()
	if n, err := tap.Write([]byte("late")); n != 4 || err != nil {
		t.Fatalf("Write after Close = %d, %v", n, err)
	}
	got, _ := drain(tap)
	if string(got) != "x" {
		t.Fatalf("got %q", got)
	}
	if _, dropped, _ := tap.Stats(); dropped != 4 {
		t.Fatalf("dropped %d, want 4", dropped)
	}
	tap.Release(Chunk{}) // an empty chunk is harmless
}

func TestTapSteadyStateDoesNotAllocate(t *testing.T) {
	tap := NewTap(1 << 20)
	small, large := make([]byte, 100), make([]byte, 120000)
	cycle := func() {
		tap.Write(small)
		tap.Write(large)
		tap.Release(*<-tap.Chunks())
		tap.Release(*<-tap.Chunks())
	}
	cycle() // warm the free lists
	if n := testing.AllocsPerRun(1000, cycle); n != 0 {
		t.Fatalf("%v allocations per write/release cycle, want 0", n)
	}
}

// TestTapRingHoldsPointers: the queue's slots are sized for the smallest
// chunks, one per 512 bytes of budget, so what a slot holds is multiplied by
// thousands and all of it is touched once a long stream cycled through the
// ring. A slot must hold a pointer to the chunk's header, which lives with
// its buffer, not the header itself (72 bytes: 295 KB per tap at run's
// 2 MiB default, against 33 KB).
func TestTapRingHoldsPointers(t *testing.T) {
	for _, budget := range []int{64 << 10, 2 << 20, 64 << 20} {
		tap := NewTap(budget)
		slot := reflect.TypeOf(tap.ch).Elem().Size()
		if ring := int(slot) * cap(tap.ch); slot > unsafe.Sizeof(uintptr(0)) || ring > budget/64+8 {
			t.Errorf("budget %d: ring of %d slots of %d bytes (%d bytes), want pointer-sized slots, at most 1/64 of the budget", budget, cap(tap.ch), slot, ring)
		}
	}
}

// TestTapHeldChunkUnchanged: a chunk received and not yet released keeps its
// header and bytes however much is written after it; only a released
// chunk's block is reused.
func TestTapHeldChunkUnchanged(t *testing.T) {
	tap := NewTap(64 << 10)
	tap.Write([]byte("held"))
	held := <-tap.Chunks()
	at := held.At
	for i := range 1000 {
		tap.Write([]byte(strings.Repeat("x", i%700+1)))
		tap.Release(*<-tap.Chunks())
	}
	if string(held.Data) != "held" || held.At != at || held.Gap {
		t.Fatalf("held chunk changed under later writes: %q at %d (was %d) gap=%v", held.Data, held.At, at, held.Gap)
	}
	tap.Release(*held)
	if q := tap.queued.Load(); q != 0 {
		t.Fatalf("queued %d after everything was released", q)
	}
}

// TestTapFreeListsTrimmedWhenIdle: a burst's buffers stay while they are
// taken at least once per queue of bytes, and are let go (down to
// idleFreeBytes per class) once a queue of bytes passed without them.
func TestTapFreeListsTrimmedWhenIdle(t *testing.T) {
	const queue = 2 << 20
	tap := NewTap(queue)
	p := make([]byte, 120000) // the 128 KiB class
	n := queue / (128 << 10)
	burst := func() { fillAndDrain(tap, p, n) }
	burst()
	burst()
	if got := len(tap.free[3]); got != n {
		t.Fatalf("%d buffers kept after bursts that took all %d, want %d", got, n, n)
	}
	// A consumer that keeps up: one buffer taken at a time, for two queues
	// of bytes (the first span ends in the burst's, the second is its own).
	for range 2 * n {
		tap.Write(p)
		tap.Release(*<-tap.Chunks())
	}
	if got, want := len(tap.free[3]), idleFreeBytes/(128<<10); got != want {
		t.Fatalf("%d buffers kept once the consumer keeps up, want %d", got, want)
	}
	for i, l := range tap.free {
		for _, b := range l {
			if b == nil || classFor(len(b.mem)) != i {
				t.Fatalf("class %d's free list holds %v after trimming", i, b)
			}
		}
	}
}

// fillAndDrain writes p n times, then receives and releases every chunk:
// the queue's level from full to empty.
func fillAndDrain(tap *Tap, p []byte, n int) {
	for range n {
		tap.Write(p)
	}
	for range n {
		tap.Release(*<-tap.Chunks())
	}
}

// TestTapLaggingConsumerReusesBuffers: a consumer that lets the queue fill
// and then drains it (a failing OTLP backend, then its retries giving up),
// over and over, allocates nothing once warm: the queue's level swings
// from full to empty, and trimming by that level freed and re-allocated
// the buffers on every swing (73 collections instead of 3 in a blast run).
func TestTapLaggingConsumerReusesBuffers(t *testing.T) {
	const queue = 2 << 20
	tap := NewTap(queue)
	p := make([]byte, 120000)
	n := queue / (128 << 10)
	swing := func() { fillAndDrain(tap, p, n) }
	swing()
	if allocs := testing.AllocsPerRun(20, swing); allocs != 0 {
		t.Fatalf("%.1f allocations per swing of the queue, want 0", allocs)
	}
}

// A concurrent writer and consumer (run under -race): every byte is either
// delivered in order or counted as dropped, and each delivered run after a
// drop carries the gap flag.
func TestTapConcurrent(t *testing.T) {
	tap := NewTap(16 << 10)
	const writes = 20000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var p [8]byte
		for i := uint64(0); i < writes; i++ {
			binary.BigEndian.PutUint64(p[:], i)
			tap.Write(p[:])
		}
		tap.Close()
	}()
	var delivered int64
	next := uint64(0)
	for cp := range tap.Chunks() {
		c := *cp // a copy: the loop below consumes Data, the header is the tap's
		for len(c.Data) > 0 {
			v := binary.BigEndian.Uint64(c.Data)
			if v < next || (v > next && !c.Gap) {
				t.Fatalf("got record %d, expected %d (gap=%v)", v, next, c.Gap)
			}
			c.Gap = false // only the first record of a chunk follows the gap
			next = v + 1
			c.Data = c.Data[8:]
			delivered += 8
		}
		tap.Release(c)
	}
	wg.Wait()
	in, dropped, _ := tap.Stats()
	if in != writes*8 || delivered+dropped != in {
		t.Fatalf("in %d delivered %d dropped %d", in, delivered, dropped)
	}
	if tap.queued.Load() != 0 {
		t.Fatalf("queued %d after everything was released", tap.queued.Load())
	}
}

// The next chunk after a drop says whether the dropped bytes ended a line:
// the last dropped byte decides.
func TestTapGapAtLineEnd(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dropped []string
		atEOL   bool
	}{
		{"dropped a whole line", []string{"cccc\n"}, true},
		{"dropped a partial line", []string{"cc\ncc"}, false},
		{"last drop decides: partial", []string{"cc\n", "cc"}, false},
		{"last drop decides: line end", []string{"cc", "cc\n"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tap := NewTap(1024) // two 512-byte buffers
			tap.Write([]byte("aaaa\n"))
			tap.Write([]byte("bbbb\n"))
			for _, d := range tc.dropped {
				tap.Write([]byte(d)) // queue full: dropped
			}
			tap.Release(*<-tap.Chunks())
			tap.Release(*<-tap.Chunks())
			tap.Write([]byte("dddd\n"))
			got := <-tap.Chunks()
			if !got.Gap || got.GapAtLineEnd != tc.atEOL || string(got.Data) != "dddd\n" {
				t.Fatalf("got %q gap=%v atLineEnd=%v, want gap, atLineEnd=%v", got.Data, got.Gap, got.GapAtLineEnd, tc.atEOL)
			}
			tap.Release(*got)
			// A chunk after a clean delivery has neither flag.
			tap.Write([]byte("eeee"))
			if got := <-tap.Chunks(); got.Gap || got.GapAtLineEnd {
				t.Fatalf("no drop, but gap=%v atLineEnd=%v", got.Gap, got.GapAtLineEnd)
			}
		})
	}
}

// The same for a tail dropped just before Close.
func TestTapGapPendingAtLineEnd(t *testing.T) {
	for _, tail := range []string{"cc\n", "cc"} {
		tap := NewTap(1024)
		tap.Write([]byte("aaaa\n"))
		tap.Write([]byte("bbbb\n"))
		tap.Write([]byte(tail)) // dropped
		tap.Close()
		drain(tap)
		atEOL := strings.HasSuffix(tail, "\n")
		if !tap.GapPending() || tap.GapPendingAtLineEnd() != atEOL {
			t.Errorf("tail %q: pending %v atLineEnd %v, want true %v", tail, tap.GapPending(), tap.GapPendingAtLineEnd(), atEOL)
		}
	}
	tap := NewTap(1024)
	tap.Write([]byte("a\n"))
	tap.Close()
	drain(tap)
	if tap.GapPending() || tap.GapPendingAtLineEnd() {
		t.Error("flags set without a drop")
	}
}

// Chunk.At is the tap's wall anchor plus monotonic time: it does not follow
// the wall clock after NewTap (an NTP step cannot move it).
func TestTapAtIsMonotonic(t *testing.T) {
	tap := NewTap(1 << 20)
	const anchor = int64(1_000_000_000_000_000_000) // not now: stands for a wall clock that stepped since
	tap.baseNs = anchor
	var prev int64
	for range 100 {
		tap.Write([]byte("x"))
		c := <-tap.Chunks()
		if c.At < anchor || c.At-anchor > int64(time.Minute) || c.At < prev {
			t.Fatalf("At %d: want the anchor %d plus the little monotonic time elapsed, never decreasing (prev %d)", c.At, anchor, prev)
		}
		prev = c.At
		tap.Release(*c)
	}
}
