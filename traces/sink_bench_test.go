package traces

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// discardExporter drops every span, so the benchmark measures the sink and
// the SDK's span bookkeeping, not an exporter.
type discardExporter struct{ spans int }

func (e *discardExporter) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	e.spans += len(s)
	return nil
}

func (e *discardExporter) Shutdown(context.Context) error { return nil }

const benchT0 = int64(1_700_000_000_000)

// benchWorkflow is one workflow of n agents as decoded events: started, a
// snapshot of every agent each time one starts and each time one ends,
// and the notification (2n+2 events).
func benchWorkflow(n int) []streamjson.Event {
	entries := make([]streamjson.Entry, n)
	for i := range entries {
		entries[i] = streamjson.Entry{Index: i + 1, Label: fmt.Sprintf("scan:%04d", i+1), PhaseIndex: 1, PhaseTitle: "Scan", State: "start", QueuedAt: benchT0}
	}
	evs := []streamjson.Event{{Kind: streamjson.KindTaskStarted, TaskID: "w1", TaskType: "local_workflow", WorkflowName: "bench"}}
	snap := func() {
		evs = append(evs, streamjson.Event{Kind: streamjson.KindTaskProgress, TaskID: "w1", HasProgress: true, Entries: append([]streamjson.Entry(nil), entries...)})
	}
	for i := range entries {
		entries[i].AgentID = fmt.Sprintf("a%d", i+1)
		entries[i].StartedAt = benchT0 + int64(i)
		snap()
		entries[i].State, entries[i].EndedAt, entries[i].Tokens = "done", benchT0+int64(2*i+1), int64(100*i)
		snap()
	}
	return append(evs, streamjson.Event{Kind: streamjson.KindTaskNotification, TaskID: "w1", Status: "completed"})
}

// BenchmarkSink is the traces sink behind a Tracker for one workflow per
// iteration (n agent spans, a phase span and the root span), with the
// SDK's deterministic ids and a synchronous exporter that discards.
// Compare with ingest's and metrics' tracker-only figures for the sink's
// own cost.
func BenchmarkSink(b *testing.B) {
	for _, n := range []int{10, 100} {
		evs := benchWorkflow(n)
		b.Run(fmt.Sprintf("traces/agents=%d", n), func(b *testing.B) {
			exp := &discardExporter{}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(NewIDGenerator()))
			defer tp.Shutdown(context.Background())
			sink := New(tp, Options{})
			b.ReportAllocs()
			for b.Loop() {
				tr := ingest.NewTracker(ingest.TrackerOptions{Sinks: []ingest.Sink{sink}, Grace: ingest.DefaultGrace})
				for i := range evs {
					tr.Handle(&evs[i], benchT0+int64(i))
				}
				tr.Close(benchT0 + int64(len(evs)))
			}
			if exp.spans < n {
				b.Fatalf("%d spans exported for %d agents", exp.spans, n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/agent")
		})
	}
}
