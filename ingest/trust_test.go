// Tests of the "one clock" rules (issue #17) that the Tracker's other tests
// do not pin down: where a run starts and ends, how an agent's bad times are
// refused, the caps on the Tracker's state, and an adopted run completed by
// a late task_started. TestTrustProperties then checks the invariants every
// output relies on over generated hostile streams, and that one wrong-typed
// field never changes how a run ended.
//
// The shared builders (lnWorkflow, lnProgress, agentRow, ...) are those of
// helpers_test.go; everything named trust* or tr* is this file's own.
package ingest_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/ingesttest"
	"github.com/cbc-otel/cbc-otel/metrics"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// newTrRig is a clockRig with the given Tracker options and, unless they
// say otherwise, the default 5 s grace window.
func newTrRig(t *testing.T, opts ingest.TrackerOptions) *clockRig {
	if opts.Grace == 0 {
		opts.Grace = 5 * time.Second
	}
	return newClockRigWith(t, opts)
}

// runsOf returns every recorded copy of task's run at events of kind k.
func runsOf(rec *ingesttest.Recorder, k ingest.LifecycleKind, task string) []ingest.Run {
	var out []ingest.Run
	for _, e := range rec.Events {
		if e.Kind == k && e.Run.TaskID == task {
			out = append(out, e.Run)
		}
	}
	return out
}

// oneRun returns the only copy of task's run recorded at kind k.
func oneRun(t *testing.T, rec *ingesttest.Recorder, k ingest.LifecycleKind, task string) ingest.Run {
	t.Helper()
	rs := runsOf(rec, k, task)
	if len(rs) != 1 {
		t.Fatalf("%s of %s recorded %d times, want 1; kinds: %s", k, task, len(rs), kindsOf(rec))
	}
	return rs[0]
}

// enclosedErrs lists how a finalized run breaks what every output relies
// on: both times plausible (or both 0, unknown: a replay's run that ended
// before the stream showed any time), Start ≤ End, every phase and agent an
// interval inside the run.
func enclosedErrs(r *ingest.Run) []string {
	var out []string
	if unknown := r.Start == 0 && r.End == 0; !unknown && (!streamjson.Plausible(r.Start) || !streamjson.Plausible(r.End) || r.Start > r.End) {
		out = append(out, fmt.Sprintf("run %s: times %d..%d", r.TaskID, r.Start, r.End))
	}
	for _, p := range r.Phases {
		if p.Start > p.End || p.Start < r.Start || p.End > r.End {
			out = append(out, fmt.Sprintf("run %s phase %d: %d..%d outside run %d..%d", r.TaskID, p.Index, p.Start, p.End, r.Start, r.End))
		}
	}
	for _, a := range r.Agents {
		if a.Start > a.End || a.Start < r.Start || a.End > r.End {
			out = append(out, fmt.Sprintf("run %s agent %d: %d..%d outside run %d..%d", r.TaskID, a.Index, a.Start, a.End, r.Start, r.End))
		}
	}
	return out
}

func checkEnclosed(t *testing.T, r ingest.Run) {
	t.Helper()
	for _, e := range enclosedErrs(&r) {
		t.Error(e)
	}
}

func wantViolations(t *testing.T, st *ingest.Stats, want map[ingest.Violation]int64) {
	t.Helper()
	if got := violationCounts(st); !maps.Equal(got, want) {
		t.Errorf("violations = %v, want %v", got, want)
	}
}

// evAgent is an agent entry as the decoder makes it.
func evAgent(i int, state string, started, ended int64) streamjson.Entry {
	return streamjson.Entry{Index: i, AgentID: fmt.Sprintf("a%d", i), State: state, StartedAt: started, EndedAt: ended}
}

// TestTrustWrittenAtStart: a run starts when its task_started was written,
// even though end − usage.duration_ms and the agents' times are later (the
// CLI's duration counts from when the script starts). Driven with Events
// because the decoder on this tree does not read written_at (see
// TestTrustWrittenAtThroughDecoder).
func TestTrustWrittenAtStart(t *testing.T) {
	cases := []struct {
		name       string
		startedAt  int64 // task_started's written_at
		notifyAt   int64 // task_notification's written_at
		endTime    int64 // task_updated's end_time, 0: no task_updated
		start, end int64
		viol       map[ingest.Violation]int64
	}{
		{name: "written_at wins over end − duration and agent times", startedAt: T0 + 5, endTime: T0 + 1000, start: T0 + 5, end: T0 + 1000},
		{name: "written_at after an agent's start: widened to enclose it", startedAt: T0 + 700, endTime: T0 + 1000, start: T0 + 500, end: T0 + 1000},
		{name: "no end_time: the notification's written_at ends the run", startedAt: T0 + 5, notifyAt: T0 + 1200, start: T0 + 5, end: T0 + 1200},
		// Seconds where ms belong: refused, the start comes from the
		// other times (end − duration = T0+900, agent T0+500).
		{name: "implausible written_at is bad_time and not used", startedAt: 1_796_000_000, endTime: T0 + 1000, start: T0 + 500, end: T0 + 1000,
			viol: map[ingest.Violation]int64{ingest.ViolationBadTime: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newTrRig(t, ingest.TrackerOptions{})
			r.ev(T0, streamjson.Event{Kind: streamjson.KindTaskStarted, TaskID: "w1", TaskType: "local_workflow", WorkflowName: "wf", WrittenAt: c.startedAt})
			r.ev(T0+600, streamjson.Event{Kind: streamjson.KindTaskProgress, TaskID: "w1", HasProgress: true, Entries: []streamjson.Entry{evAgent(1, "start", T0+500, 0)}})
			r.ev(T0+950, streamjson.Event{Kind: streamjson.KindTaskProgress, TaskID: "w1", HasProgress: true, Entries: []streamjson.Entry{evAgent(1, "done", T0+500, T0+900)}})
			if c.endTime != 0 {
				r.ev(T0+1000, streamjson.Event{Kind: streamjson.KindTaskUpdated, TaskID: "w1", PatchStatus: "completed", PatchEndTime: c.endTime})
			}
			r.ev(T0+1300, streamjson.Event{Kind: streamjson.KindTaskNotification, TaskID: "w1", Status: "completed", WrittenAt: c.notifyAt,
				HasUsage: true, Usage: streamjson.Usage{DurationMs: 100}})
			r.tr.Close(T0 + 60_000)
			for _, k := range []ingest.LifecycleKind{ingest.RunFinished, ingest.RunFinalized} {
				run := oneRun(t, r.rec, k, "w1")
				eq(t, k.String()+" start", run.Start, c.start)
				eq(t, k.String()+" end", run.End, c.end)
			}
			checkEnclosed(t, oneRun(t, r.rec, ingest.RunFinalized, "w1"))
			want := c.viol
			if want == nil {
				want = map[ingest.Violation]int64{}
			}
			wantViolations(t, r.stats, want)
		})
	}
}

