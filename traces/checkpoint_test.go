package traces

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/golden"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// tracing is a Sink exporting to memory, and its pipeline.
type tracing struct {
	exp  *tracetest.InMemoryExporter
	sink *Sink
	p    *ingest.Pipeline
}

func newTracing(t *testing.T) *tracing {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(NewIDGenerator()))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	s := New(tp, Options{})
	p := ingest.NewPipeline(ingest.PipelineOptions{
		Decode:  streamjson.DecodeOptions{KeepErrors: true},
		Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{s}, Grace: ingest.DefaultGrace},
	})
	return &tracing{exp: exp, sink: s, p: p}
}

func (tr *tracing) feed(lines [][]byte) {
	for _, l := range lines {
		tr.p.Write(tap.SourceStdout, l)
	}
}

// A restart anywhere in a stream (the Tracker's snapshot and the Sink's
// stream state carried over) exports the spans an uninterrupted run does:
// same ids, times, parents and links.
func TestStreamStateRestartIsExact(t *testing.T) {
	var sawDeferred, sawLinks bool
	for _, file := range recordings(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := bytes.SplitAfter(data, []byte("\n"))
		whole := newTracing(t)
		whole.feed(lines)
		whole.p.Close()
		want := Tree(whole.exp.GetSpans())
		for _, cut := range []int{1, len(lines) / 4, len(lines) / 2, 3 * len(lines) / 4, len(lines) - 2} {
			before := newTracing(t)
			before.feed(lines[:cut])
			open := before.p.Tracker().Open()
			state, err := before.sink.SaveStream(open)
			if err != nil {
				t.Fatal(err)
			}
			snap := before.p.Tracker().Snapshot()
			sawDeferred = sawDeferred || strings.Contains(string(state), `"deferred"`)
			sawLinks = sawLinks || strings.Contains(string(state), `"links"`)

			after := newTracing(t)
			if err := after.p.Tracker().Restore(snap, snap.Now); err != nil {
				t.Fatal(err)
			}
			commit, err := after.sink.RestoreStream(state, after.p.Tracker().Open())
			if err != nil {
				t.Fatal(err)
			}
			commit()
			after.feed(lines[cut:])
			after.p.Close()
			got := Tree(append(before.exp.GetSpans(), after.exp.GetSpans()...))
			if got != want {
				t.Fatalf("%s, restart after line %d of %d: spans differ\n%s", file, cut, len(lines), golden.Diff(want, got))
			}
		}
	}
	if !sawDeferred || !sawLinks {
		t.Fatalf("no cut saved deferred agents (%v) or links (%v): the test covers too little", sawDeferred, sawLinks)
	}
}

// A workflow launched by a task that ended before the restart still links
// to that task's span: the Sink's task → run map is carried over (no
// recording has such links, hence a synthetic stream).
func TestStreamStateKeepsParentLinks(t *testing.T) {
	lines := [][]byte{
		[]byte(`{"type":"system","subtype":"task_started","task_id":"agent1","run_id":"r0","task_type":"local_agent","session_id":"S"}` + "\n"),
		[]byte(`{"type":"system","subtype":"task_notification","task_id":"agent1","status":"completed","session_id":"S"}` + "\n"),
		[]byte(`{"type":"system","subtype":"task_started","task_id":"wf1","run_id":"r1","task_type":"local_workflow","workflow_name":"w","parent_task_id":"agent1","session_id":"S"}` + "\n"),
		[]byte(`{"type":"system","subtype":"task_notification","task_id":"wf1","status":"completed","session_id":"S"}` + "\n"),
	}
	before := newTracing(t)
	before.feed(lines[:3])
	state, err := before.sink.SaveStream(before.p.Tracker().Open())
	if err != nil {
		t.Fatal(err)
	}
	snap := before.p.Tracker().Snapshot()
	after := newTracing(t)
	if err := after.p.Tracker().Restore(snap, snap.Now); err != nil {
		t.Fatal(err)
	}
	commit, err := after.sink.RestoreStream(state, after.p.Tracker().Open())
	if err != nil {
		t.Fatal(err)
	}
	commit()
	after.feed(lines[3:])
	after.p.Close()
	spans := after.exp.GetSpans()
	if len(spans) != 1 || len(spans[0].Links) != 1 {
		t.Fatalf("spans after the restart %v; want the workflow, linked to agent1", Tree(spans))
	}
	if tid, sid := IDs(&ingest.Run{TaskID: "agent1", RunID: "r0"}); spans[0].Links[0].SpanContext.TraceID() != tid || spans[0].Links[0].SpanContext.SpanID() != sid {
		t.Fatalf("link %v, want agent1's span", spans[0].Links[0].SpanContext)
	}
}

func TestRestoreStreamEdges(t *testing.T) {
	open := []*ingest.Run{{TaskID: "w", RunID: "r1", Workflow: true}}
	for _, tc := range []struct {
		name, state  string
		wantErr      bool
		wantLinks    int
		wantDeferred int
	}{
		{name: "not JSON", state: `{`, wantErr: true},
		{name: "wrong shape", state: `{"links":5}`, wantErr: true},
		{name: "nothing saved: the open runs are learnt", state: ``, wantLinks: 1},
		{name: "deferred agents of an open run", state: `{"deferred":[{"task":"w","run":"r1","agents":[2,3]}]}`, wantDeferred: 1},
		{name: "deferred agents of a run not open are dropped", state: `{"deferred":[{"task":"gone","run":"r","agents":[1]}]}`},
		{name: "links, an empty task id skipped", state: `{"links":[["a","1"],["","x"],["b",""]]}`, wantLinks: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTracing(t).sink
			commit, err := s.RestoreStream(json.RawMessage(tc.state), open)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if len(s.lastRun) != 0 || len(s.deferred) != 0 {
				t.Fatal("state changed before the commit")
			}
			commit()
			if len(s.lastRun) != tc.wantLinks || len(s.deferred) != tc.wantDeferred {
				t.Fatalf("links %v deferred %v; want %d, %d", s.lastRun, s.deferred, tc.wantLinks, tc.wantDeferred)
			}
		})
	}
	if b, err := newTracing(t).sink.SaveStream(nil); b != nil || err != nil {
		t.Fatalf("an empty Sink saved %s, %v", b, err)
	}
}
