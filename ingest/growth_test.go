package ingest_test

import (
	"fmt"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// progressWith is a task_progress of task with phases phases and agents
// running agents spread over them.
func progressWith(task string, phases, agents int) streamjson.Event {
	const t0 = 1_700_000_000_000
	ev := streamjson.Event{Kind: streamjson.KindTaskProgress, TaskID: task, HasProgress: true}
	for p := 1; p <= phases; p++ {
		ev.Entries = append(ev.Entries, streamjson.Entry{Phase: true, Index: p, Title: fmt.Sprint("phase ", p)})
	}
	for a := 1; a <= agents; a++ {
		p := 1 + (a-1)%phases
		ev.Entries = append(ev.Entries, streamjson.Entry{Index: a, Label: fmt.Sprint("agent:", a), AgentID: fmt.Sprint("v2:", a),
			PhaseIndex: p, PhaseTitle: fmt.Sprint("phase ", p), State: "start", QueuedAt: t0, StartedAt: t0 + int64(a)})
	}
	return ev
}

// TestSnapshotSizesRunOnce: a run's first snapshot makes room for all of
// its phases and agents at once (its allocations do not grow with its
// rows: one for the agents, one for the phases, not one growth per new
// row), and a snapshot that changes nothing allocates nothing: every live
// row of every snapshot passes here.
func TestSnapshotSizesRunOnce(t *testing.T) {
	const now = 1_700_000_001_000
	newRun := func(snap *streamjson.Event) *ingest.Tracker {
		tr := ingest.NewTracker(ingest.TrackerOptions{Grace: ingest.DefaultGrace})
		start := streamjson.Event{Kind: streamjson.KindTaskStarted, TaskID: "w", TaskType: "local_workflow", WorkflowName: "wf"}
		tr.Handle(&start, now)
		if snap != nil {
			tr.Handle(snap, now)
		}
		return tr
	}
	// firstAllocs is what the first snapshot of a run allocates.
	firstAllocs := func(snap *streamjson.Event) float64 {
		return testing.AllocsPerRun(20, func() { newRun(snap) }) - testing.AllocsPerRun(20, func() { newRun(nil) })
	}
	one := progressWith("w", 1, 1)
	base := firstAllocs(&one)
	// 2: the agents and the phases (-race instruments more).
	if base > 4 {
		t.Errorf("the first snapshot of one phase and one agent: %v allocations, want at most 4", base)
	}
	for _, c := range []struct{ phases, agents int }{{1, 1}, {2, 4}, {3, 10}, {7, 50}} {
		t.Run(fmt.Sprintf("phases=%d,agents=%d", c.phases, c.agents), func(t *testing.T) {
			snap := progressWith("w", c.phases, c.agents)
			if n := firstAllocs(&snap); n > base {
				t.Errorf("the first snapshot: %v allocations, %v with one phase and one agent: the run grows per row", n, base)
			}
			tr := newRun(&snap)
			r := tr.Open()[0]
			if len(r.Phases) != c.phases || len(r.Agents) != c.agents {
				t.Fatalf("%d phases, %d agents; want %d, %d", len(r.Phases), len(r.Agents), c.phases, c.agents)
			}
			if n := testing.AllocsPerRun(50, func() { tr.Handle(&snap, now) }); n != 0 {
				t.Errorf("an unchanged snapshot: %v allocations, want 0", n)
			}
		})
	}
}