// isoMs formats epoch ms as Claude Code writes written_at.
func isoMs(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z") }

// TestTrustWrittenAtThroughDecoder is TestTrustWrittenAtStart's first case
// as the bytes of a real stream: it holds only once the decoder reads
// written_at into Event.WrittenAt.
func TestTrustWrittenAtThroughDecoder(t *testing.T) {
	rig := newPipeRig(ingest.PipelineOptions{})
	rig.out(
		set(lnWorkflow("w1"), "written_at", isoMs(T0+5)),
		set(lnProgress("w1", agentRow(1, "start", "agentId", "a1", "startedAt", T0+500)), "written_at", isoMs(T0+600)),
		set(lnProgress("w1", agentRow(1, "done", "agentId", "a1", "startedAt", T0+500, "endedAt", T0+900)), "written_at", isoMs(T0+950)),
		set(lnUpdated("w1", "completed", T0+1000), "written_at", isoMs(T0+1000)),
		set(lnNotify("w1", "completed"), "usage", usage(0, 0, 100), "written_at", isoMs(T0+1001)),
	)
	rig.p.Close()
	run := finalRun(t, rig.rec, "w1", "")
	eq(t, "start (task_started's written_at)", run.Start, T0+5)
	eq(t, "end", run.End, T0+1000)
}

// TestTrustAbandonedRunEnd: a run whose notification never comes lasts until
// the last time it showed itself (its agents' times), not until the
// Tracker's clock (moved on by other runs) nor a few ms after it was seen.
func TestTrustAbandonedRunEnd(t *testing.T) {
	rig := newPipeRig(ingest.PipelineOptions{})
	rig.out(
		lnWorkflow("w1"),
		lnProgress("w1", agentRow(1, "start", "agentId", "a1", "startedAt", T0+10), agentRow(2, "start", "agentId", "a2", "startedAt", T0+20)),
		lnProgress("w1", agentRow(1, "done", "agentId", "a1", "startedAt", T0+10, "endedAt", T0+4000), agentRow(2, "start", "agentId", "a2", "startedAt", T0+20)),
		// Another run moves the stream clock a minute on.
		lnWorkflow("w2"),
		lnProgress("w2", agentRow(1, "done", "agentId", "b1", "startedAt", T0+60_000, "endedAt", T0+61_000)),
		lnUpdated("w2", "completed", T0+61_000),
		lnNotify("w2", "completed"),
	)
	rig.p.Close()
	run := finalRun(t, rig.rec, "w1", "")
	eq(t, "status", run.Status, ingest.StatusAbandoned)
	eq(t, "start (earliest agent)", run.Start, T0+10)
	eq(t, "end (last seen: agent 1's end)", run.End, T0+4000)
	a2 := agentOf(t, run, 2)
	eq(t, "agent 2 state", a2.State, ingest.AgentAbandoned)
	eq(t, "agent 2 end", a2.End, T0+4000)
	eq(t, "agent 2 end inferred", a2.EndInferred, true)
	checkEnclosed(t, run)
}

// TestTrustLateFlipsWidenStoppedRun: cbc flips in-flight agents to error
// after the stopped notification, with endedAt past the run's end_time. At
// finalize the run encloses them, each phase spans its agents, and an agent
// flipped without endedAt ends with the (widened) run. The start must not
// move: the pair is only ever widened.
func TestTrustLateFlipsWidenStoppedRun(t *testing.T) {
	rig := newPipeRig(ingest.PipelineOptions{Decode: streamjson.DecodeOptions{KeepErrors: true}, Tracker: ingest.TrackerOptions{Grace: ingest.DefaultGrace}})
	rig.out(
		lnWorkflow("w1"),
		lnProgress("w1", phaseRow(1, "plan"), phaseRow(2, "build"), phaseRow(3, "never"),
			agentRow(1, "start", "agentId", "a1", "phaseIndex", 1, "startedAt", T0+500),
			agentRow(2, "start", "agentId", "a2", "phaseIndex", 2, "startedAt", T0+600),
			agentRow(3, "start", "phaseIndex", 2)),
	)
	rig.in(lnInterrupt("S1"))
	rig.out(
		lnUpdated("w1", "killed", T0+1000),
		// The CLI's duration counts from the script's start: end − 900.
		set(lnNotify("w1", "stopped"), "usage", usage(5, 1, 900)),
		lnProgress("w1", phaseRow(1, "plan"), phaseRow(2, "build"), phaseRow(3, "never"),
			agentRow(1, "error", "agentId", "a1", "phaseIndex", 1, "startedAt", T0+500, "endedAt", T0+3000, "error", "subagent aborted: a"),
			agentRow(2, "error", "agentId", "a2", "phaseIndex", 2, "startedAt", T0+600, "error", "subagent aborted: b"),
			agentRow(3, "start", "phaseIndex", 2)),
	)
	rig.p.Close()
	fin := oneRun(t, rig.rec, ingest.RunFinished, "w1")
	run := finalRun(t, rig.rec, "w1", "")
	eq(t, "status", run.Status, ingest.StatusStopped)
	eq(t, "end at finish", fin.End, T0+1000)
	eq(t, "end (widened to the late flip)", run.End, T0+3000)
	eq(t, "start at finish (end_time − duration)", fin.Start, T0+100)
	// The grace window's flips widen the end; they must not narrow the start.
	eq(t, "start at finalize", run.Start, fin.Start)
	for _, p := range run.Phases {
		if p.End > run.End {
			t.Errorf("phase %d ends at %d after the run (%d)", p.Index, p.End, run.End)
		}
	}
	for _, a := range run.Agents {
		if a.End > run.End {
			t.Errorf("agent %d ends at %d after the run (%d)", a.Index, a.End, run.End)
		}
	}
	a2, a3 := agentOf(t, run, 2), agentOf(t, run, 3)
	eq(t, "agent 2 end (no endedAt: the run's)", a2.End, run.End)
	eq(t, "agent 2 inferred", a2.EndInferred, true)
	eq(t, "agent 3 state", a3.State, ingest.AgentNotStarted)
	eq(t, "agent 3 zero length", a3.End-a3.Start, int64(0))
	eq(t, "phase 1 end", run.Phases[0].End, T0+3000)
	eq(t, "phase 3 (no agents) at run end", run.Phases[2].Start, run.End)
	checkEnclosed(t, run)
}

// TestTrustStartStableAtFinalize: fixTimes runs at finish and again at
// finalize, and may only widen the pair there. With no written_at the start
// is end − usage.duration_ms; an agent that ended after end_time widens the
// end at finish, and the start must not then be recomputed from the
// widened end (which moves it later, with nothing new in the stream).
func TestTrustStartStableAtFinalize(t *testing.T) {
	rig := newPipeRig(ingest.PipelineOptions{})
	rig.out(
		lnWorkflow("w1"),
		lnProgress("w1", agentRow(1, "done", "agentId", "a1", "startedAt", T0+500, "endedAt", T0+1500)),
		lnUpdated("w1", "completed", T0+1000),
		set(lnNotify("w1", "completed"), "usage", usage(1, 1, 900)),
	)
	rig.p.Close()
	fin := oneRun(t, rig.rec, ingest.RunFinished, "w1")
	run := finalRun(t, rig.rec, "w1", "")
	eq(t, "start at finish (end_time − duration)", fin.Start, T0+100)
	eq(t, "end at finish (widened to the agent)", fin.End, T0+1500)
	eq(t, "start at finalize", run.Start, fin.Start)
	eq(t, "end at finalize", run.End, fin.End)
}

// TestTrustBadAgentTimes: an agent time that cannot be an epoch-ms time of
// this stream (seconds, garbage) or an end before the start is counted as
// bad_time and not used, so no interval is negative and no run spans
// decades.
func TestTrustBadAgentTimes(t *testing.T) {
	const secs = 1_796_000_000 // T0 in seconds
	cases := []struct {
		name       string
		row        jobj
		endTime    int64
		start, end int64 // agent 1's settled times
		inferred   bool
		runStart   int64
		runEnd     int64
		badTime    int64
		badField   int64 // the decoder refuses a negative time itself
	}{
		{name: "endedAt before startedAt: startedAt + durationMs", row: agentRow(1, "done", "agentId", "a1", "startedAt", T0+500, "endedAt", T0+100, "durationMs", 50),
			endTime: T0 + 1000, start: T0 + 500, end: T0 + 550, runStart: T0 + 500, runEnd: T0 + 1000, badTime: 1},
		{name: "endedAt before startedAt, no duration: inferred", row: agentRow(1, "error", "agentId", "a1", "startedAt", T0+500, "endedAt", T0+100),
			endTime: T0 + 1000, start: T0 + 500, end: T0 + 1000, inferred: true, runStart: T0 + 500, runEnd: T0 + 1000, badTime: 1},
		{name: "seconds instead of ms", row: agentRow(1, "done", "agentId", "a1", "queuedAt", secs, "startedAt", secs, "endedAt", secs+5),
			endTime: T0 + 1000, start: T0, end: T0 + 1000, inferred: true, runStart: T0, runEnd: T0 + 1000, badTime: 3},
		{name: "end_time in seconds: the clock ends the run", row: agentRow(1, "done", "agentId", "a1", "startedAt", T0+500, "endedAt", T0+700),
			endTime: secs, start: T0 + 500, end: T0 + 700, runStart: T0 + 500, runEnd: T0 + 1300, badTime: 1},
		{name: "past 2100 and negative", row: agentRow(1, "done", "agentId", "a1", "startedAt", -5, "endedAt", 9e15),
			endTime: T0 + 1000, start: T0, end: T0 + 1000, inferred: true, runStart: T0, runEnd: T0 + 1000, badTime: 1, badField: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newTrRig(t, ingest.TrackerOptions{})
			r.at(T0, lnWorkflow("w1"))
			r.at(T0+900, lnProgress("w1", c.row))
			r.at(T0+1000, lnUpdated("w1", "completed", c.endTime))
			r.at(T0+1300, lnNotify("w1", "completed"))
			r.tr.Close(T0 + 60_000)
			run := finalRun(t, r.rec, "w1", "")
			a := agentOf(t, run, 1)
			eq(t, "agent start", a.Start, c.start)
			eq(t, "agent end", a.End, c.end)
			eq(t, "agent end inferred", a.EndInferred, c.inferred)
			eq(t, "run start", run.Start, c.runStart)
			eq(t, "run end", run.End, c.runEnd)
			checkEnclosed(t, run)
			if run.End-run.Start > 24*60*60*1000 {
				t.Errorf("run spans %d ms", run.End-run.Start)
			}
			want := map[ingest.Violation]int64{ingest.ViolationBadTime: c.badTime}
			if c.badField > 0 {
				want[ingest.ViolationBadField] = c.badField
			}
			wantViolations(t, r.stats, want)
		})
	}
}

