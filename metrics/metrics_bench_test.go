package metrics

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// benchWorkflow is one workflow of n agents as decoded events: started, a
// snapshot of every agent each time one starts and each time one ends,
// and the notification (2n+2 events).
func benchWorkflow(n int) []streamjson.Event {
	entries := make([]streamjson.Entry, n)
	for i := range entries {
		entries[i] = streamjson.Entry{Index: i + 1, Label: fmt.Sprintf("scan:%04d", i+1), PhaseIndex: 1, PhaseTitle: "Scan", State: "start", QueuedAt: t0}
	}
	evs := []streamjson.Event{{Kind: streamjson.KindTaskStarted, TaskID: "w1", TaskType: "local_workflow", WorkflowName: "bench"}}
	snap := func() {
		evs = append(evs, streamjson.Event{Kind: streamjson.KindTaskProgress, TaskID: "w1", HasProgress: true, Entries: append([]streamjson.Entry(nil), entries...)})
	}
	for i := range entries {
		entries[i].AgentID = fmt.Sprintf("a%d", i+1)
		entries[i].StartedAt = t0 + int64(i)
		snap()
		entries[i].State, entries[i].EndedAt, entries[i].Tokens = "done", t0+int64(2*i+1), int64(100*i)
		snap()
	}
	return append(evs, streamjson.Event{Kind: streamjson.KindTaskNotification, TaskID: "w1", Status: "completed"})
}

// BenchmarkSink is the metrics sink behind a Tracker for one workflow per
// iteration; "tracker-only" is the same without the sink, so the
// difference is the sink's cost (per workflow, and per agent as
// ns/agent). "metrics+exemplars" has an Exemplar func that hashes and
// formats the run's ids, as the traces sink's does.
func BenchmarkSink(b *testing.B) {
	exemplar := func(r *ingest.Run) (string, string) {
		sum := sha256.Sum256([]byte(r.TaskID + "\x00" + r.RunID))
		return hex.EncodeToString(sum[:16]), hex.EncodeToString(sum[16:24])
	}
	for _, n := range []int{10, 100} {
		evs := benchWorkflow(n)
		for _, variant := range []string{"tracker-only", "metrics", "metrics+exemplars"} {
			name := fmt.Sprintf("%s/agents=%d", variant, n)
			b.Run(name, func(b *testing.B) {
				var sinks []ingest.Sink
				if variant != "tracker-only" {
					opts := Options{Version: "bench", NoRuntimeCollectors: true}
					if variant == "metrics+exemplars" {
						opts.Exemplar = exemplar
					}
					m, err := New(opts)
					if err != nil {
						b.Fatal(err)
					}
					sinks = append(sinks, m)
				}
				b.ReportAllocs()
				for b.Loop() {
					tr := ingest.NewTracker(ingest.TrackerOptions{Sinks: sinks, Grace: ingest.DefaultGrace})
					for i := range evs {
						tr.Handle(&evs[i], t0+int64(i))
					}
					tr.Close(t0 + int64(len(evs)))
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/agent")
			})
		}
	}
}
