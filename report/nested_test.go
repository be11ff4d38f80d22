package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// TestNestedMarked: a nested run says in --json and on the waterfall which
// agent launched it and at what depth; a top-level run says neither.
func TestNestedMarked(t *testing.T) {
	top := ingest.Run{TaskID: "w1", RunID: "r1", Workflow: true, Name: "review", Status: ingest.StatusCompleted, Start: 1_000, End: 61_000, Finished: true, Finalized: true}
	child := ingest.Run{TaskID: "w2", RunID: "r2", Workflow: true, Name: "deep-dive", Status: ingest.StatusCompleted, Start: 2_000, End: 30_000,
		Finished: true, Finalized: true, SpawnDepth: 2,
		Parent: ingest.AgentRef{TaskID: "w1", RunID: "r1", Index: 3, AgentID: "A3", Label: "planner", Workflow: "review", RootTask: "w1", RootRun: "r1"}}
	var js, wf bytes.Buffer
	if err := WriteJSON(&js, []ingest.Run{top, child}, new(ingest.Stats)); err != nil {
		t.Fatal(err)
	}
	if err := WriteWaterfall(&wf, []ingest.Run{top, child}, new(ingest.Stats), WaterfallOptions{}); err != nil {
		t.Fatal(err)
	}
	wantJSON := `"spawn_depth":2,"launched_by":{"task_id":"w1","run_id":"r1","workflow":"review","agent_index":3,"agent_id":"A3","label":"planner"}`
	if !strings.Contains(js.String(), wantJSON) || strings.Count(js.String(), "launched_by") != 1 {
		t.Errorf("--json lacks %s once:\n%s", wantJSON, js.String())
	}
	if !strings.Contains(wf.String(), "nested (depth 2): launched by agent 3 planner of review") || strings.Count(wf.String(), "nested (") != 1 {
		t.Errorf("waterfall:\n%s", wf.String())
	}
	var md bytes.Buffer
	if err := WriteStepSummary(&md, []ingest.Run{top, child}, nil, StepSummaryOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| ↳ deep-dive |") || !strings.Contains(md.String(), "| review |") {
		t.Errorf("step summary:\n%s", md.String())
	}
}
