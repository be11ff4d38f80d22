package tap

import (
	"sync"
	"sync/atomic"
	"time"
)

// Chunk is a piece of tapped bytes. Gap reports that bytes were dropped just
// before Data, so a line framer must discard the partial line it carries.
// Data is only valid until the chunk is given back with Tap.Release.
type Chunk struct {
	Data []byte
	Gap  bool
	// GapAtLineEnd, with Gap, reports that the dropped bytes ended with a
	// newline: Data starts a new line, which is whole (only the partial
	// line before the gap is lost, not the first line after it).
	GapAtLineEnd bool
	// At is when the bytes passed through the tap, in Unix ns: the wall
	// clock when the tap was created plus the monotonic time elapsed since,
	// so a step of the wall clock (NTP) does not move it.
	At int64
	// when is the same instant as a time.Time carrying the monotonic
	// reading, which is shared by every tap of the process: the consumer
	// orders stdin against stdout by it (an interrupt written to the child
	// before it printed the stopped notification must be seen first), so
	// the order holds even when the taps' wall anchors disagree.
	when time.Time
	buf  *block // pooled backing store of Data; nil for an empty chunk
}

// block is a pooled buffer together with the header of the chunk it
// carries. The queue holds pointers to these headers rather than the
// headers themselves: its slots are sized for the smallest chunks (a 2 MiB
// budget is 4,097 slots), so 72-byte headers made each tap's ring 295 KB,
// all of it touched once a long stream has cycled through it (the 4 GiB
// case of bench's memory section), against 33 KB of pointers. The header
// lives as long as the buffer it describes, which the byte budget bounds.
type block struct {
	c   Chunk
	mem []byte
}

// PassedBefore reports whether c passed its tap before o passed its own
// (ties count as before). Chunks of a Tap compare by the monotonic clock;
// others, by At.
func (c *Chunk) PassedBefore(o *Chunk) bool {
	if !c.when.IsZero() && !o.when.IsZero() {
		return c.when.Compare(o.when) <= 0
	}
	return c.At <= o.At
}

// Buffer size classes. A tap is written with whatever one read of a pipe
// returned: from a few bytes (a control message) up to the reader's buffer
// (128 KiB in supervise). Small writes get small buffers so that the byte
// budget, which counts buffer capacity, is not eaten by tiny chunks; a full
// read fits one chunk (one hand-over to the consumer), and larger writes are
// split.
var tapClasses = [...]int{512, 4 << 10, 32 << 10, 128 << 10}

// maxFree caps each class's free list so that an idle tap does not keep the
// memory of its busiest moment forever.
const maxFree = 256

// idleFreeBytes is what each class's free list keeps however idle: a
// consumer that keeps up cycles a buffer or two per class without
// allocating. Beyond it, a buffer is let go once a whole queue's worth of
// bytes has passed without it being taken (the list's low-water mark over
// that span): kept, a burst's buffers were a fifth of the live heap of `run`
// under the state attack of docs/reliability.md and its peak RSS passed
// 32 MiB (31.8-32.4 in CI). Trimmed by the queue's level instead (down to
// this much whenever the queue fell under a quarter), a consumer that lags
// (a failing OTLP backend) freed and re-allocated its buffers on every
// swing: 73 collections instead of 3 over a 408 MiB blast, CPU 0.85 vs
// 0.56 s, throughput 0.69-0.83 of the healthy run in CI. A buffer a lagging
// consumer's producer takes at least once per queue of bytes is never idle.
const idleFreeBytes = 256 << 10

// Tap is an io.Writer that never blocks: Write copies p into pooled buffers
// and queues them for the consumer; when the queue (bounded in bytes) is full
// it drops the bytes and counts them. It decouples the passthrough pipe from
// telemetry: a slow or stuck consumer costs telemetry, never the child.
//
// The queue bound counts the capacity of the queued buffers, so it bounds the
// memory the tap holds, not just the payload.
type Tap struct {
	queueBytes int64
	maxClass   int          // largest class that fits the budget
	queued     atomic.Int64 // capacity of buffers handed out and not released
	ch         chan *Chunk
	// wakeAt is the queued capacity past which Write wakes a consumer
	// that waits out its batch interval (see MergeOptions.Batch): wake
	// holds one token, so a burst costs at most one wake-up, and a
	// consumer that sleeps never lets the queue fill up for that.
	wakeAt int64
	wake   chan struct{}
	ended  chan struct{} // closed by Close: the end wakes a batching consumer for good
	// behind is called by Merge, once, on its goroutine, when it first
	// finds this queue past wakeAt (see OnBehind). Set before Merge.
	behind func()
	// free holds each class's released buffers, a stack: the next one out
	// is the one the consumer last read, still in cache, and an idle tap's
	// coldest buffers sit at the bottom.
	freeMu sync.Mutex
	free   [len(tapClasses)][]*block
	// low is each list's low-water mark since the last trim: the bottom
	// low buffers were not taken since. released counts the bytes of
	// buffers released since the last trim. Both guarded by freeMu.
	low      [len(tapClasses)]int
	released int64

	// base anchors Chunk.At: its wall clock in Unix ns (baseNs) plus the
	// monotonic time elapsed since it.
	base   time.Time
	baseNs int64

	mu       sync.Mutex // serialises Write and Close so Write never sends on a closed channel
	closed   bool
	gap      bool // bytes were dropped since the last queued chunk; guarded by mu
	gapAtEOL bool // the last dropped byte was a newline; guarded by mu

	gapPending, gapPendingAtEOL atomic.Bool // set by Close from gap and gapAtEOL, read by the consumer

	bytesIn, bytesDropped, chunksDropped atomic.Int64

	abandoned atomic.Bool // see Abandon
}

