// Tests of issue 28 (Trust II), classes 1, 2, 5 and 7 in the Tracker: the
// final snapshot a task_notification carries, snapshots resent after a
// reconnect, an end before the run's start, and the other facts the Claude
// Agent SDK's reader knows (reason, endedWithRun, a redacted error,
// run_id ordering). One table per class; TestTrust28Properties then checks,
// over the generated hostile streams of TestTrustProperties, that a resent
// snapshot changes nothing and that a notification-carried snapshot changes
// an agent's terminal state only to the one it shows.
package ingest_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/ingesttest"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// lnFinal is a task_notification carrying the run's final snapshot.
func lnFinal(task, status string, entries ...jobj) jobj {
	arr := make([]any, len(entries))
	for i, e := range entries {
		arr[i] = e
	}
	return set(lnNotify(task, status), "workflow_progress", arr)
}

// resent marks a copy of line as sent again after a reconnect.
func resent(line jobj) jobj {
	c := maps.Clone(line)
	c["resent"] = true
	return c
}

// running and done are agent rows of agent i with times around T0.
func running(i int) jobj {
	return agentRow(i, "start", "agentId", fmt.Sprintf("a%d", i), "startedAt", T0+int64(i)*100)
}

func done(i int) jobj {
	return agentRow(i, "done", "agentId", fmt.Sprintf("a%d", i), "startedAt", T0+int64(i)*100, "endedAt", T0+1000+int64(i))
}

// agentStates checks the finalized run's agents' states, by index.
func agentStates(task string, want map[int]ingest.AgentState) func(*testing.T, *ingesttest.Recorder, *ingest.Stats) {
	return func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
		t.Helper()
		run := finalRun(t, rec, task, "")
		for i, st := range want {
			eq(t, fmt.Sprintf("agent %d state", i), agentOf(t, run, i).State, st)
		}
		eq(t, "agents", len(run.Agents), len(want))
	}
}

// TestTrust28NotificationSnapshot (class 1): a workflow_progress on the
// task_notification is the run's final snapshot, applied like any other
// (snapshot replacement) before the terminal status is taken.
func TestTrust28NotificationSnapshot(t *testing.T) {
	runStreamCases(t, []streamCase{
		{name: "agents done only in the final snapshot are done, and not missing their terminal state",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", running(1), running(2)), lnFinal("w1", "completed", done(1), done(2))},
			kinds: "run_started agent_started agent_started agent_ended agent_ended run_finished run_finalized",
			check: func(t *testing.T, rec *ingesttest.Recorder, st *ingest.Stats) {
				agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentDone, 2: ingest.AgentDone})(t, rec, st)
				run := finalRun(t, rec, "w1", "")
				eq(t, "status", run.Status, ingest.StatusCompleted)
				eq(t, "agent 2 end (the snapshot's endedAt)", agentOf(t, run, 2).End, T0+1002)
				eq(t, "agent 2 end inferred", agentOf(t, run, 2).EndInferred, false)
				// The final snapshot's ends are in the run's times at
				// RunFinished already, not only after the grace window.
				eq(t, "end at finish", oneRun(t, rec, ingest.RunFinished, "w1").End, T0+1002)
			}},
		{name: "without it the same run is charged (the rule above is what removes it)",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", running(1), running(2)), lnNotify("w1", "completed")},
			viol:  map[ingest.Violation]int64{ingest.ViolationMissingTerminal: 2},
			check: agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentAbandoned, 2: ingest.AgentAbandoned})},
		{name: "agents and phases first seen in the final snapshot",
			lines: []jobj{lnWorkflow("w1"), lnFinal("w1", "failed", phaseRow(1, "p"), done(1), agentRow(2, "error", "agentId", "a2", "startedAt", T0+5, "phaseIndex", 1))},
			check: func(t *testing.T, rec *ingesttest.Recorder, st *ingest.Stats) {
				agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentDone, 2: ingest.AgentError})(t, rec, st)
				eq(t, "phases", len(finalRun(t, rec, "w1", "").Phases), 1)
			}},
		{name: "a final state seen before stays: the final snapshot's contradiction is a regression",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", done(1)), lnFinal("w1", "completed", agentRow(1, "error", "agentId", "a1", "startedAt", T0+100))},
			viol:  map[ingest.Violation]int64{ingest.ViolationAgentRegression: 1},
			check: agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentDone})},
		{name: "a task never seen: adopted from its final snapshot and ended at once",
			lines: []jobj{lnFinal("w9", "completed", done(1))},
			kinds: "run_started agent_started agent_ended run_finished run_finalized",
			viol:  map[ingest.Violation]int64{ingest.ViolationUnknownTask: 1},
			check: func(t *testing.T, rec *ingesttest.Recorder, st *ingest.Stats) {
				agentStates("w9", map[int]ingest.AgentState{1: ingest.AgentDone})(t, rec, st)
				eq(t, "status", finalRun(t, rec, "w9", "").Status, ingest.StatusCompleted)
			}},
		{name: "a second notification's snapshot is not applied",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", done(1), running(2)), lnNotify("w1", "stopped"), lnFinal("w1", "completed", done(1), done(2))},
			viol:  map[ingest.Violation]int64{ingest.ViolationDuplicateNotify: 1},
			check: func(t *testing.T, rec *ingesttest.Recorder, st *ingest.Stats) {
				agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentDone, 2: ingest.AgentAbandoned})(t, rec, st)
				eq(t, "status", finalRun(t, rec, "w1", "").Status, ingest.StatusStopped)
			}},
		{name: "a plain task's notification has no agents to apply",
			lines: []jobj{lnStarted("b1", "", "local_bash", ""), lnFinal("b1", "completed", done(1))},
			kinds: "task_started task_ended run_finalized",
			check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
				eq(t, "agents", len(finalRun(t, rec, "b1", "").Agents), 0)
			}},
		{name: "the final snapshot's agent count is capped like any snapshot's",
			lines: []jobj{lnWorkflow("w1"), lnFinal("w1", "completed", done(1), done(2), done(3))},
			check: func(t *testing.T, rec *ingesttest.Recorder, st *ingest.Stats) {
				eq(t, "agents", len(finalRun(t, rec, "w1", "").Agents), 3)
			}},
	})
}

