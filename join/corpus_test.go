package join

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cbc-otel/cbc-otel/clitelemetry"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/tap"
)

const otelCorpus = "../testdata/corpus/claude-code-2.1.334-otel"

// replayRecording feeds the recorded stream through a pipeline with j as a
// sink, then the recorded spans to j, and returns the runs the stream had.
func replayRecording(t *testing.T, dir string, j *Joiner) []ingest.Run {
	t.Helper()
	var col runsSeen
	p := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Grace: time.Second, Sinks: []ingest.Sink{j, &col}}})
	stream, err := os.ReadFile(filepath.Join(dir, "stream.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	p.Write(tap.SourceStdout, stream)
	p.Close()
	b, err := os.ReadFile(filepath.Join(dir, "traces.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var rec struct {
			Body json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatal(err)
		}
		req, err := clitelemetry.DecodeTraces(rec.Body, clitelemetry.JSON)
		if err != nil {
			t.Fatal(err)
		}
		j.Traces(context.Background(), req)
	}
	j.Expire(time.Now(), true)
	return col.runs
}

type runsSeen struct{ runs []ingest.Run }

func (c *runsSeen) Observe(l ingest.Lifecycle) {
	if l.Kind == ingest.RunFinalized {
		c.runs = append(c.runs, l.Run.Clone())
	}
}

// TestRecordedCLITelemetry re-parents what the real Claude Code 2.1.334
// exported, against the stream it printed in the same run.
func TestRecordedCLITelemetry(t *testing.T) {
	recorded, _ := trace.TraceIDFromHex("0123456789abcdef0123456789abcdef")
	t.Run("complete under TRACEPARENT", func(t *testing.T) {
		out := new(sent)
		j := New(Options{Spans: out.fwd, Hold: time.Minute, AgentSpan: func(task, run string, i int) trace.SpanContext {
			return trace.NewSpanContext(trace.SpanContextConfig{TraceID: recorded, SpanID: trace.SpanID{0xa, byte(i)}})
		}})
		runs := replayRecording(t, filepath.Join(otelCorpus, "complete-traceparent"), j)
		st := j.Stats()
		if st.Reparented.Load() != 6 || st.Unmatched.Load() != 0 || st.Foreign.Load() != 0 || st.Spans.Load() != int64(len(out.spans)) {
			t.Errorf("reparented %d, unmatched %d, foreign %d, forwarded %d of %d", st.Reparented.Load(), st.Unmatched.Load(),
				st.Foreign.Load(), len(out.spans), st.Spans.Load())
		}
		if len(runs) != 1 {
			t.Fatalf("%d runs in the recording", len(runs))
		}
		byAgent := map[string]int{}
		for _, a := range runs[0].Agents {
			byAgent[a.AgentID] = a.Index
		}
		for _, sp := range out.spans {
			id := str(sp.GetAttributes(), keyAgentID)
			if id == "" {
				continue
			}
			if want := byAgent[id]; sp.GetParentSpanId()[1] != byte(want) {
				t.Errorf("%s of %s under agent %d, want %d", sp.GetName(), id, sp.GetParentSpanId()[1], want)
			}
		}
		if sc, ok := j.Launcher(runs[0].ToolUseID); !ok || sc.SpanID().String() != "66148255fb722aaa" {
			t.Errorf("launcher of %s = %v %v, want the Workflow tool span 66148255fb722aaa", runs[0].ToolUseID, sc.SpanID(), ok)
		}
	})
	t.Run("resumed, without TRACEPARENT", func(t *testing.T) {
		// Without a TRACEPARENT each interaction is a trace of its own, none
		// of them ours: nothing can be re-parented, all of it is said. The
		// agents the resumed run shows cached stay the first run's.
		claimed := map[string]string{}
		var runs []ingest.Run
		j := New(Options{Hold: time.Minute, AgentSpan: func(task, run string, i int) trace.SpanContext {
			claimed[task] = run
			return trace.NewSpanContext(trace.SpanContextConfig{TraceID: recorded, SpanID: trace.SpanID{0xa, byte(i)}})
		}})
		runs = replayRecording(t, filepath.Join(otelCorpus, "cache-resume"), j)
		st := j.Stats()
		if st.Reparented.Load() != 0 || st.Foreign.Load() != 6 {
			t.Errorf("reparented %d, foreign %d; want 0 and 6", st.Reparented.Load(), st.Foreign.Load())
		}
		if len(runs) != 2 {
			t.Fatalf("%d runs, want the run and its resume", len(runs))
		}
		if _, ok := claimed[runs[1].TaskID]; ok {
			t.Errorf("the resumed run claimed spans of agents it only showed cached: %v", claimed)
		}
	})
}