// NewTap returns a tap whose queue holds at most queueBytes bytes of buffers.
// A queueBytes below the smallest buffer class is raised to it so that the
// tap can pass anything at all.
func NewTap(queueBytes int) *Tap {
	if queueBytes < tapClasses[0] {
		queueBytes = tapClasses[0]
	}
	// Every queued chunk holds at least the smallest class, so this many
	// slots can never be the binding limit: the byte budget is.
	slots := queueBytes/tapClasses[0] + 1
	base := time.Now()
	t := &Tap{queueBytes: int64(queueBytes), ch: make(chan *Chunk, slots), base: base, baseNs: base.UnixNano(),
		wakeAt: int64(queueBytes) / wakeFraction, wake: make(chan struct{}, 1), ended: make(chan struct{})}
	for i, size := range tapClasses {
		if size <= queueBytes {
			t.maxClass = i
		}
	}
	for i, size := range tapClasses {
		n := queueBytes / size
		if n > maxFree {
			n = maxFree
		}
		t.free[i] = make([]*block, 0, n+1)
	}
	return t
}

// Write queues a copy of p for the consumer, or drops it when the queue is
// full. It always returns len(p), nil: a tap failing must never fail the
// pipe it taps. It does not retain p. One goroutine writes.
func (t *Tap) Write(p []byte) (int, error) {
	n := len(p)
	if n == 0 {
		return 0, nil
	}
	t.bytesIn.Add(int64(n))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		t.drop(p)
		return n, nil
	}
	now := time.Now()
	at := t.baseNs + int64(now.Sub(t.base)) // monotonic: see Chunk.At
	for len(p) > 0 {
		class := min(classFor(len(p)), t.maxClass)
		size := tapClasses[class]
		if t.queued.Load()+int64(size) > t.queueBytes {
			// Drop all of the rest: delivering a later piece of this write
			// after a dropped one would only produce a second gap.
			t.drop(p)
			return n, nil
		}
		b := t.get(class)
		k := copy(b.mem, p)
		b.c = Chunk{Data: b.mem[:k], Gap: t.gap, GapAtLineEnd: t.gap && t.gapAtEOL, At: at, when: now, buf: b}
		q := t.queued.Add(int64(size))
		select {
		case t.ch <- &b.c:
			t.gap = false
			p = p[k:]
			if q >= t.wakeAt {
				t.signal()
			}
		default:
			// Unreachable with slots sized from the byte budget; kept so
			// that Write can never block whatever the sizing.
			t.queued.Add(-int64(size))
			t.put(b)
			t.drop(p)
			return n, nil
		}
	}
	return n, nil
}

// wakeFraction: Write wakes a batching consumer once a wakeFraction-th of
// the queue is taken. At 2 MiB (run's default) that is 256 KiB: a couple of
// the pump's largest reads, and seven eighths of the queue still free for
// what arrives while the consumer gets the CPU.
const wakeFraction = 8

// signal wakes a consumer waiting out its batch interval, if none is woken
// already. Never blocks.
func (t *Tap) signal() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// drop counts the dropped bytes p and remembers to flag the next chunk, and
// whether the bytes lost just before it end a line. mu held; p is not empty.
func (t *Tap) drop(p []byte) {
	t.bytesDropped.Add(int64(len(p)))
	t.chunksDropped.Add(1)
	t.gap = true
	t.gapAtEOL = p[len(p)-1] == '\n'
}

// classFor returns the smallest class holding n bytes, or the largest.
func classFor(n int) int {
	for i, size := range tapClasses {
		if n <= size {
			return i
		}
	}
	return len(tapClasses) - 1
}