// TestTrust28Resent (class 2): a snapshot sent again after a reconnect is
// the same state, not new progress. What the Tracker does with it: nothing
// but count it as an event of interest, unless it is a notification of a
// run not yet finished (the original never reached us: one comes per run).
func TestTrust28Resent(t *testing.T) {
	early := set(lnProgress("w1", running(1), agentRow(2, "start")), "usage", usage(5, 1, 100))
	runStreamCases(t, []streamCase{
		{name: "an earlier snapshot resent after agents ended: no regression, no usage going back",
			lines: []jobj{lnWorkflow("w1"), early, set(lnProgress("w1", done(1), running(2)), "usage", usage(50, 4, 900)), resent(early),
				lnFinal("w1", "completed", done(1), done(2))},
			kinds: "run_started agent_started agent_ended agent_started agent_ended run_finished run_finalized",
			check: func(t *testing.T, rec *ingesttest.Recorder, st *ingest.Stats) {
				agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentDone, 2: ingest.AgentDone})(t, rec, st)
				eq(t, "usage tokens", finalRun(t, rec, "w1", "").Usage.TotalTokens, int64(50))
			}},
		{name: "a resent snapshot neither starts nor ends an agent",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", agentRow(1, "start")), resent(lnProgress("w1", done(1), running(2))), lnNotify("w1", "stopped")},
			kinds: "run_started run_finished agent_ended run_finalized",
			check: agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentNotStarted})},
		{name: "a resent snapshot of a task never seen adopts nothing and counts nothing",
			lines: []jobj{resent(lnProgress("w9", done(1)))},
			kinds: ""},
		{name: "a resent snapshot after the run was finalized is not late",
			grace: time.Millisecond,
			lines: []jobj{lnWorkflow("w1"), set(lnNotify("w1", "completed"), "written_at", isoMs(T0)), set(lnWorkflow("w2"), "written_at", isoMs(T0+60_000)),
				resent(lnProgress("w1", done(1)))},
			kinds: "run_started run_finished run_finalized run_started run_finished run_finalized"},
		{name: "a resent snapshot's bad fields and entries were counted with the original",
			lines: []jobj{lnWorkflow("w1"), resent(set(lnProgress("w1", agentRow(1, "start", "tokens", "x"), jobj{"index": 2}), "usage", "u", "written_at", "x")),
				lnNotify("w1", "completed")},
			kinds: "run_started run_finished run_finalized"},
		{name: "a resent final snapshot after the notification: no duplicate, no regression",
			lines: []jobj{lnWorkflow("w1"), lnFinal("w1", "completed", done(1)), resent(lnFinal("w1", "failed", agentRow(1, "error", "agentId", "a1", "startedAt", T0+100)))},
			check: func(t *testing.T, rec *ingesttest.Recorder, st *ingest.Stats) {
				agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentDone})(t, rec, st)
				eq(t, "status", finalRun(t, rec, "w1", "").Status, ingest.StatusCompleted)
			}},
		{name: "a resent notification of a run not yet finished is its notification, snapshot and all",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", running(1)), resent(lnFinal("w1", "completed", done(1)))},
			check: func(t *testing.T, rec *ingesttest.Recorder, st *ingest.Stats) {
				agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentDone})(t, rec, st)
				eq(t, "status", finalRun(t, rec, "w1", "").Status, ingest.StatusCompleted)
			}},
		{name: "a resent notification of a task never seen adopts nothing",
			lines: []jobj{resent(lnFinal("w9", "completed", done(1)))},
			kinds: ""},
		{name: "resent of the wrong type is a bad field and the frame is new progress",
			lines: []jobj{lnWorkflow("w1"), set(lnProgress("w1", done(1)), "resent", "yes"), lnNotify("w1", "completed")},
			viol:  map[ingest.Violation]int64{ingest.ViolationBadField: 1},
			check: agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentDone})},
		{name: "resent false is new progress",
			lines: []jobj{lnWorkflow("w1"), set(lnProgress("w1", done(1)), "resent", false), lnNotify("w1", "completed")},
			check: agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentDone})},
	})
	t.Run("an abandoned run ends where it last showed, not at a resent frame's time", func(t *testing.T) {
		r := newPipeRig(ingest.PipelineOptions{})
		last := set(lnProgress("w1", running(1)), "written_at", isoMs(T0+2000))
		r.out(lnWorkflow("w1"), last, set(resent(last), "written_at", isoMs(T0+9000)))
		r.p.Close()
		run := finalRun(t, r.rec, "w1", "")
		eq(t, "status", run.Status, ingest.StatusAbandoned)
		eq(t, "end", run.End, T0+2000)
	})
	t.Run("the events counter counts it; nothing else moves", func(t *testing.T) {
		r := newPipeRig(ingest.PipelineOptions{})
		r.out(lnWorkflow("w1"), lnProgress("w1", running(1)))
		before := counters(r.stats, nil)
		n := len(r.rec.Events)
		r.out(resent(lnProgress("w1", done(1))), resent(lnProgress("w8", done(1))), resent(set(lnProgress("w1", done(1)), "usage", 5)))
		after := counters(r.stats, nil)
		eq(t, "events", after[0]-before[0], int64(3))
		// The violations and rejections; the lines and bytes of the
		// sources (the last six) count what was framed.
		if n := len(after) - 6; !slices.Equal(before[1:n], after[1:n]) {
			t.Errorf("counters moved: %v → %v", before, after)
		}
		eq(t, "lifecycle events", len(r.rec.Events), n)
	})
}

