package ingest

import (
	"strconv"
	"testing"

	"github.com/cbc-otel/cbc-otel/streamjson"
)

// TestSettleAgent covers the documented fill-ins for an agent's missing
// times when its run is finalized (they moved here from the traces sink:
// every output reads them now).
func TestSettleAgent(t *testing.T) {
	cases := []struct {
		name       string
		a          Agent
		start, end int64
		inferred   bool
	}{
		{"complete", Agent{State: AgentDone, Start: 120, End: 150}, 120, 150, false},
		{"no end", Agent{State: AgentError, Start: 120}, 120, 900, true},
		{"abandoned", Agent{State: AgentAbandoned, Start: 120}, 120, 900, true},
		{"no start", Agent{State: AgentError, End: 300}, 100, 300, false},
		{"cached at queue time", Agent{State: AgentCached, QueuedAt: 110}, 110, 110, false},
		{"cached without times", Agent{State: AgentCached}, 100, 100, false},
		{"not started, queued", Agent{State: AgentNotStarted, QueuedAt: 130}, 130, 130, false},
		{"not started", Agent{State: AgentNotStarted}, 900, 900, false},
		{"kept inside the run", Agent{State: AgentError, Start: 50, End: 950}, 100, 900, false},
	}
	for _, c := range cases {
		r := &Run{Start: 100, End: 900}
		a := c.a
		settleAgent(r, &a)
		if a.Start != c.start || a.End != c.end || a.EndInferred != c.inferred {
			t.Errorf("%s: %d..%d inferred %v, want %d..%d inferred %v", c.name, a.Start, a.End, a.EndInferred, c.start, c.end, c.inferred)
		}
	}
}

// TestFinishedRunsAreNotHeld: runs that start and finish one after another
// (the common case, never near a cap) must not pile up in the queue of
// unfinished runs: a million of them once held 500 MB in serve.
func TestFinishedRunsAreNotHeld(t *testing.T) {
	tr := NewTracker(TrackerOptions{}) // no grace window: each run is finalized at once
	// One run left open at the head, so finished runs queue behind it.
	tr.Handle(&streamjson.Event{Kind: streamjson.KindTaskStarted, TaskID: "open", TaskType: "local_workflow"}, 1e12)
	for i := range 100_000 {
		id := "w" + strconv.Itoa(i)
		now := int64(1e12) + int64(i)
		tr.Handle(&streamjson.Event{Kind: streamjson.KindTaskStarted, TaskID: id, TaskType: "local_workflow"}, now)
		tr.Handle(&streamjson.Event{Kind: streamjson.KindTaskNotification, TaskID: id, Status: "completed"}, now)
	}
	if n := len(tr.unfinished[1].runs) - tr.unfinished[1].head; n > 2*tr.counts[1]+65 {
		t.Errorf("%d runs queued for %d unfinished", n, tr.counts[1])
	}
	if tr.counts[1] != 1 {
		t.Errorf("%d unfinished workflow runs, want 1", tr.counts[1])
	}
}