// TestTrustCaps: each cap gives up the documented thing, with one
// over_capacity per occasion.
func TestTrustCaps(t *testing.T) {
	t.Run("runs: the oldest unfinished run is abandoned and finalized at once", func(t *testing.T) {
		r := newTrRig(t, ingest.TrackerOptions{Caps: ingest.Caps{Runs: 2}})
		r.at(T0, lnWorkflow("w0"))
		r.at(T0+1, lnUpdated("w0", "completed", T0+1))
		r.at(T0+1, lnNotify("w0", "completed")) // finished: not a candidate
		r.at(T0+2, lnWorkflow("w1"))
		r.at(T0+3, lnProgress("w1", agentRow(1, "start", "agentId", "a1", "startedAt", T0+3)))
		r.at(T0+4, lnWorkflow("w2"))
		r.at(T0+5, lnWorkflow("w3")) // w1 given up
		wantViolations(t, r.stats, map[ingest.Violation]int64{ingest.ViolationOverCapacity: 1})
		w1 := oneRun(t, r.rec, ingest.RunFinalized, "w1")
		eq(t, "w1 status", w1.Status, ingest.StatusAbandoned)
		eq(t, "w1 end (last seen)", w1.End, T0+3)
		eq(t, "w1 agent", agentOf(t, w1, 1).State, ingest.AgentAbandoned)
		// w1 was finalized before w3 was announced.
		order := ""
		for _, e := range r.rec.Events {
			if (e.Kind == ingest.RunFinalized && e.Run.TaskID == "w1") || (e.Kind == ingest.RunStarted && e.Run.TaskID == "w3") {
				order += e.Run.TaskID + " "
			}
		}
		eq(t, "order", order, "w1 w3 ")
		r.at(T0+6, lnNotify("w2", "completed"))
		r.at(T0+6, lnNotify("w3", "failed"))
		r.tr.Close(T0 + 60_000)
		for task, st := range map[string]ingest.RunStatus{"w0": ingest.StatusCompleted, "w1": ingest.StatusAbandoned, "w2": ingest.StatusCompleted, "w3": ingest.StatusFailed} {
			eq(t, task+" finished status", oneRun(t, r.rec, ingest.RunFinished, task).Status, st)
			oneRun(t, r.rec, ingest.RunFinalized, task)
		}
		wantViolations(t, r.stats, map[ingest.Violation]int64{ingest.ViolationOverCapacity: 1})
	})
	t.Run("runs: the given-up run's own notification is late, not a duplicate", func(t *testing.T) {
		r := newTrRig(t, ingest.TrackerOptions{Caps: ingest.Caps{Runs: 1}})
		r.at(T0, lnWorkflow("w1"))
		r.at(T0+1, lnWorkflow("w2"))
		r.at(T0+2, lnNotify("w1", "completed"))
		r.tr.Close(T0 + 60_000)
		// w1 never had a notification: its first one is no duplicate.
		wantViolations(t, r.stats, map[ingest.Violation]int64{ingest.ViolationOverCapacity: 1, ingest.ViolationLateEvent: 1})
	})
	t.Run("tasks: plain tasks have their own cap", func(t *testing.T) {
		r := newTrRig(t, ingest.TrackerOptions{Caps: ingest.Caps{Tasks: 1}})
		r.at(T0, lnStarted("b1", "", "local_bash", ""))
		r.at(T0+1, lnWorkflow("w1"))
		r.at(T0+2, lnWorkflow("w2")) // workflows do not count against Tasks
		r.at(T0+3, lnStarted("b2", "", "local_bash", ""))
		wantViolations(t, r.stats, map[ingest.Violation]int64{ingest.ViolationOverCapacity: 1})
		eq(t, "b1 status", oneRun(t, r.rec, ingest.TaskEnded, "b1").Status, ingest.StatusAbandoned)
		eq(t, "w1 still open", len(runsOf(r.rec, ingest.RunFinished, "w1")), 0)
		r.at(T0+4, lnNotify("b2", "completed"))
		r.tr.Close(T0 + 60_000)
		eq(t, "b2 status", oneRun(t, r.rec, ingest.TaskEnded, "b2").Status, ingest.StatusCompleted)
		wantViolations(t, r.stats, map[ingest.Violation]int64{ingest.ViolationOverCapacity: 1})
	})
	t.Run("agents: extra entries ignored, one count per snapshot", func(t *testing.T) {
		r := newTrRig(t, ingest.TrackerOptions{Caps: ingest.Caps{Agents: 2}})
		rows := []jobj{agentRow(1, "start", "startedAt", T0+1), agentRow(2, "start", "startedAt", T0+2),
			agentRow(3, "start", "startedAt", T0+3), agentRow(4, "start", "startedAt", T0+4)}
		r.at(T0, lnWorkflow("w1"))
		r.at(T0+10, lnProgress("w1", rows...))
		r.at(T0+20, lnProgress("w1", rows...))
		r.at(T0+30, lnProgress("w1", rows[:2]...)) // within the cap: not counted
		r.at(T0+40, lnNotify("w1", "stopped"))
		r.tr.Close(T0 + 60_000)
		run := finalRun(t, r.rec, "w1", "")
		eq(t, "agents kept", len(run.Agents), 2)
		eq(t, "agent 3 never ended", countAgent(r.rec, ingest.AgentEnded, "w1", 3), 0)
		wantViolations(t, r.stats, map[ingest.Violation]int64{ingest.ViolationOverCapacity: 2})
	})
	t.Run("phases: extra phase entries ignored, one count per snapshot", func(t *testing.T) {
		r := newTrRig(t, ingest.TrackerOptions{Caps: ingest.Caps{Phases: 1}})
		r.at(T0, lnWorkflow("w1"))
		r.at(T0+10, lnProgress("w1", phaseRow(1, "a"), phaseRow(2, "b"), phaseRow(3, "c")))
		r.at(T0+40, lnNotify("w1", "completed"))
		r.tr.Close(T0 + 60_000)
		eq(t, "phases kept", len(finalRun(t, r.rec, "w1", "").Phases), 1)
		wantViolations(t, r.stats, map[ingest.Violation]int64{ingest.ViolationOverCapacity: 1})
	})
	t.Run("phases: phases named only by agents stay within the cap", func(t *testing.T) {
		r := newTrRig(t, ingest.TrackerOptions{Caps: ingest.Caps{Phases: 1}})
		r.at(T0, lnWorkflow("w1"))
		r.at(T0+10, lnProgress("w1", agentRow(1, "done", "phaseIndex", 1, "startedAt", T0+1, "endedAt", T0+2),
			agentRow(2, "done", "phaseIndex", 2, "startedAt", T0+1, "endedAt", T0+2),
			agentRow(3, "done", "phaseIndex", 3, "startedAt", T0+1, "endedAt", T0+2)))
		r.at(T0+40, lnNotify("w1", "completed"))
		r.tr.Close(T0 + 60_000)
		run := finalRun(t, r.rec, "w1", "")
		if len(run.Phases) > 1 {
			t.Errorf("finalized run has %d phases, cap 1 (derivePhases adds the phases agents name without the cap)", len(run.Phases))
		}
	})
	t.Run("grace: the longest-waiting finished run is finalized early", func(t *testing.T) {
		r := newTrRig(t, ingest.TrackerOptions{Caps: ingest.Caps{Grace: 1}})
		r.at(T0, lnWorkflow("w1"))
		r.at(T0+1, lnWorkflow("w2"))
		r.at(T0+5, lnProgress("w1", agentRow(1, "start", "agentId", "a1", "startedAt", T0+5)))
		r.at(T0+100, lnNotify("w1", "stopped"))
		r.at(T0+200, lnNotify("w2", "completed"))
		wantViolations(t, r.stats, map[ingest.Violation]int64{ingest.ViolationOverCapacity: 1})
		var at int64
		for _, e := range r.rec.Events {
			if e.Kind == ingest.RunFinalized && e.Run.TaskID == "w1" {
				at = e.At
			}
		}
		eq(t, "w1 finalized at w2's notification (grace would close at T0+5100)", at, T0+200)
		eq(t, "w2 not finalized yet", len(runsOf(r.rec, ingest.RunFinalized, "w2")), 0)
		// The flip w1 would have taken is now late.
		r.at(T0+300, lnProgress("w1", agentRow(1, "error", "agentId", "a1", "startedAt", T0+5, "endedAt", T0+250)))
		r.tr.Close(T0 + 60_000)
		eq(t, "w1 agent", agentOf(t, finalRun(t, r.rec, "w1", ""), 1).State, ingest.AgentAbandoned)
		wantViolations(t, r.stats, map[ingest.Violation]int64{ingest.ViolationOverCapacity: 1, ingest.ViolationLateEvent: 1})
	})
}