// TestTrust28ResentStall (class 2): a resent frame neither resets a run's
// stall clock nor resumes a stalled run; new progress does both.
func TestTrust28ResentStall(t *testing.T) {
	r := newTrRig(t, ingest.TrackerOptions{StallAfter: 10 * time.Second})
	r.at(T0, lnWorkflow("w1"))
	r.at(T0+1000, lnProgress("w1", running(1)))
	// At T0+9000 a resent frame: the silence since T0+1000 goes on, so the
	// run stalls at T0+11000, not at T0+19000.
	r.at(T0+9000, resent(lnProgress("w1", running(1))))
	r.tr.Advance(T0 + 11_500)
	eq(t, "stalls after a resent frame in the silence", countKind(r.rec, ingest.RunStalled), 1)
	r.at(T0+12_000, resent(lnProgress("w1", done(1))))
	r.tr.Advance(T0 + 12_500)
	eq(t, "resumed by a resent frame", countKind(r.rec, ingest.RunResumed), 0)
	r.at(T0+13_000, lnProgress("w1", done(1)))
	eq(t, "resumed by new progress", countKind(r.rec, ingest.RunResumed), 1)
	r.tr.Close(T0 + 14_000)
	wantViolations(t, r.stats, map[ingest.Violation]int64{})
}

