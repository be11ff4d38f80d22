package ingest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
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

// TestSnapshotJSONOmitsZero: a checkpoint leaves out every field at its
// zero value (with 256 busy streams a checkpoint holds ~6,000 runs in
// their grace window each second, and writing every zero field made it
// ~3 KB a run), yet decodes to exactly the state encoded, at every line of
// every recording; and a checkpoint of the earlier format, every field
// written, still loads as the same state.
func TestSnapshotJSONOmitsZero(t *testing.T) {
	files, _ := filepath.Glob("../testdata/simulate/*.ndjson")
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".expect.ndjson") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p := NewPipeline(PipelineOptions{})
		for _, l := range bytes.SplitAfter(data, []byte("\n")) {
			p.Write(tap.SourceStdout, l)
			st := p.Tracker().Snapshot()
			for _, rs := range st.Runs {
				b, err := json.Marshal(rs.Run)
				if err != nil {
					t.Fatal(err)
				}
				if k := zeroField(t, b); k != "" {
					t.Fatalf("%s: a zero field is written: %s in %s", filepath.Base(f), k, b)
				}
				var back Run
				if err := json.Unmarshal(b, &back); err != nil {
					t.Fatal(err)
				}
				if want := exportedOnly(rs.Run); !reflect.DeepEqual(back, want) {
					t.Fatalf("%s: the run decodes differently\n got %+v\nwant %+v", filepath.Base(f), back, want)
				}
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("no run was checkpointed")
	}

	old, err := os.ReadFile("testdata/tracker-state-all-fields.json")
	if err != nil {
		t.Fatal(err)
	}
	var was TrackerState
	if err := json.Unmarshal(old, &was); err != nil {
		t.Fatal(err)
	}
	if len(was.Runs) != 2 || len(was.Runs[0].Run.Agents) != 4 {
		t.Fatalf("fixture: want 2 runs, the first of 4 agents: %+v", was)
	}
	b, err := json.Marshal(was)
	if err != nil {
		t.Fatal(err)
	}
	var now TrackerState
	if err := json.Unmarshal(b, &now); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(now, was) {
		t.Fatalf("an earlier checkpoint loads differently once written again\n got %+v\nwant %+v", now, was)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, old); err != nil {
		t.Fatal(err)
	}
	if len(b)*2 > compact.Len() {
		t.Errorf("checkpoint of the fixture is %d bytes, the earlier format's %d: want less than half", len(b), compact.Len())
	}
}

// exportedOnly returns a deep copy of v with every unexported field
// zeroed: what a checkpoint of v carries (the Snapshot keeps the private
// state it needs beside the Run).
func exportedOnly[T any](v T) T {
	var out T
	copyExported(reflect.ValueOf(&out).Elem(), reflect.ValueOf(v))
	return out
}

func copyExported(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Struct:
		for i := range src.NumField() {
			if src.Type().Field(i).IsExported() {
				copyExported(dst.Field(i), src.Field(i))
			}
		}
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		dst.Set(reflect.MakeSlice(src.Type(), src.Len(), src.Len()))
		for i := range src.Len() {
			copyExported(dst.Index(i), src.Index(i))
		}
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		dst.Set(reflect.New(src.Type().Elem()))
		copyExported(dst.Elem(), src.Elem())
	default:
		dst.Set(src)
	}
}

// zeroField returns a field of the run encoded in b, of one of its phases
// or of one of its agents, that is written at its zero value, or "".
func zeroField(t *testing.T, b []byte) string {
	t.Helper()
	var run map[string]any
	if err := json.Unmarshal(b, &run); err != nil {
		t.Fatal(err)
	}
	objs := []map[string]any{run}
	for _, list := range []string{"Phases", "Agents"} {
		l, _ := run[list].([]any)
		for _, o := range l {
			objs = append(objs, o.(map[string]any))
		}
	}
	for _, o := range objs {
		for k, v := range o {
			switch v := v.(type) {
			case nil:
				return k
			case string, bool, float64:
				if reflect.ValueOf(v).IsZero() {
					return k
				}
			case map[string]any:
				if len(v) == 0 {
					return k
				}
			}
		}
	}
	return ""
}