// gatherTr reads every series of name from reg as "k=v,k=v" → value.
func gatherTr(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var kv []string
			for _, l := range m.GetLabel() {
				kv = append(kv, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(kv)
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			out[strings.Join(kv, ",")] = v
		}
	}
	return out
}

// TestTrustLateTaskStarted: a task_progress before its task_started adopts
// the run but holds its RunStarted back; the late task_started names it
// (once: start_after_progress, never duplicate_start), so every sink,
// metrics included, sees the real workflow name.
func TestTrustLateTaskStarted(t *testing.T) {
	m, err := metrics.New(metrics.Options{NoRuntimeCollectors: true})
	if err != nil {
		t.Fatal(err)
	}
	r := newTrRig(t, ingest.TrackerOptions{Sinks: []ingest.Sink{m}})
	r.at(T0+10, lnProgress("w1", agentRow(1, "start", "agentId", "a1", "startedAt", T0+5)))
	r.at(T0+20, lnProgress("w1", agentRow(1, "done", "agentId", "a1", "startedAt", T0+5, "endedAt", T0+15)))
	eq(t, "lifecycle before the task_started", kindsOf(r.rec), "")
	r.at(T0+30, lnStarted("w1", "", "local_workflow", "real-name"))
	r.at(T0+40, lnStarted("w1", "", "local_workflow", "real-name")) // a true duplicate now
	r.at(T0+50, lnNotify("w1", "completed"))
	r.tr.Close(T0 + 60_000)

	eq(t, "lifecycle", kindsOf(r.rec), "run_started agent_started agent_ended run_finished run_finalized")
	st := oneRun(t, r.rec, ingest.RunStarted, "w1")
	eq(t, "RunStarted name", st.Name, "real-name")
	eq(t, "RunStarted description", st.Description, "desc w1")
	eq(t, "RunStarted adopted", st.Adopted, false)
	wantViolations(t, r.stats, map[ingest.Violation]int64{ingest.ViolationUnknownTask: 1, ingest.ViolationStartAfterProgress: 1, ingest.ViolationDuplicateStart: 1})
	started := gatherTr(t, m.Registry(), "cbc_workflow_runs_started_total")
	eq(t, "runs_started{real-name}", started["workflow=real-name"], 1.0)
	eq(t, "runs_started{unknown}", started["workflow=unknown"], 0.0)
	eq(t, "runs_total{real-name,completed}", gatherTr(t, m.Registry(), "cbc_workflow_runs_total")["status=completed,workflow=real-name"], 1.0)
	eq(t, "agents_total{real-name,done}", gatherTr(t, m.Registry(), "cbc_workflow_agents_total")["state=done,workflow=real-name"], 1.0)
}