// TestTrust28EndBeforeStart (class 5): a run end before the run's start
// (its task_started's written_at) is bad_time and not used; the next best
// end is taken: the notification's written_at, else the clock.
func TestTrust28EndBeforeStart(t *testing.T) {
	start := set(lnWorkflow("w1"), "written_at", isoMs(T0+1000))
	bad := map[ingest.Violation]int64{ingest.ViolationBadTime: 1}
	cases := []struct {
		name  string
		lines []jobj
		end   int64
		viol  map[ingest.Violation]int64
	}{
		{name: "end_time before the start: the notification's written_at",
			lines: []jobj{start, lnUpdated("w1", "completed", T0+500), set(lnNotify("w1", "completed"), "written_at", isoMs(T0+3000))},
			end:   T0 + 3000, viol: bad},
		{name: "end_time at the start is an end",
			lines: []jobj{start, lnUpdated("w1", "completed", T0+1000), set(lnNotify("w1", "completed"), "written_at", isoMs(T0+3000))},
			end:   T0 + 1000},
		{name: "the notification's written_at before the start: the clock",
			lines: []jobj{start, set(lnProgress("w1", agentRow(1, "start", "queuedAt", T0+4000)), "written_at", isoMs(T0+4500)),
				set(lnNotify("w1", "completed"), "written_at", isoMs(T0+200))},
			end: T0 + 4500, viol: bad},
		{name: "both before the start: both refused",
			lines: []jobj{start, set(lnProgress("w1", agentRow(1, "start", "queuedAt", T0+4000)), "written_at", isoMs(T0+4500)),
				lnUpdated("w1", "completed", T0+100), set(lnNotify("w1", "completed"), "written_at", isoMs(T0+200))},
			end: T0 + 4500, viol: map[ingest.Violation]int64{ingest.ViolationBadTime: 2}},
		{name: "end_time taken before a late task_started said when the run started",
			lines: []jobj{lnProgress("w1", agentRow(1, "start", "queuedAt", T0+1200)), lnUpdated("w1", "completed", T0+500), start,
				set(lnNotify("w1", "completed"), "written_at", isoMs(T0+3000))},
			end: T0 + 3000, viol: map[ingest.Violation]int64{ingest.ViolationBadTime: 1, ingest.ViolationUnknownTask: 1, ingest.ViolationStartAfterProgress: 1}},
		{name: "an abandoned run's end_time before its late start: where it last showed",
			lines: []jobj{lnProgress("w1", agentRow(1, "start", "queuedAt", T0+1200)), lnUpdated("w1", "running", T0+500), start,
				set(lnProgress("w1", agentRow(1, "start", "queuedAt", T0+1200)), "written_at", isoMs(T0+2500))},
			end: T0 + 2500, viol: map[ingest.Violation]int64{ingest.ViolationBadTime: 1, ingest.ViolationUnknownTask: 1, ingest.ViolationStartAfterProgress: 1}},
		{name: "without a written start nothing holds the end back: agents widen the run",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", done(1)), lnUpdated("w1", "completed", T0+50), lnNotify("w1", "completed")},
			end:   T0 + 1001},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newPipeRig(ingest.PipelineOptions{})
			r.out(c.lines...)
			r.p.Close()
			run := finalRun(t, r.rec, "w1", "")
			eq(t, "end", run.End, c.end)
			if run.End < run.Start {
				t.Errorf("run %d..%d", run.Start, run.End)
			}
			checkEnclosed(t, run)
			want := c.viol
			if want == nil {
				want = map[ingest.Violation]int64{}
			}
			wantViolations(t, r.stats, want)
		})
	}
}

