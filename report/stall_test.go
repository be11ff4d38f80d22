package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// TestStallsMarked: a run that stalled carries "stalls" in --json and a
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