// TestTrustAdoptedAnnouncedAfterGrace: without a task_started the adopted
// run is announced one grace window after it was adopted, unnamed, with
// what its agents did meanwhile; and at once if it ends first.
func TestTrustAdoptedAnnouncedAfterGrace(t *testing.T) {
	t.Run("window", func(t *testing.T) {
		r := newTrRig(t, ingest.TrackerOptions{})
		r.at(T0, lnProgress("w1", agentRow(1, "start", "agentId", "a1", "startedAt", T0-5)))
		r.tr.Advance(T0 + 4999)
		eq(t, "held back", kindsOf(r.rec), "")
		r.tr.Advance(T0 + 5000)
		eq(t, "announced", kindsOf(r.rec), "run_started agent_started")
		eq(t, "unnamed", oneRun(t, r.rec, ingest.RunStarted, "w1").Name, "")
		for _, e := range r.rec.Events {
			if e.Kind == ingest.RunStarted {
				eq(t, "announced at", e.At, T0+5000)
			}
		}
		r.at(T0+6000, lnNotify("w1", "completed"))
		r.tr.Close(T0 + 60_000)
		eq(t, "lifecycle", kindsOf(r.rec), "run_started agent_started run_finished agent_ended run_finalized")
		wantViolations(t, r.stats, map[ingest.Violation]int64{ingest.ViolationUnknownTask: 1, ingest.ViolationMissingTerminal: 1})
	})
	t.Run("ends inside the window", func(t *testing.T) {
		r := newTrRig(t, ingest.TrackerOptions{})
		r.at(T0, lnProgress("w1", agentRow(1, "done", "agentId", "a1", "startedAt", T0-5, "endedAt", T0)))
		r.at(T0+100, lnNotify("w1", "failed"))
		r.tr.Close(T0 + 60_000)
		eq(t, "lifecycle", kindsOf(r.rec), "run_started agent_started agent_ended run_finished run_finalized")
		eq(t, "status", finalRun(t, r.rec, "w1", "").Status, ingest.StatusFailed)
	})
}