// TestTrust28SDKFacts (class 7): reason, endedWithRun, a redacted error,
// queuedAt, run_id ordering. Each improves a signal where it can and never
// fails a line; unknown values cost nothing.
func TestTrust28SDKFacts(t *testing.T) {
	stopped := func(i int) jobj { return set(running(i), "endedWithRun", "stopped") }
	runStreamCases(t, []streamCase{
		{name: "reason kept on the run",
			lines: []jobj{lnWorkflow("w1"), set(lnNotify("w1", "stopped"), "reason", "worker_restart")},
			check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
				eq(t, "reason", finalRun(t, rec, "w1", "").Reason, "worker_restart")
				eq(t, "reason at RunFinished", oneRun(t, rec, ingest.RunFinished, "w1").Reason, "worker_restart")
			}},
		{name: "reason bounded and cleaned; any status, any value",
			lines: []jobj{lnWorkflow("w1"), set(lnNotify("w1", "completed"), "reason", "\u202eworker\x00 restart "+strings.Repeat("y", 400))},
			check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
				got := finalRun(t, rec, "w1", "").Reason
				if len(got) > 128 || !strings.HasPrefix(got, "worker restart yyy") {
					t.Errorf("reason %q", got)
				}
			}},
		{name: "reason of the wrong type: a bad field, the status stands",
			lines: []jobj{lnWorkflow("w1"), set(lnNotify("w1", "stopped"), "reason", 7)},
			viol:  map[ingest.Violation]int64{ingest.ViolationBadField: 1},
			check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
				eq(t, "status", finalRun(t, rec, "w1", "").Status, ingest.StatusStopped)
			}},
		{name: "endedWithRun on a running row: ended in error with the run, not abandoned, not missing its state",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", done(1), running(2)), lnFinal("w1", "completed", done(1), stopped(2))},
			check: func(t *testing.T, rec *ingesttest.Recorder, st *ingest.Stats) {
				agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentDone, 2: ingest.AgentError})(t, rec, st)
				a := agentOf(t, finalRun(t, rec, "w1", ""), 2)
				eq(t, "end inferred (the run's end)", a.EndInferred, true)
			}},
		{name: "endedWithRun on a queued row: never started",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", running(1), agentRow(2, "start")), lnNotify("w1", "stopped"),
				lnProgress("w1", stopped(1), agentRow(2, "start", "endedWithRun", "stopped"))},
			check: agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentError, 2: ingest.AgentNotStarted})},
		{name: "endedWithRun on a queued row seen running before: error",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", running(1)), lnProgress("w1", agentRow(1, "start", "endedWithRun", "stopped")), lnNotify("w1", "stopped")},
			check: agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentError})},
		{name: "the recorded shape: error with endedWithRun and no endedAt ends with the run",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", running(1)),
				lnProgress("w1", set(agentRow(1, "error", "agentId", "a1", "startedAt", T0+100), "error", "Stopped because the workflow was stopped", "endedWithRun", "stopped")),
				lnUpdated("w1", "killed", T0+5000), lnNotify("w1", "stopped")},
			check: func(t *testing.T, rec *ingesttest.Recorder, st *ingest.Stats) {
				agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentError})(t, rec, st)
				a := agentOf(t, finalRun(t, rec, "w1", ""), 1)
				eq(t, "end", a.End, T0+5000)
				eq(t, "end inferred", a.EndInferred, true)
			}},
		{name: "an unknown endedWithRun value: the agent still ended with the run, no violation",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", set(running(1), "endedWithRun", "teleported")), lnNotify("w1", "failed")},
			check: agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentError})},
		{name: "endedWithRun of the wrong type: a bad field only",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", set(running(1), "endedWithRun", true)), lnNotify("w1", "completed")},
			viol:  map[ingest.Violation]int64{ingest.ViolationBadField: 1, ingest.ViolationMissingTerminal: 1},
			check: agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentAbandoned})},
		{name: "endedWithRun on a done row changes nothing",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", set(done(1), "endedWithRun", "completed")), lnNotify("w1", "completed")},
			check: agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentDone})},
		{name: "an error redacted to \"error\" is an error agent with no message",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", set(agentRow(1, "error", "agentId", "a1", "startedAt", T0+100), "error", "error")), lnNotify("w1", "failed")},
			check: func(t *testing.T, rec *ingesttest.Recorder, st *ingest.Stats) {
				agentStates("w1", map[int]ingest.AgentState{1: ingest.AgentError})(t, rec, st)
				eq(t, "error", agentOf(t, finalRun(t, rec, "w1", ""), 1).Error, streamjson.RedactedError)
			}},
		{name: "the redaction does not hide a text seen before",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", set(running(1), "error", "rate limited")),
				lnProgress("w1", set(agentRow(1, "error", "agentId", "a1", "startedAt", T0+100), "error", "error")), lnNotify("w1", "failed")},
			check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
				eq(t, "error", agentOf(t, finalRun(t, rec, "w1", ""), 1).Error, "rate limited")
			}},
		{name: "queuedAt and lastProgressAt on rows: the queue time is kept",
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", set(done(1), "queuedAt", T0+50, "lastProgressAt", T0+900)), lnNotify("w1", "completed")},
			check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
				run := finalRun(t, rec, "w1", "")
				eq(t, "queuedAt", agentOf(t, run, 1).QueuedAt, T0+50)
				eq(t, "run start (earliest agent time)", run.Start, T0+50)
			}},
	})
}

