package ingest

import (
	"fmt"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/tap"
)

// TestRunsOverAreLetGo: once a run is finalized, the Tracker's list
// of open runs lets go of it within a bounded number of later finalizes,
// and once a run is finished its queue of unfinished runs does too (serve
// follows hundreds of streams, each finishing runs one after the other:
// whatever one Tracker keeps alive of a run that is over is multiplied by
// them). With and without a grace window, with runs finishing in order,
// and behind an older run that stays open.
func TestRunsOverAreLetGo(t *testing.T) {
	for _, grace := range []time.Duration{0, 2 * time.Millisecond} {
		for _, longOpen := range []bool{false, true} {
			for _, runs := range []int{1, 3, 10, 65, 300} {
				t.Run(fmt.Sprintf("grace %s, open run before %v, %d runs", grace, longOpen, runs), func(t *testing.T) {
					clock := time.UnixMilli(1_796_000_000_000)
					p := NewPipeline(PipelineOptions{Live: true, Now: func() time.Time { return clock }, Tracker: TrackerOptions{Grace: grace}})
					tr := p.Tracker()
					start := func(task string) {
						p.Write(tap.SourceStdout, fmt.Appendf(nil, `{"type":"system","subtype":"task_started","task_id":%q,"task_type":"local_workflow","workflow_name":"x"}`+"\n", task))
					}
					if longOpen {
						start("long")
					}
					for i := range runs {
						task := fmt.Sprintf("w%d", i)
						start(task)
						p.Write(tap.SourceStdout, fmt.Appendf(nil, `{"type":"system","subtype":"task_progress","task_id":%q,"workflow_progress":[{"type":"workflow_agent","index":1,"agentId":"a","state":"done","startedAt":1796000000000,"endedAt":1796000000001}]}`+"\n", task))
						p.Write(tap.SourceStdout, fmt.Appendf(nil, `{"type":"system","subtype":"task_notification","task_id":%q,"status":"completed"}`+"\n", task))
						clock = clock.Add(time.Millisecond)
						tr.Advance(clock.UnixMilli())
						unfinal := 0
						for _, r := range tr.open {
							if !r.Finalized {
								unfinal++
							}
						}
						// None when runs end in order; else at most as many
						// finalized runs as unfinalized ones, plus the one
						// just finalized.
						bound := 0
						if longOpen {
							bound = unfinal + 1
						}
						if held := len(tr.open) - unfinal; held > bound {
							t.Fatalf("after run %d: %d finalized runs held in the open list next to %d unfinalized", i+1, held, unfinal)
						}
						q := &tr.unfinished[1]
						finished, bound := 0, 1 // the run just finished
						for _, r := range q.runs[q.head:] {
							if r.Finished {
								finished++
							}
						}
						if longOpen {
							bound = 2*tr.counts[1] + 8 + 1 // behind the open one: dropped now and then
						}
						if finished > bound {
							t.Fatalf("after run %d: %d finished runs held in the queue of unfinished ones (%d unfinished), want ≤ %d", i+1, finished, tr.counts[1], bound)
						}
					}
					tr.Close(clock.Add(time.Hour).UnixMilli())
					if len(tr.open) != 0 {
						t.Fatalf("after Close: %d runs in the open list", len(tr.open))
					}
				})
			}
		}
	}
}