// ---- generated streams ----

// trLine is one line of a generated stream, with the source it goes to.
type trLine struct {
	src  tap.Source
	line jobj
	at   int64 // generation time, for interleaving
	seq  int
}

// trGarbageTime returns a value that is no epoch-ms time of the stream.
func trGarbageTime(rng *rand.Rand, near int64) any {
	switch rng.IntN(5) {
	case 0:
		return near / 1000 // seconds
	case 1:
		return -5
	case 2:
		return 9e15
	case 3:
		return 4_102_444_800_000 // 2100-01-01: just out
	default:
		return 999_999_999_999
	}
}

// trTime puts a time field into m: usually v, sometimes missing, sometimes
// garbage.
func trTime(rng *rand.Rand, m jobj, key string, v int64) {
	switch p := rng.Float64(); {
	case p < 0.07:
	case p < 0.11:
		m[key] = trGarbageTime(rng, v)
	default:
		m[key] = v
	}
}

type trAgent struct {
	idx, phase              int
	queued, started, end    int64
	final                   string // done, error, cached
	noStart, noEnd, backEnd bool
}

// trStream generates one stream of several interleaved workflow runs:
// agents completing in random order, interrupts and stops with late flips
// (some past the grace window), missing and garbage times, progress before
// task_started, abandoned runs, noise lines.
func trStream(rng *rand.Rand) []trLine {
	var out []trLine
	add := func(at int64, src tap.Source, l jobj) {
		out = append(out, trLine{src: src, line: l, at: at, seq: len(out)})
	}
	nRuns := 1 + rng.IntN(4)
	for ri := range nRuns {
		task := fmt.Sprintf("w%d", ri)
		sess := "S" + task
		t0 := T0 + rng.Int64N(20_000)
		nPh := 1 + rng.IntN(3)
		agents := make([]trAgent, 1+rng.IntN(6))
		var lastEnd int64
		for i := range agents {
			a := &agents[i]
			a.idx, a.phase = i+1, 1+rng.IntN(nPh)
			a.queued = t0 + rng.Int64N(2000)
			a.started = a.queued + rng.Int64N(1000)
			a.end = a.started + 1 + rng.Int64N(5000)
			switch p := rng.Float64(); {
			case p < 0.15:
				a.final = "error"
			case p < 0.3:
				a.final = "cached"
				a.noStart = rng.IntN(2) == 0
			default:
				a.final = "done"
			}
			a.noEnd = rng.Float64() < 0.08
			a.backEnd = rng.Float64() < 0.05 // endedAt before startedAt
			lastEnd = max(lastEnd, a.end)
		}
		// How the run ends.
		terminal := []string{"completed", "completed", "failed", "stopped", "stopped", "abandoned"}[rng.IntN(6)]
		tEnd := lastEnd + 1 + rng.Int64N(300)
		switch terminal {
		case "failed", "stopped", "abandoned":
			tEnd = t0 + 200 + rng.Int64N(lastEnd-t0+300)
		}
		row := func(a *trAgent, now int64, flip bool) jobj {
			m := jobj{"type": "workflow_agent", "index": a.idx, "phaseIndex": a.phase, "label": fmt.Sprintf("agent %d", a.idx)}
			trTime(rng, m, "queuedAt", a.queued)
			switch {
			case flip:
				m["state"], m["agentId"], m["error"] = "error", fmt.Sprintf("v1:%d", a.idx), "subagent aborted: x"
				trTime(rng, m, "startedAt", a.started)
				if rng.IntN(2) == 0 {
					trTime(rng, m, "endedAt", now)
				}
				return m
			case a.end <= now:
				m["state"], m["agentId"] = a.final, fmt.Sprintf("v1:%d", a.idx)
				if a.final == "cached" && a.noStart {
					return m
				}
				trTime(rng, m, "startedAt", a.started)
				switch {
				case a.backEnd:
					m["endedAt"] = a.started - 1000
				case !a.noEnd:
					trTime(rng, m, "endedAt", a.end)
				}
				if rng.IntN(3) == 0 {
					m["durationMs"] = a.end - a.started
				}
			case a.started <= now && !(a.final == "cached" && a.noStart):
				m["state"], m["agentId"] = []string{"start", "running", "progress"}[rng.IntN(3)], fmt.Sprintf("v1:%d", a.idx)
				trTime(rng, m, "startedAt", a.started)
			default:
				m["state"] = "start" // queued
			}
			if rng.Float64() < 0.01 {
				m["state"] = "weird"
			}
			return m
		}
		snapshot := func(now int64, flip bool) jobj {
			var rows []jobj
			for p := 1; p <= nPh; p++ {
				rows = append(rows, phaseRow(p, fmt.Sprintf("phase %d", p)))
			}
			for i := range agents {
				a := &agents[i]
				if a.queued > now && !flip {
					continue
				}
				rows = append(rows, row(a, now, flip && !(a.end <= tEnd) && a.started <= tEnd))
			}
			l := lnProgress(task, rows...)
			l["session_id"] = sess
			if rng.IntN(2) == 0 {
				l["usage"] = usage(rng.Int64N(1000), rng.Int64N(20), now-t0)
			}
			if rng.IntN(3) == 0 {
				l["written_at"] = isoMs(now)
			}
			return l
		}
		started := lnStarted(task, "", "local_workflow", "flow-"+task)
		started["session_id"] = sess
		if rng.IntN(2) == 0 {
			started["written_at"] = isoMs(t0)
		}
		now := t0
		if rng.Float64() < 0.15 {
			// Progress before its task_started: the run is adopted.
			add(now, tap.SourceStdout, snapshot(now, false))
			now++
		}
		add(now, tap.SourceStdout, started)
		for now < tEnd {
			now = min(tEnd, now+100+rng.Int64N(1500))
			add(now, tap.SourceStdout, snapshot(now, false))
			if rng.Float64() < 0.1 {
				add(now, tap.SourceStdout, jobj{"type": "assistant", "message": jobj{"content": "text mentioning \"task_progress\""}})
			}
		}
		if terminal == "abandoned" {
			continue
		}
		if terminal == "stopped" {
			if rng.IntN(2) == 0 {
				add(tEnd, tap.SourceStdin, lnInterrupt(sess))
			} else {
				add(tEnd, tap.SourceStdin, lnStopTask(task))
			}
		}
		if rng.Float64() < 0.8 {
			st := map[string]string{"completed": "completed", "failed": "failed", "stopped": "killed"}[terminal]
			u := jobj{"type": "system", "subtype": "task_updated", "task_id": task, "patch": jobj{"status": st}}
			endTime := tEnd
			if rng.Float64() < 0.2 {
				endTime -= rng.Int64N(400) // the CLI's clock a little behind its agents'
			}
			trTime(rng, u["patch"].(jobj), "end_time", endTime)
			add(tEnd, tap.SourceStdout, u)
		}
		n := lnNotify(task, terminal)
		n["session_id"] = sess
		n["usage"] = usage(rng.Int64N(5000), rng.Int64N(50), max(0, tEnd-t0-rng.Int64N(300)))
		if rng.IntN(2) == 0 {
			n["written_at"] = isoMs(tEnd)
		}
		add(tEnd, tap.SourceStdout, n)
		if terminal == "stopped" && rng.Float64() < 0.8 {
			// cbc's late flips, some past the 5 s window.
			flipAt := tEnd + rng.Int64N(7000)
			add(flipAt, tap.SourceStdout, snapshot(flipAt, true))
		}
	}
	// Interleave the runs by time, keeping each run's own order.
	slices.SortStableFunc(out, func(a, b trLine) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.seq - b.seq
	})
	return out
}

