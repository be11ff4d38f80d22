package ingest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// recorded is what a test compares of a lifecycle event: kind, run identity
// and status, agent index and state.
type recordedKey struct {
	Kind   LifecycleKind
	Task   string
	RunID  string
	Status RunStatus
	Agent  int
	State  AgentState
	Viol   Violation
}

func keysOf(rec *Recorder) []recordedKey {
	out := make([]recordedKey, 0, len(rec.Events))
	for _, e := range rec.Events {
		out = append(out, recordedKey{e.Kind, e.Run.TaskID, e.Run.RunID, e.Run.Status, e.Agent.Index, e.Agent.State, e.Violation})
	}
	return out
}

// replayWithRestart feeds lines[:cut] to one pipeline, snapshots its
// Tracker through JSON, restores a fresh pipeline from it and feeds the
// rest. Replay clock, so that the result is deterministic.
func replayWithRestart(t *testing.T, lines [][]byte, cut int) []recordedKey {
	t.Helper()
	rec := &Recorder{}
	p := NewPipeline(PipelineOptions{Tracker: TrackerOptions{Sinks: []Sink{rec}}})
	for _, l := range lines[:cut] {
		p.Write(tap.SourceStdout, l)
	}
	b, err := json.Marshal(p.Tracker().Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var st TrackerState
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	q := NewPipeline(PipelineOptions{Tracker: TrackerOptions{Sinks: []Sink{rec}}})
	if err := q.Tracker().Restore(st, st.Now); err != nil {
		t.Fatal(err)
	}
	for _, l := range lines[cut:] {
		q.Write(tap.SourceStdout, l)
	}
	q.Close()
	return keysOf(rec)
}

func TestSnapshotRestoreEveryLine(t *testing.T) {
	files, _ := filepath.Glob("../testdata/simulate/*.ndjson")
	n := 0
	for _, f := range files {
		if bytes.HasSuffix([]byte(f), []byte(".expect.ndjson")) {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := bytes.SplitAfter(data, []byte("\n"))
		rec := &Recorder{}
		p := NewPipeline(PipelineOptions{Tracker: TrackerOptions{Sinks: []Sink{rec}}})
		for _, l := range lines {
			p.Write(tap.SourceStdout, l)
		}
		p.Close()
		want := keysOf(rec)
		for cut := 0; cut <= len(lines); cut++ {
			got := replayWithRestart(t, lines, cut)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: restart after line %d: events differ\n got %v\nwant %v", filepath.Base(f), cut, got, want)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no recordings found")
	}
}

func TestRestoreKeepsRemainingGrace(t *testing.T) {
	tr := NewTracker(TrackerOptions{Grace: DefaultGrace})
	tr.Handle(&streamjson.Event{Kind: streamjson.KindTaskStarted, TaskID: "t1", TaskType: "local_workflow", WorkflowName: "w"}, 1000)
	tr.Handle(&streamjson.Event{Kind: streamjson.KindTaskNotification, TaskID: "t1", Status: "completed"}, 2000)
	st := tr.Snapshot()
	if len(st.Runs) != 1 || st.Runs[0].GraceEnd != 2000+DefaultGrace.Milliseconds() {
		t.Fatalf("snapshot: %+v", st)
	}
	rec := &Recorder{}
	r := NewTracker(TrackerOptions{Sinks: []Sink{rec}})
	// Down for an hour: the window must still have its 5 s.
	if err := r.Restore(st, 2000+3600_000); err != nil {
		t.Fatal(err)
	}
	r.Advance(2000 + 3600_000 + 4000)
	if len(rec.Events) != 0 {
		t.Fatalf("grace closed early: %v", rec.Kinds())
	}
	r.Advance(2000 + 3600_000 + 5000)
	if k := rec.Kinds(); len(k) != 1 || k[0] != RunFinalized {
		t.Fatalf("want one RunFinalized, got %v", k)
	}
	if err := r.Restore(st, 0); err == nil {
		t.Fatal("Restore on a used Tracker succeeded")
	}
}
