package traces

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// refTraceID and refSpanID are the id contract written the plain way (a
// streaming hash of the documented input): TraceID and SpanID are held to
// them, whatever buffer they hash from.
func refTraceID(task, run string) trace.TraceID {
	h := sha256.New()
	h.Write([]byte("cbc-otel/trace\x00" + task + "\x00" + run))
	var id trace.TraceID
	copy(id[:], h.Sum(nil))
	if !id.IsValid() {
		id[15] = 1
	}
	return id
}

func refSpanID(task, run, kind string, index int) trace.SpanID {
	h := sha256.New()
	h.Write([]byte("cbc-otel/span\x00" + task + "\x00" + run + "\x00" + kind + "\x00" + strconv.Itoa(index)))
	var id trace.SpanID
	copy(id[:], h.Sum(nil))
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// TestIDsContract pins the ids of a real run (a replay, a restart and the
// live wrapper must derive the same ones, release after release) and holds
// TraceID and SpanID to the reference for ids of every length, the ones
// longer than their stack buffer included.
func TestIDsContract(t *testing.T) {
	// printf 'cbc-otel/span\0ww1t7k50l\0000mx5yo7rw-0b933e5a\0agent\00012' | sha256sum
	const pinnedTrace, pinnedSpan = goldenTraceID, "f6fd02ed78341a4b"
	if got := TraceID("ww1t7k50l", "0mx5yo7rw-0b933e5a").String(); got != pinnedTrace {
		t.Errorf("TraceID of the pinned run = %s, want %s", got, pinnedTrace)
	}
	if got := SpanID("ww1t7k50l", "0mx5yo7rw-0b933e5a", kindAgent, 12).String(); got != pinnedSpan {
		t.Errorf("SpanID of the pinned agent = %s, want %s", got, pinnedSpan)
	}
	r := rand.New(rand.NewPCG(1, 2))
	str := func() string {
		n := []int{0, 1, 9, 36, 100, 127, 128, 129, 300, 5000}[r.IntN(10)]
		var b strings.Builder
		for range n {
			b.WriteByte(byte(r.IntN(256)))
		}
		return b.String()
	}
	for range 2000 {
		task, run, idx := str(), str(), r.IntN(1<<20)-1000
		if got, want := TraceID(task, run), refTraceID(task, run); got != want {
			t.Fatalf("TraceID(%q, %q) = %s, want %s", task, run, got, want)
		}
		for _, kind := range []string{kindWorkflow, kindPhase, kindAgent} {
			if got, want := SpanID(task, run, kind, idx), refSpanID(task, run, kind, idx); got != want {
				t.Fatalf("SpanID(%q, %q, %s, %d) = %s, want %s", task, run, kind, idx, got, want)
			}
		}
	}
}

// TestIDsAllocateNothing keeps the ids off the heap: they are computed for
// every span, and an allocation per call (a hash object, the decimal index)
// came back once already.
func TestIDsAllocateNothing(t *testing.T) {
	task, run := "86ab4e3c-4a5f-4e1e-9f1e-1c2d3e4f5a6b", "0mx5yo7rw-0b933e5a"
	if n := testing.AllocsPerRun(100, func() {
		_ = TraceID(task, run)
		_ = SpanID(task, run, kindAgent, 123456)
	}); n != 0 {
		t.Errorf("TraceID+SpanID: %v allocations per call, want 0", n)
	}
	ctx := withIDs(context.Background(), TraceID(task, run), SpanID(task, run, kindAgent, 1))
	g := NewIDGenerator()
	if n := testing.AllocsPerRun(100, func() { _, _ = g.NewIDs(ctx) }); n != 0 {
		t.Errorf("NewIDs of a wanted id: %v allocations, want 0", n)
	}
	if tid, sid := g.NewIDs(ctx); tid != TraceID(task, run) || sid != SpanID(task, run, kindAgent, 1) {
		t.Errorf("NewIDs = %s %s, not the wanted ids", tid, sid)
	}
	if sid := g.NewSpanID(ctx, TraceID(task, run)); sid != SpanID(task, run, kindAgent, 1) {
		t.Errorf("NewSpanID = %s, not the wanted id", sid)
	}
	if sid := g.NewSpanID(context.Background(), TraceID(task, run)); !sid.IsValid() {
		t.Error("NewSpanID without a wanted id: invalid id")
	}
}

// TestExemplarWritesNothing: IDs and Exemplar (metrics' exemplar func,
// called under metrics' lock from every stream of serve) leave the Sink's
// remembered ids alone, so they may run beside one another (-race), and
// agree with the spans' ids.
func TestExemplarWritesNothing(t *testing.T) {
	s := New(noop.NewTracerProvider(), Options{})
	r := &ingest.Run{TaskID: "ww1t7k50l", RunID: "0mx5yo7rw-0b933e5a"}
	before := s.runMemo
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				if tid, _ := s.Exemplar(r); tid != goldenTraceID {
					t.Errorf("Exemplar trace id %s, want %s", tid, goldenTraceID)
					return
				}
			}
		})
	}
	wg.Wait()
	if s.runMemo != before {
		t.Error("Exemplar wrote the Sink's remembered ids")
	}
	if tid, sid := s.IDs(r); tid != s.traceID(r.TaskID, r.RunID) || sid != s.workflowSpanID(r.TaskID, r.RunID) {
		t.Error("IDs and the Sink's own ids disagree")
	}
}
