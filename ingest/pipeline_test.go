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

const (
	testStarted  = `{"type":"system","subtype":"task_started","task_id":"w","task_type":"local_workflow","workflow_name":"x","session_id":"s"}` + "\n"
	testInterr   = `{"type":"control_request","request_id":"r","request":{"subtype":"interrupt","session_id":"s"}}` + "\n"
	testStopped  = `{"type":"system","subtype":"task_notification","task_id":"w","status":"stopped"}` + "\n"
	testComplete = `{"type":"system","subtype":"task_notification","task_id":"w","status":"completed"}` + "\n"
)

// The order of the taps holds whatever their wall anchors say: here the
// stdin tap's is an hour ahead (the wall clock stepped back an hour after it
// was anchored), so by At the interrupt would come after the notification it
// caused.
func TestConsumeOrdersTapsByMonotonicClock(t *testing.T) {
	var rec Recorder
	p := NewPipeline(PipelineOptions{Live: true, Tracker: TrackerOptions{Sinks: []Sink{&rec}}})
	out, in := NewTap(1<<20), NewTap(1<<20)
	in.baseNs += int64(time.Hour)
	out.Write([]byte(testStarted))
	in.Write([]byte(testInterr))
	out.Write([]byte(testStopped))
	out.Close()
	in.Close()
	p.Consume(context.Background(), out, in, time.Hour)
	matched := 0
	for _, e := range rec.Events {
		if e.Kind == InterruptMatched {
			matched++
		}
	}
	if matched != 1 {
		t.Fatalf("%d interrupt matches, want 1 (kinds %v)", matched, rec.Kinds())
	}
}

// finished returns the terminal status of run w, or "none".
func finished(rec *Recorder) string {
	for _, e := range rec.Events {
		if e.Kind == RunFinished {
			return e.Run.Status.String()
		}
	}
	return "none"
}

// The tap dropped bytes that ended on a line boundary: the next line is
// whole and must be decoded (here the completion of the run), while a gap
// in the middle of a line still discards the rest of that line.
func TestConsumeGapAtLineEndKeepsNextLine(t *testing.T) {
	for _, tc := range []struct {
		dropped string
		want    string
	}{
		{"noise\n", "completed"},          // a whole line lost: the next is whole
		{"noise", "abandoned"},            // the next "line" is the tail of the lost one
		{"noi\nse\nnoise\n", "completed"}, // several lines lost, ending on a boundary
	} {
		var rec Recorder
		p := NewPipeline(PipelineOptions{Live: true, Tracker: TrackerOptions{Sinks: []Sink{&rec}}})
		tap := NewTap(1024) // two 512-byte buffers
		tap.Write([]byte(testStarted))
		tap.Write([]byte("partial line, lost with what follows it"))
		tap.Write([]byte(tc.dropped)) // queue full: dropped
		for range 2 {
			p.chunk(SourceStdout, tap, <-tap.Chunks())
		}
		tap.Write([]byte(testComplete))
		tap.Close()
		p.Consume(context.Background(), tap, nil, time.Hour)
		if got := finished(&rec); got != tc.want {
			t.Errorf("dropped %q: run %s, want %s (kinds %v)", tc.dropped, got, tc.want, rec.Kinds())
		}
	}
}
