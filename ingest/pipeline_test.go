package ingest

import (
	"context"
	"testing"
	"time"
)

// TestConsumeOrdersTapsByPassage: the interrupt went to the child before the
// child printed the stopped notification. Both sit in their taps when the
// consumer looks; it must take the interrupt first (by when each passed the
// wrapper), or the cancel latency is lost. Without the ordering, select picks
// either queue at random and this fails about half the time over the runs.
func TestConsumeOrdersTapsByPassage(t *testing.T) {
	for i := range 50 {
		var rec Recorder
		p := NewPipeline(PipelineOptions{Live: true, Tracker: TrackerOptions{Sinks: []Sink{&rec}}})
		out, in := NewTap(1<<20), NewTap(1<<20)
		out.Write([]byte(`{"type":"system","subtype":"task_started","task_id":"w","task_type":"local_workflow","workflow_name":"x","session_id":"s"}` + "\n"))
		in.Write([]byte(`{"type":"control_request","request_id":"r","request":{"subtype":"interrupt","session_id":"s"}}` + "\n"))
		out.Write([]byte(`{"type":"system","subtype":"task_notification","task_id":"w","status":"stopped"}` + "\n"))
		out.Close()
		in.Close()
		p.Consume(context.Background(), out, in, time.Hour)
		matched := 0
		for _, e := range rec.Events {
			if e.Kind == InterruptMatched {
				matched++
				if e.LatencyMs < 0 {
					t.Fatalf("negative latency %d", e.LatencyMs)
				}
			}
		}
		if matched != 1 {
			t.Fatalf("round %d: %d interrupt matches, want 1 (kinds %v)", i, matched, rec.Kinds())
		}
	}
}
