package ingest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
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
		out, in := tap.NewTap(1<<20), tap.NewTap(1<<20)
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
		tp := tap.NewTap(1024) // two 512-byte buffers
		tp.Write([]byte(testStarted))
		tp.Write([]byte("partial line, lost with what follows it"))
		tp.Write([]byte(tc.dropped)) // queue full: dropped
		for range 2 {
			p.chunk(tap.SourceStdout, tp, *<-tp.Chunks())
		}
		tp.Write([]byte(testComplete))
		tp.Close()
		p.Consume(context.Background(), tp, nil, time.Hour)
		if got := finished(&rec); got != tc.want {
			t.Errorf("dropped %q: run %s, want %s (kinds %v)", tc.dropped, got, tc.want, rec.Kinds())
		}
	}
}

// TestIgnoredLinesDoNotAllocate: the bulk of a stream, lines the Tracker
// does not consume, costs no allocation in the decoder nor in the whole
// pipeline (framing, counting, decoding). Result lines are consumed (one
// per turn, for the session's cost) and are not in the list.
func TestIgnoredLinesDoNotAllocate(t *testing.T) {
	big := strings.Repeat("x", 64<<10)
	cases := map[string]string{
		"assistant":        `{"type":"assistant","message":{"content":[{"type":"text","text":"` + big + `"}]}}`,
		"user quoting":     `{"type":"user","message":{"content":"{\"type\":\"system\",\"subtype\":\"task_progress\"}"}}`,
		"system status":    `{"type":"system","subtype":"status","status":null,"session_id":"s"}`,
		"stream event":     `{"type":"stream_event","event":{"type":"content_block_delta"}}`,
		"keys reordered":   `{"uuid":"u","type":"assistant","message":{"content":"hi"}}`,
		"blank":            `   `,
		"crlf":             "{\"type\":\"assistant\"}\r",
		"not json":         `hello world`,
		"other system":     `{"type":"system","subtype":"compact_boundary","session_id":"s"}`,
		"other subtype":    `{"subtype":"hook_response","type":"system","session_id":"s"}`,
		"control elsewise": `{"type":"keep_alive"}`,
	}
	for name, line := range cases {
		t.Run(name, func(t *testing.T) {
			d := streamjson.NewDecoder(streamjson.DecodeOptions{})
			b := []byte(line)
			if ev, _ := d.Decode(tap.SourceStdout, b); ev != nil {
				t.Fatalf("decoded an event from %q", line)
			}
			if a := testing.AllocsPerRun(100, func() { d.Decode(tap.SourceStdout, b) }); a != 0 {
				t.Errorf("Decode: %v allocations per line", a)
			}
			p := NewPipeline(PipelineOptions{})
			chunk := []byte(strings.Repeat(line+"\n", 8))
			p.Write(tap.SourceStdout, chunk)
			if a := testing.AllocsPerRun(100, func() { p.Write(tap.SourceStdout, chunk) }); a != 0 {
				t.Errorf("Pipeline.Write: %v allocations per chunk of 8 lines", a)
			}
		})
	}
}