// trFeed runs lines through a replay pipeline into a trChecker.
func trFeed(lines []trLine, caps ingest.Caps) *trChecker {
	c := &trChecker{lives: map[trKey]*trLife{}, statuses: map[string]string{}}
	p := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{c}, Caps: caps}})
	for _, l := range lines {
		p.Write(l.src, trEncode(l.line))
	}
	p.Close()
	c.done()
	return c
}

func trEncode(l jobj) []byte {
	b, err := json.Marshal(l)
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

type trKey struct{ task, run string }

type trLife struct {
	started, finished, finalized int
	finStart, finEnd             int64 // at RunFinished
	agentEnded                   map[int]int
}

// trChecker is a Sink checking, as the events go by (no copies: a Recorder
// costs too much under -race for hundreds of streams), the invariants every
// output relies on: one RunStarted, RunFinished and RunFinalized per run,
// nothing after RunFinalized, a finalized run enclosing its phases and
// agents, each agent ended once and in a final state, no span of more than
// an hour (the streams last seconds), and the pair only widened between
// finish and finalize. statuses maps each task id to its runs' terminal
// statuses (RunFinished and TaskEnded: a corrupted task_type may make a
// plain task).
type trChecker struct {
	lives    map[trKey]*trLife
	statuses map[string]string
	errs     []string
}

func (c *trChecker) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

func (c *trChecker) Observe(l ingest.Lifecycle) {
	if l.Kind == ingest.TaskEnded {
		c.statuses[l.Run.TaskID] += l.Run.Status.String() + " "
	}
	if l.Kind == ingest.ViolationSeen || l.Run == nil || !l.Run.Workflow {
		return
	}
	r := l.Run
	k := trKey{r.TaskID, r.RunID}
	life := c.lives[k]
	if life == nil {
		life = &trLife{agentEnded: map[int]int{}}
		c.lives[k] = life
	}
	if life.finalized > 0 {
		c.fail("%s of %s after its RunFinalized", l.Kind, r.TaskID)
	}
	switch l.Kind {
	case ingest.RunStarted:
		life.started++
	case ingest.AgentEnded:
		life.agentEnded[l.Agent.Index]++
	case ingest.RunFinished:
		life.finished++
		life.finStart, life.finEnd = r.Start, r.End
		c.statuses[r.TaskID] += r.Status.String() + " "
		if r.Start > r.End {
			c.fail("%s finished with start %d > end %d", r.TaskID, r.Start, r.End)
		}
	case ingest.RunFinalized:
		life.finalized++
		if life.started != 1 || life.finished != 1 {
			c.fail("%s finalized after %d RunStarted, %d RunFinished", r.TaskID, life.started, life.finished)
		}
		c.errs = append(c.errs, enclosedErrs(r)...)
		if r.End-r.Start > 60*60*1000 {
			c.fail("%s spans %d ms", r.TaskID, r.End-r.Start)
		}
		if life.finished == 1 && (r.Start > life.finStart || r.End < life.finEnd) {
			c.fail("%s: %d..%d at finish, %d..%d at finalize: narrowed", r.TaskID, life.finStart, life.finEnd, r.Start, r.End)
		}
		for _, a := range r.Agents {
			if !a.State.Final() {
				c.fail("%s agent %d finalized %s", r.TaskID, a.Index, a.State)
			}
			if n := life.agentEnded[a.Index]; n != 1 {
				c.fail("%s agent %d: %d AgentEnded", r.TaskID, a.Index, n)
			}
		}
	}
}

// done checks that every run seen got its three events.
func (c *trChecker) done() {
	for k, l := range c.lives {
		if l.started != 1 || l.finished != 1 || l.finalized != 1 {
			c.fail("%v: %d RunStarted, %d RunFinished, %d RunFinalized, want 1 each", k, l.started, l.finished, l.finalized)
		}
	}
}

// trPaths lists the paths of the fields of v that a corruption may hit:
// every key at any depth but status, type, subtype and task_id.
func trPaths(v any, prefix []any, out *[][]any) {
	switch x := v.(type) {
	case jobj:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			p := append(slices.Clone(prefix), k)
			switch k {
			case "status", "type", "subtype", "task_id":
			default:
				*out = append(*out, p)
			}
			trPaths(x[k], p, out)
		}
	case []any:
		for i, e := range x {
			trPaths(e, append(slices.Clone(prefix), i), out)
		}
	case []jobj:
		for i, e := range x {
			trPaths(e, append(slices.Clone(prefix), i), out)
		}
	}
}