// get returns a buffer of the class from the free list, allocating only when
// the list is empty (warm-up, or after maxFree was exceeded).
func (t *Tap) get(class int) *block {
	t.freeMu.Lock()
	if k := len(t.free[class]); k > 0 {
		b := t.free[class][k-1]
		t.free[class] = t.free[class][:k-1]
		t.low[class] = min(t.low[class], k-1)
		t.freeMu.Unlock()
		return b
	}
	t.freeMu.Unlock()
	return &block{mem: make([]byte, tapClasses[class])}
}

// OnBehind sets f to be called once, on the goroutine that merges the tap
// (Merge), the first time Merge finds the queue filled past an eighth: the
// consumer is falling behind a burst. It is how a consumer gives way to the
// passthrough only when there is load to give way to (see
// supervise.YieldToPassthrough): a paced child's lines never fill the
// queue that far, and then the consumer's goroutine stays free to run on
// any thread, which costs fewer thread hand-overs per wake-up. Call it
// before Merge starts; Merge calls at most one of its taps' f.
func (t *Tap) OnBehind(f func()) { t.behind = f }

// Chunks returns the queue. It is closed after Close once everything queued
// before Close has been received. A received chunk belongs to the tap: it is
// valid, like its Data, until it is given back with Release.
func (t *Tap) Chunks() <-chan *Chunk { return t.ch }

// Release gives a received chunk's buffer back to the tap. The consumer must
// not use c.Data afterwards, and must release each chunk exactly once;
// releasing frees queue space, so a consumer that never releases will see
// everything dropped once the queue is full.
func (t *Tap) Release(c Chunk) {
	if c.buf == nil {
		return
	}
	t.queued.Add(-int64(len(c.buf.mem)))
	t.put(c.buf)
}

// put returns a buffer to its class's free list, or lets the GC have it;
// after each queue's worth of released bytes it trims the lists.
func (t *Tap) put(b *block) {
	class := classFor(len(b.mem))
	t.freeMu.Lock()
	if len(t.free[class]) < cap(t.free[class]) {
		t.free[class] = append(t.free[class], b)
	}
	t.released += int64(len(b.mem))
	if t.released >= t.queueBytes {
		t.released = 0
		t.trimIdle()
	}
	t.freeMu.Unlock()
}

// trimIdle lets go of the buffers no Write took since the last trim (the
// bottom of each stack, its coldest), keeping idleFreeBytes per class, and
// starts the next span. freeMu held.
func (t *Tap) trimIdle() {
	for i, size := range tapClasses {
		l := t.free[i]
		if n := min(t.low[i], len(l)-max(1, idleFreeBytes/size)); n > 0 {
			copy(l, l[n:])
			clear(l[len(l)-n:])
			l = l[:len(l)-n]
			t.free[i] = l
		}
		t.low[i] = len(l)
	}
}

// Close ends the stream: Chunks is closed after the chunks already queued.
// Call it after the last Write; later Writes are counted as dropped. It is
// idempotent and never blocks.
func (t *Tap) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.closed = true
	t.gapPendingAtEOL.Store(t.gap && t.gapAtEOL)
	t.gapPending.Store(t.gap)
	close(t.ch)
	close(t.ended) // a batching consumer sees the end now, not at its next round
}

// GapPending reports, once Chunks is closed, that bytes were dropped after
// the last delivered chunk: the stream's tail is missing, so an unterminated
// last line must not be taken as complete.
func (t *Tap) GapPending() bool { return t.gapPending.Load() }

// GapPendingAtLineEnd reports, with GapPending, that the missing tail ended
// with a newline: only the partial line before it is incomplete. Like
// GapPending, it is meaningful once Chunks is closed.
func (t *Tap) GapPendingAtLineEnd() bool { return t.gapPendingAtEOL.Load() }

// Stats returns the bytes written to the tap, the bytes dropped and the
// number of dropped writes (or pieces of writes). Safe from any goroutine.
func (t *Tap) Stats() (bytesIn, bytesDropped, chunksDropped int64) {
	return t.bytesIn.Load(), t.bytesDropped.Load(), t.chunksDropped.Load()
}

// Abandon makes the consumer's Merge stop handing over this tap's chunks:
// each one still queued is released unread and counted as dropped, as if
// the queue had been full, and the stream's tail is then marked missing
// (GapPending). Called after Close, once the wrapper stops waiting for a consumer that
// is too slow to finish before it exits (the passthrough is over): every
// tapped byte is then either consumed or counted. Safe from any goroutine.
func (t *Tap) Abandon() { t.abandoned.Store(true) }

// abandon releases c unread and counts it as dropped (see Abandon).
func (t *Tap) abandon(c Chunk) {
	if len(c.Data) > 0 {
		t.bytesDropped.Add(int64(len(c.Data)))
		t.chunksDropped.Add(1)
		t.gapPendingAtEOL.Store(c.Data[len(c.Data)-1] == '\n')
		t.gapPending.Store(true)
	}
	t.Release(c)
}
