package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// TestStallsMarked: a run that stalled carries "stalls" in --summary.json and a
// mark on the waterfall; one that never did carries neither.
func TestStallsMarked(t *testing.T) {
	for _, stalls := range []int{0, 2} {
		r := ingest.Run{TaskID: "w1", Workflow: true, Name: "review", Status: ingest.StatusCompleted, Start: 1_000, End: 61_000,
			Stalls: stalls, Finished: true, Finalized: true}
		var js, wf bytes.Buffer
		if err := WriteJSON(&js, []ingest.Run{r}, new(ingest.Stats)); err != nil {
			t.Fatal(err)
		}
		if err := WriteWaterfall(&wf, []ingest.Run{r}, new(ingest.Stats), WaterfallOptions{}); err != nil {
			t.Fatal(err)
		}
		gotJSON, gotMark := strings.Contains(js.String(), `"stalls":2`), strings.Contains(wf.String(), "stalled ×2")
		if gotJSON != (stalls > 0) || gotMark != (stalls > 0) || strings.Contains(js.String(), `"stalls":0`) {
			t.Errorf("stalls %d: json %v, waterfall %v\n%s\n%s", stalls, gotJSON, gotMark, js.String(), wf.String())
		}
	}
}

// TestAgentStallsMarked: an agent that stalled carries "stalls" in --summary.json
// and "stalled ×N" on its waterfall line; one that never did carries
// neither (and the run's own mark stays the run's).
func TestAgentStallsMarked(t *testing.T) {
	r := ingest.Run{TaskID: "w1", Workflow: true, Name: "review", Status: ingest.StatusCompleted, Start: 1_000, End: 61_000,
		Finished: true, Finalized: true, Agents: []ingest.Agent{
			{Index: 1, Label: "stuck", State: ingest.AgentDone, Start: 1_000, End: 60_000, Stalls: 3},
			{Index: 2, Label: "fine", State: ingest.AgentDone, Start: 1_000, End: 2_000},
		}}
	var js, wf bytes.Buffer
	if err := WriteJSON(&js, []ingest.Run{r}, new(ingest.Stats)); err != nil {
		t.Fatal(err)
	}
	if err := WriteWaterfall(&wf, []ingest.Run{r}, new(ingest.Stats), WaterfallOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(js.String(), `"stalls":`); n != 1 || !strings.Contains(js.String(), `"error":"","stalls":3`) {
		t.Errorf("want agent 1's \"stalls\":3 and no other stalls key:\n%s", js.String())
	}
	var marked []string
	for _, line := range strings.Split(wf.String(), "\n") {
		if strings.Contains(line, "stalled") {
			marked = append(marked, line)
		}
	}
	if len(marked) != 1 || !strings.Contains(marked[0], "#1 stuck") || !strings.HasSuffix(marked[0], "stalled ×3") {
		t.Errorf("want agent 1's line alone marked stalled ×3:\n%s", wf.String())
	}
}
