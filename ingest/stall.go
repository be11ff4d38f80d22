package ingest

// Stalled runs: a workflow run that is not finished and shows no event for
// StallAfter on the Tracker's clock (the wall clock live, the stream's in a
// replay) is stalled, once per silence. Only run events count (its
// task_started, snapshots, updates, notification), not other lines.

// stallCheckEvery is how often (on the Tracker's clock) open runs are
// looked at: a stall is seen within a second, and a busy stream does not
// pay a scan per event.
const stallCheckEvery = 1000

// touch records an event of r: its silence starts again, and a stalled
// run is resumed.
func (t *Tracker) touch(r *Run) {
	r.lastEvent = t.now
	t.unstall(r)
}

// unstall ends r's stall, if any (an event came, or the run ended).
func (t *Tracker) unstall(r *Run) {
	if r.Stalled {
		r.Stalled = false
		t.emit(Lifecycle{Kind: RunResumed, Run: r})
	}
}

// checkStalls marks the open workflow runs silent for stallAfter.
func (t *Tracker) checkStalls() {
	if t.stallAfter <= 0 || t.now-t.stallCheck < stallCheckEvery {
		return
	}
	t.stallCheck = t.now
	for _, r := range t.open {
		if !r.Workflow || r.Finished || r.Finalized || r.pending() {
			continue
		}
		t.checkAgentStalls(r)
		if r.Stalled || r.lastEvent == 0 {
			continue
		}
		if t.now-r.lastEvent >= t.stallAfter {
			r.Stalled = true
			r.Stalls++
			t.emit(Lifecycle{Kind: RunStalled, Run: r})
		}
	}
}