// TestTrust28RunOrder (class 7): run ids of one task sort in the order the
// runs opened, so a frame naming a run that sorts before the task's latest
// and is not open is late: late_event, never a new (adopted) run.
func TestTrust28RunOrder(t *testing.T) {
	withRun := func(l jobj, run string) jobj { return set(maps.Clone(l), "run_id", run) }
	runs := func(rec *ingesttest.Recorder) string {
		var s []string
		for _, e := range rec.Events {
			if e.Kind == ingest.RunFinalized {
				s = append(s, e.Run.TaskID+"/"+e.Run.RunID+":"+e.Run.Status.String())
			}
		}
		return strings.Join(s, " ")
	}
	cases := []struct {
		name  string
		tombs int
		lines []jobj
		runs  string
		viol  map[ingest.Violation]int64
	}{
		{name: "a snapshot of an older run never seen is late, not adopted",
			lines: []jobj{lnStarted("w1", "r2", "local_workflow", "wf"), withRun(lnProgress("w1", done(1)), "r1"), withRun(lnNotify("w1", "completed"), "r2")},
			runs:  "w1/r2:completed", viol: map[ingest.Violation]int64{ingest.ViolationLateEvent: 1}},
		{name: "every kind of frame of an older run is late",
			lines: []jobj{lnStarted("w1", "r2", "local_workflow", "wf"), lnStarted("w1", "r1", "local_workflow", "wf"), withRun(lnUpdated("w1", "failed", 0), "r1"),
				withRun(lnNotify("w1", "failed"), "r1"), withRun(lnFinal("w1", "failed", done(1)), "r0"), withRun(lnNotify("w1", "completed"), "r2")},
			runs: "w1/r2:completed", viol: map[ingest.Violation]int64{ingest.ViolationLateEvent: 4}},
		{name: "an older run still open is that run",
			lines: []jobj{lnStarted("w1", "r1", "local_workflow", "wf"), lnStarted("w1", "r2", "local_workflow", "wf"), withRun(lnProgress("w1", done(1)), "r1"),
				withRun(lnNotify("w1", "completed"), "r1"), withRun(lnNotify("w1", "stopped"), "r2")},
			runs: "w1/r1:completed w1/r2:stopped"},
		{name: "a later run never seen is adopted as before",
			lines: []jobj{lnStarted("w1", "r1", "local_workflow", "wf"), withRun(lnNotify("w1", "completed"), "r1"), withRun(lnProgress("w1", done(1)), "r2"),
				withRun(lnNotify("w1", "completed"), "r2")},
			runs: "w1/r1:completed w1/r2:completed", viol: map[ingest.Violation]int64{ingest.ViolationUnknownTask: 1}},
		{name: "its tombstone forgotten, an older run is still late",
			tombs: 1,
			lines: []jobj{lnStarted("w1", "r1", "local_workflow", "wf"), set(withRun(lnNotify("w1", "completed"), "r1"), "written_at", isoMs(T0)),
				set(lnStarted("w1", "r2", "local_workflow", "wf"), "written_at", isoMs(T0+10_000)), lnStarted("w2", "", "local_workflow", "wf"),
				set(withRun(lnNotify("w1", "completed"), "r2"), "written_at", isoMs(T0+20_000)), set(lnNotify("w2", "completed"), "written_at", isoMs(T0+30_000)),
				withRun(lnProgress("w1", done(1)), "r1")},
			runs: "w1/r1:completed w1/r2:completed w2/:completed", viol: map[ingest.Violation]int64{ingest.ViolationLateEvent: 1}},
		{name: "no run id: the task's latest run, as before",
			lines: []jobj{lnStarted("w1", "r2", "local_workflow", "wf"), lnProgress("w1", done(1)), lnNotify("w1", "completed")},
			runs:  "w1/r2:completed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newPipeRig(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Tombstones: c.tombs}})
			r.out(c.lines...)
			r.p.Close()
			eq(t, "runs", runs(r.rec), c.runs)
			want := c.viol
			if want == nil {
				want = map[ingest.Violation]int64{}
			}
			wantViolations(t, r.stats, want)
		})
	}
}

