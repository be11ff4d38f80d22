package ingest_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/ingesttest"
	"github.com/cbc-otel/cbc-otel/tap"
)

// TestWrittenAtIsTheRunsClock replays real Claude Code 2.1.334 recordings,
// which stamp every system line with written_at, and checks the one clock:
// a workflow run starts exactly when its task_started was written (not at
// end − duration_ms, which the CLI counts from when the script starts), and
// its end, phases and agents all lie within [start, end].
func TestWrittenAtIsTheRunsClock(t *testing.T) {
	files, _ := filepath.Glob("../testdata/written-at/*.ndjson")
	if len(files) == 0 {
		t.Fatal("no recordings in testdata/written-at")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			// What the recording says, read independently of the decoder.
			startedAt := map[string]int64{}
			sc := bufio.NewScanner(bytes.NewReader(raw))
			sc.Buffer(nil, 16<<20)
			for sc.Scan() {
				var m map[string]any
				if json.Unmarshal(sc.Bytes(), &m) != nil || m["subtype"] != "task_started" || m["task_type"] != "local_workflow" {
					continue
				}
				ts, err := time.Parse(time.RFC3339Nano, m["written_at"].(string))
				if err != nil {
					t.Fatalf("written_at of %v: %v", m["task_id"], err)
				}
				startedAt[m["task_id"].(string)] = ts.UnixMilli()
			}
			if len(startedAt) == 0 {
				t.Fatal("no workflow task_started in the recording")
			}
			rec := &ingesttest.Recorder{}
			p := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{rec}}})
			p.Write(tap.SourceStdout, raw)
			p.Close()
			seen := 0
			for _, e := range rec.Events {
				if e.Kind != ingest.RunFinalized || !e.Run.Workflow {
					continue
				}
				seen++
				r := e.Run
				if want := startedAt[r.TaskID]; r.Start != want {
					t.Errorf("run %s starts at %d, want its task_started's written_at %d (end − duration_ms = %d)", r.TaskID, r.Start, want, r.End-r.Usage.DurationMs)
				}
				if r.End < r.Start {
					t.Errorf("run %s ends before it starts: %d..%d", r.TaskID, r.Start, r.End)
				}
				for _, a := range r.Agents {
					if a.Start < r.Start || a.End > r.End || a.End < a.Start {
						t.Errorf("agent %d %d..%d outside run %d..%d", a.Index, a.Start, a.End, r.Start, r.End)
					}
				}
				for _, ph := range r.Phases {
					if ph.Start < r.Start || ph.End > r.End || ph.End < ph.Start {
						t.Errorf("phase %d %d..%d outside run %d..%d", ph.Index, ph.Start, ph.End, r.Start, r.End)
					}
				}
			}
			if seen != len(startedAt) {
				t.Errorf("%d workflow runs finalized, want %d", seen, len(startedAt))
			}
			if n := p.Stats().Violations(ingest.ViolationBadTime); n != 0 {
				t.Errorf("bad_time = %d on a real recording", n)
			}
		})
	}
}
