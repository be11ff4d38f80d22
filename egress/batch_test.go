package egress

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// chanExporter hands every batch to the test and waits for its release.
type chanExporter struct {
	batches chan []sdktrace.ReadOnlySpan
	release chan struct{}
}

func (e *chanExporter) ExportSpans(ctx context.Context, s []sdktrace.ReadOnlySpan) error {
	e.batches <- append([]sdktrace.ReadOnlySpan(nil), s...)
	select {
	case <-e.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *chanExporter) Shutdown(context.Context) error { return nil }

// sampledSpans are n ended spans, sampled, in order of their names.
func sampledSpans(n int) []sdktrace.ReadOnlySpan {
	r := rand.New(rand.NewPCG(5, 5))
	out := make([]sdktrace.ReadOnlySpan, n)
	for i := range out {
		sc := randSpanContext(r).WithTraceFlags(trace.FlagsSampled)
		out[i] = tracetest.SpanStub{Name: string(rune('a' + i%26)), SpanContext: sc, StartTime: time.Unix(int64(i), 0)}.Snapshot()
	}
	return out
}

// TestBatcherWakesPerBatch: spans wait in the queue until a batch is full
// (no export, and no wake-up of the loop, per span), then go out in
// batches of the batch size, in order; a flush takes the rest; a full
// queue drops and counts, and nothing else is lost.
func TestBatcherWakesPerBatch(t *testing.T) {
	exp := &chanExporter{batches: make(chan []sdktrace.ReadOnlySpan, 16), release: make(chan struct{})}
	close(exp.release) // exports return at once until the queue-full case
	const queue = 4096 // batch size DefaultBatchSize (512); room for every span of the first part
	b := newBatcher(exp, nil, queue, time.Hour, time.Minute)
	spans := sampledSpans(3*DefaultBatchSize + 7)
	var got []sdktrace.ReadOnlySpan
	for _, s := range spans[:DefaultBatchSize-1] {
		b.OnEnd(s)
	}
	select {
	case <-b.full:
		t.Fatal("the loop was told of a batch before one was full")
	default:
	}
	for _, s := range spans[DefaultBatchSize-1:] {
		b.OnEnd(s)
	}
	// Three full batches, without a tick or a flush.
	for range 3 {
		var bt []sdktrace.ReadOnlySpan
		select {
		case bt = <-exp.batches:
		case <-time.After(5 * time.Second):
			b.mu.Lock()
			t.Fatalf("no batch: accepted %d, full %d, pending %d", b.accepted.Load(), b.queueFull.Load(), len(b.pending))
		}
		if len(bt) != DefaultBatchSize {
			t.Fatalf("batch of %d spans, want %d", len(bt), DefaultBatchSize)
		}
		got = append(got, bt...)
	}
	if err := b.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got = append(got, <-exp.batches...)
	if len(got) != len(spans) {
		t.Fatalf("%d spans exported, want %d", len(got), len(spans))
	}
	for i := range got {
		if got[i].StartTime() != spans[i].StartTime() {
			t.Fatalf("span %d out of order", i)
		}
	}
	if b.accepted.Load() != int64(len(spans)) || b.queueFull.Load() != 0 {
		t.Errorf("accepted %d, queue full %d", b.accepted.Load(), b.queueFull.Load())
	}

	// An export that hangs: the queue fills to its size, then drops.
	exp.release = make(chan struct{})
	for _, s := range spans[:DefaultBatchSize] {
		b.OnEnd(s)
	}
	<-exp.batches // taken out of the queue, held by the exporter
	for _, s := range sampledSpans(queue + 5) {
		b.OnEnd(s)
	}
	if got := b.queueFull.Load(); got != 5 {
		t.Errorf("queue full %d, want 5 (a queue of %d)", got, queue)
	}
	close(exp.release)
	go func() {
		for range exp.batches {
		}
	}()
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b.dropped() != 5 || b.exported.Load() != int64(len(spans)+DefaultBatchSize+queue) {
		t.Errorf("dropped %d, exported %d", b.dropped(), b.exported.Load())
	}
	b.OnEnd(spans[0])
	if b.late.Load() != 1 {
		t.Errorf("late %d, want the span ended after shutdown", b.late.Load())
	}
}