// tr28Outcome is what a stream came to: per task, its runs' statuses and
// times and its agents' final states and times (at RunFinalized), the
// lifecycle kinds emitted, and the violations counted.
type tr28Outcome struct {
	runs  map[string]string
	kinds map[ingest.LifecycleKind]int
	viol  map[ingest.Violation]int64
	// agents: task → index → final state, for the notification rule.
	agents map[string]map[int]ingest.AgentState
}

type tr28Sink struct{ o *tr28Outcome }

func (s tr28Sink) Observe(l ingest.Lifecycle) {
	s.o.kinds[l.Kind]++
	if l.Kind != ingest.RunFinalized && l.Kind != ingest.TaskEnded {
		return
	}
	r := l.Run
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d..%d", r.Status, r.Start, r.End)
	if r.Workflow {
		states := map[int]ingest.AgentState{}
		for _, a := range r.Agents {
			fmt.Fprintf(&b, " a%d:%s %d..%d", a.Index, a.State, a.Start, a.End)
			states[a.Index] = a.State
		}
		s.o.agents[r.TaskID] = states
	}
	s.o.runs[r.TaskID] += b.String() + "; "
}

// tr28Feed runs lines through a replay pipeline; the trChecker's
// invariants are checked too.
func tr28Feed(lines []trLine) (*tr28Outcome, []string) {
	o := &tr28Outcome{runs: map[string]string{}, kinds: map[ingest.LifecycleKind]int{}, agents: map[string]map[int]ingest.AgentState{}}
	c := &trChecker{lives: map[trKey]*trLife{}, statuses: map[string]string{}}
	st := new(ingest.Stats)
	p := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{c, tr28Sink{o}}, Stats: st}})
	for _, l := range lines {
		p.Write(l.src, trEncode(l.line))
	}
	p.Close()
	c.done()
	o.viol = violationCounts(st)
	return o, c.errs
}

// tr28Spelled maps a row's state spelling to the final state it shows, if
// any.
func tr28Spelled(row jobj) (ingest.AgentState, bool) {
	switch row["state"] {
	case "done":
		if row["cached"] == true {
			return ingest.AgentCached, true
		}
		return ingest.AgentDone, true
	case "error":
		return ingest.AgentError, true
	case "cached":
		return ingest.AgentCached, true
	}
	return 0, false
}

