package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// TestNestedMarked: a nested run says in --summary.json and on the waterfall which
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

// TestNestingText: the waterfall's and --summary.json's nesting of each shape
// Claude Code 2.1.335 writes, and no depth the stream did not give.
func TestNestingText(t *testing.T) {
	sub := ingest.AgentRef{TaskID: "a1", RunID: "r1", Index: -1, RootTask: "a1", RootRun: "r1"}
	cases := []struct {
		name      string
		run       ingest.Run
		waterfall string // the nesting text, "" for none
		json      string // a fragment of the --summary.json line
	}{
		{"a sub-agent's sub-agent", ingest.Run{TaskID: "a2", RunID: "r2", TaskType: "local_agent", SpawnDepth: 2, Parent: sub},
			"nested (depth 2): launched by task a1",
			`"run_id":"r2","task_type":"local_agent","status":"completed","spawn_depth":2,"launched_by":{"task_id":"a1","run_id":"r1","agent_index":-1}}`},
		{"a fork's workflow: no depth", ingest.Run{TaskID: "w1", RunID: "rw", Workflow: true, Name: "leaf", Parent: sub},
			"nested: launched by task a1", `"launched_by":{"task_id":"a1","run_id":"r1","agent_index":-1}`},
		{"a child whose launcher had ended", ingest.Run{TaskID: "b1", RunID: "rb", TaskType: "local_bash", ParentTaskID: "a1", ParentLink: &sub},
			"linked: launched by task a1", `"launched_by":{"task_id":"a1","run_id":"r1","agent_index":-1}`},
		{"a linked workflow launcher", ingest.Run{TaskID: "w2", RunID: "rw2", Workflow: true, Name: "x", ParentLink: &ingest.AgentRef{TaskID: "w0", RunID: "r0", Index: -1, Workflow: "outer"}},
			"linked: launched by workflow outer (task w0)", `"launched_by":{"task_id":"w0","run_id":"r0","workflow":"outer","agent_index":-1}`},
		{"a resumed sub-agent", ingest.Run{TaskID: "a1", RunID: "r3", TaskType: "local_agent", SpawnDepth: 1, Resumes: &sub},
			"resumes run r1", `"spawn_depth":1,"resumes":"r1"}`},
		{"top level", ingest.Run{TaskID: "a9", RunID: "r9", TaskType: "local_agent", SpawnDepth: 1}, "", `"spawn_depth":1}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.run
			r.Status, r.Finished, r.Finalized, r.Start, r.End = ingest.StatusCompleted, true, true, 1_000, 2_000
			if got := nesting(&r); got != tc.waterfall {
				t.Errorf("nesting %q, want %q", got, tc.waterfall)
			}
			var js, wf bytes.Buffer
			if err := WriteJSON(&js, []ingest.Run{r}, nil); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(js.String(), tc.json) {
				t.Errorf("--json %s lacks %s", js.String(), tc.json)
			}
			if err := WriteWaterfall(&wf, []ingest.Run{r}, nil, WaterfallOptions{}); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(wf.String(), "depth 0") || (tc.waterfall != "" && !strings.Contains(wf.String(), tc.waterfall)) {
				t.Errorf("waterfall:\n%s", wf.String())
			}
		})
	}
}