// trDeepCopy copies a line through JSON-shaped values.
func trDeepCopy(v any) any {
	switch x := v.(type) {
	case jobj:
		m := make(jobj, len(x))
		for k, e := range x {
			m[k] = trDeepCopy(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = trDeepCopy(e)
		}
		return s
	}
	return v
}

// trSet replaces the value at path in v.
func trSet(v any, path []any, val any) {
	for i, k := range path {
		last := i == len(path)-1
		switch x := v.(type) {
		case jobj:
			if last {
				x[k.(string)] = val
				return
			}
			v = x[k.(string)]
		case []any:
			if last {
				x[k.(int)] = val
				return
			}
			v = x[k.(int)]
		}
	}
}

// trWrongTyped are values of the wrong type for every field of the
// protocol (1e400 is valid JSON but no float64).
var trWrongTyped = []struct {
	name string
	v    any
}{{`"x"`, "x"}, {"{}", jobj{}}, {"[]", []any{}}, {"1e400", json.RawMessage("1e400")}, {"true", true}}

// TestTrustProperties checks, over a few hundred generated hostile streams,
// the invariants every output relies on (see trCheckStream), and that one
// wrong-typed field anywhere (but the fields that carry the status and the
// identity) never changes how any run ended: a tolerant decoder ignores the
// field, it does not drop the line.
func TestTrustProperties(t *testing.T) {
	const streams = 300
	// Failures are grouped by what broke (numbers stripped), with a few
	// examples each, so that one bug does not bury the others.
	broken := map[string][]string{}
	note := func(name string, errs []string) {
		for _, e := range errs {
			k := trShape(e)
			if len(broken[k]) < 3 {
				broken[k] = append(broken[k], name+": "+e)
			} else {
				broken[k] = append(broken[k], "")
			}
		}
	}
	corrupt := map[string]int{} // "subtype path = value" → corruptions that changed a status
	var corruptExamples []string
	for seed := range uint64(streams) {
		rng := rand.New(rand.NewPCG(seed, 17))
		lines := trStream(rng)
		name := fmt.Sprintf("seed %d", seed)
		var caps ingest.Caps
		if seed%4 == 3 {
			// Small caps: runs given up, finished runs finalized early.
			caps = ingest.Caps{Runs: 2, Grace: 1, Agents: 4, Phases: 2}
		}
		c := trFeed(lines, caps)
		note(name, c.errs)
		if caps != (ingest.Caps{}) {
			continue // a corrupted task_type would change what the caps count
		}
		li := rng.IntN(len(lines))
		var paths [][]any
		trPaths(lines[li].line, nil, &paths)
		if len(paths) == 0 {
			continue
		}
		path := paths[rng.IntN(len(paths))]
		wrong := trWrongTyped[rng.IntN(len(trWrongTyped))]
		bad := slices.Clone(lines)
		l := trDeepCopy(lines[li].line).(jobj)
		trSet(l, path, wrong.v)
		bad[li].line = l
		cc := trFeed(bad, ingest.Caps{})
		note(name+" corrupted", cc.errs)
		if !maps.Equal(cc.statuses, c.statuses) {
			sub, _ := lines[li].line["subtype"].(string)
			if sub == "" {
				sub, _ = lines[li].line["type"].(string)
			}
			key := fmt.Sprintf("%s %s = %s", sub, trPathText(path), wrong.name)
			corrupt[key]++
			if len(corruptExamples) < 5 {
				corruptExamples = append(corruptExamples, fmt.Sprintf("%s: %s\n  line %s  statuses %v, want %v", name, key, trEncode(l), cc.statuses, c.statuses))
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(broken)) {
		ex := slices.DeleteFunc(slices.Clone(broken[k]), func(s string) bool { return s == "" })
		t.Errorf("%d× %s, e.g.\n  %s", len(broken[k]), k, strings.Join(ex, "\n  "))
	}
	if len(corrupt) > 0 {
		var keys []string
		for k, n := range corrupt {
			keys = append(keys, fmt.Sprintf("  %s (%d)", k, n))
		}
		sort.Strings(keys)
		t.Errorf("a wrong-typed field changed a run's terminal status (the line was dropped, not the field):\n%s\nexamples:\n%s",
			strings.Join(keys, "\n"), strings.Join(corruptExamples, "\n"))
	}
}

// trShape is an error message with its numbers and ids blanked, to group.
func trShape(e string) string {
	var b strings.Builder
	prev := false
	for _, r := range e {
		digit := r >= '0' && r <= '9'
		if digit && !prev {
			b.WriteByte('#')
		}
		if !digit {
			b.WriteRune(r)
		}
		prev = digit
	}
	return b.String()
}

// trPathText shows a path with array indexes as [] so that failures group.
func trPathText(path []any) string {
	var b strings.Builder
	for _, k := range path {
		switch k := k.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(k)
		case int:
			b.WriteString("[]")
		}
	}
	return b.String()
}
