package traces

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// TestSpanAllocations bounds what the Sink allocates per exported span
// beyond the Tracker's own work, with the SDK's provider and a synchronous
// exporter that discards. 22 per span before issue 33; 12 after
// (the SDK's own: the span, its attributes, its snapshot, the dedupe map,
// the start context, the two timestamps boxed into options; ours: the
// name and the context asking for the ids). The bound fails if an
// attribute copy, a context or an id's allocation comes back.
func TestSpanAllocations(t *testing.T) {
	const n = 20
	evs := benchWorkflow(n)
	spans := float64(n + 2) // the agents, the phase, the root
	run := func(sinks []ingest.Sink) float64 {
		return testing.AllocsPerRun(20, func() {
			tr := ingest.NewTracker(ingest.TrackerOptions{Sinks: sinks, Grace: ingest.DefaultGrace})
			for i := range evs {
				tr.Handle(&evs[i], benchT0+int64(i))
			}
			tr.Close(benchT0 + int64(len(evs)))
		})
	}
	exp := &discardExporter{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(NewIDGenerator()))
	defer tp.Shutdown(context.Background())
	perSpan := (run([]ingest.Sink{New(tp, Options{})}) - run(nil)) / spans
	if exp.spans == 0 {
		t.Fatal("no spans exported")
	}
	t.Logf("%.1f allocations per span", perSpan)
	// 13: one more under -race.
	if perSpan > 13.5 {
		t.Errorf("%.1f allocations per span, want ≤ 13.5", perSpan)
	}
}