// TestTrust28Properties extends TestTrustProperties' generated streams
// (interleaved runs, every ending, late flips, garbage times, adopted
// runs) with the two shapes of issue 28, and checks:
//
//   - resent: copies of any snapshot or notification, marked resent and
//     put anywhere later in the stream (after the notification, after the
//     grace window), change nothing: every run's status and times, every
//     agent's final state and times, every lifecycle count and every
//     violation count are those of the stream without them;
//   - notification-carried: the last snapshot of each run, with every
//     agent it shows live made done, rides on the run's
//     notification. Then every run ends with the same status, every agent
//     of that snapshot ends in the final state it shows (a later
//     contradiction, cbc's late flips, is a regression, not a change),
//     every other agent as before, and no agent is missing its terminal
//     state (but one of a state spelling the protocol does not define,
//     which reads as live). A resent copy of that notification changes nothing.
func TestTrust28Properties(t *testing.T) {
	const streams = 300
	var errs []string
	fail := func(format string, args ...any) {
		if len(errs) < 12 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	for seed := range uint64(streams) {
		rng := rand.New(rand.NewPCG(seed, 28))
		lines := trStream(rng)
		base, e := tr28Feed(lines)
		for _, s := range e {
			fail("seed %d: %s", seed, s)
		}

		// Resent copies.
		withResent := slices.Clone(lines)
		for range 1 + rng.IntN(4) {
			var cands []int
			for i, l := range withResent {
				if sub := l.line["subtype"]; sub == "task_progress" || sub == "task_notification" {
					cands = append(cands, i)
				}
			}
			if len(cands) == 0 {
				break
			}
			i := cands[rng.IntN(len(cands))]
			cp := withResent[i]
			cp.line = resent(trDeepCopy(cp.line).(jobj))
			at := i + 1 + rng.IntN(len(withResent)-i)
			withResent = slices.Insert(withResent, at, cp)
		}
		got, e := tr28Feed(withResent)
		for _, s := range e {
			fail("seed %d resent: %s", seed, s)
		}
		if !maps.Equal(got.runs, base.runs) || !maps.Equal(got.kinds, base.kinds) || !maps.Equal(got.viol, base.viol) {
			fail("seed %d: resent copies changed the outcome:\n  runs %v\n  want %v\n  kinds %v, want %v\n  violations %v, want %v",
				seed, got.runs, base.runs, got.kinds, base.kinds, got.viol, base.viol)
		}

		// The final snapshot on the notification.
		carried := slices.Clone(lines)
		shows := map[string]map[int]ingest.AgentState{}
		weird := false
		last := map[string]int{}            // task → index of its last snapshot line
		for i := 0; i < len(carried); i++ { // copies are inserted as it goes
			l := carried[i].line
			if l["resent"] == true {
				continue // a copy put in below
			}
			task, _ := l["task_id"].(string)
			switch l["subtype"] {
			case "task_progress":
				if _, ok := l["workflow_progress"]; ok {
					last[task] = i
				}
			case "task_notification":
				j, ok := last[task]
				if !ok {
					continue
				}
				snap := trDeepCopy(carried[j].line["workflow_progress"]).([]any)
				show := map[int]ingest.AgentState{}
				for _, el := range snap {
					row := el.(jobj)
					if row["type"] != "workflow_agent" {
						continue
					}
					st, final := tr28Spelled(row)
					switch row["state"] {
					case "start", "running", "progress":
						row["state"], st, final = "done", ingest.AgentDone, true
					}
					if final {
						show[row["index"].(int)] = st
					} else {
						weird = true // an unknown spelling: live, left as it is
					}
				}
				n := trDeepCopy(l).(jobj)
				n["workflow_progress"] = snap
				carried[i].line = n
				shows[task] = show
				if rng.IntN(3) == 0 {
					carried = slices.Insert(carried, i+1+rng.IntN(len(carried)-i), trLine{line: resent(n)}) // src: stdout
				}
			}
		}
		got, e = tr28Feed(carried)
		for _, s := range e {
			fail("seed %d carried: %s", seed, s)
		}
		for task, base := range base.runs {
			status := func(s string) string { return strings.SplitN(s, " ", 2)[0] }
			if g := got.runs[task]; status(g) != status(base) {
				fail("seed %d carried: %s ended %q, want %q", seed, task, g, base)
			}
		}
		for task, states := range got.agents {
			for idx, st := range states {
				want, shown := shows[task][idx]
				if !shown {
					want = base.agents[task][idx]
				}
				if st != want {
					fail("seed %d carried: %s agent %d ended %v, the final snapshot shows %v (shown %v; without it %v)",
						seed, task, idx, st, want, shown, base.agents[task][idx])
				}
			}
		}
		if n := got.viol[ingest.ViolationMissingTerminal]; n != 0 && !weird {
			fail("seed %d carried: %d missing_terminal_agent_state", seed, n)
		}
	}
	if len(errs) > 0 {
		t.Error(strings.Join(errs, "\n"))
	}
}
