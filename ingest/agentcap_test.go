package ingest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/tap"
)

// TestSnapshotAgentsRoomForAgentsOnly: the room a snapshot makes for a
// run's agents is for its agent elements, not its phase elements too
// (serve holds every run in its grace window, with 256 busy streams ~6,000
// of them: each spare Agent is ~300 bytes of peak RSS), whatever the mix.
func TestSnapshotAgentsRoomForAgentsOnly(t *testing.T) {
	for _, tc := range []struct{ phases, agents int }{{0, 1}, {2, 1}, {2, 4}, {8, 3}, {1, 17}, {40, 2}} {
		t.Run(fmt.Sprintf("%d phases %d agents", tc.phases, tc.agents), func(t *testing.T) {
			var rows []string
			for i := 1; i <= tc.phases; i++ {
				rows = append(rows, fmt.Sprintf(`{"type":"workflow_phase","index":%d,"title":"p%d"}`, i, i))
			}
			for i := 1; i <= tc.agents; i++ {
				rows = append(rows, fmt.Sprintf(`{"type":"workflow_agent","index":%d,"agentId":"a%d","state":"start","startedAt":1765000000%03d}`, i, i, i))
			}
			p := NewPipeline(PipelineOptions{})
			p.Write(tap.SourceStdout, []byte(`{"type":"system","subtype":"task_started","task_id":"w","task_type":"local_workflow","workflow_name":"x"}`+"\n"))
			p.Write(tap.SourceStdout, []byte(`{"type":"system","subtype":"task_progress","task_id":"w","workflow_progress":[`+strings.Join(rows, ",")+"]}\n"))
			open := p.Tracker().Open()
			if len(open) != 1 {
				t.Fatalf("%d open runs, want 1", len(open))
			}
			// As many as a fresh allocation of them holds (size classes).
			want := cap(slices.Grow([]Agent(nil), tc.agents))
			if r := open[0]; len(r.Agents) != tc.agents || cap(r.Agents) != want {
				t.Fatalf("agents len %d cap %d, want %d and %d", len(r.Agents), cap(r.Agents), tc.agents, want)
			}
		})
	}
}
