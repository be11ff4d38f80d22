package ingest

import "github.com/cbc-otel/cbc-otel/streamjson"

// What the Claude Agent SDK's own stream reader knows of the stream
// (PROTOCOL.md, issue 28) beyond the protocol: snapshots resent after a
// reconnect, and run ids that sort in the order the runs opened. (The
// final snapshot a task_notification carries is merged in notified.)

// sameState reports whether a resent frame ("resent": true, sent again
// after a reconnect) is to be ignored whole. It repeats a state already
// sent, not new progress: no counter, stall clock, agent start or end,
// usage, time or violation (not even its own bad fields: the original
// counted them) may move because of it. The one thing it may still do is
// what the Tracker cannot have seen: a resent notification of a run that
// is still unfinished is that run's only notification (exactly one comes
// per run, so the original never reached us), and ends it like one.
func (t *Tracker) sameState(ev *streamjson.Event) bool {
	if ev.Kind != streamjson.KindTaskNotification {
		return true
	}
	r, _ := t.lookup(ev)
	return r == nil || r.Finished
}

// maxLatestRuns bounds the tasks whose latest run id is remembered beyond
// their runs' finalization (olderRun); the oldest is forgotten first.
const maxLatestRuns = 4096

// olderRun reports whether run, not open, sorts before the latest run of
// task seen: run ids of one task sort as plain strings in the order the
// runs opened (PROTOCOL.md), so a frame naming it is late, never a new run.
func (t *Tracker) olderRun(task, run string) bool {
	if run == "" {
		return false
	}
	latest := t.latestRun[task]
	for _, r := range t.byTask[task] {
		latest = max(latest, r.RunID)
	}
	return run < latest
}

// noteRun remembers run as task's latest when it sorts last.
func (t *Tracker) noteRun(task, run string) {
	if run == "" {
		return
	}
	prev, known := t.latestRun[task]
	if run <= prev {
		return
	}
	if t.latestRun == nil {
		t.latestRun = make(map[string]string)
	}
	t.latestRun[task] = run
	if known {
		return
	}
	t.latestOrder = append(t.latestOrder, task)
	if len(t.latestOrder) > maxLatestRuns {
		delete(t.latestRun, t.latestOrder[0])
		t.latestOrder = t.latestOrder[1:]
	}
}
