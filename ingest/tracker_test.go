// Tests of the Tracker's reconstruction rules (PROTOCOL.md and the corpus
// README), one table-driven case or more per rule, each built so that it
// fails if the rule is removed:
//
//   - task_progress snapshots replace each other per task (usage-only ticks
//     keep the snapshot); agents and phases are identified by index; phases are
//     derived from agents and span their agents;
//   - agent state spellings (start/running live; done/error/cached and
//     done+cached:true final), unknown spellings, not_started and abandoned;
//   - run status: task_updated merge, authoritative notification with its
//     spellings, one RunFinished per run, duplicate/unknown/conflicting/late
//     updates as violations;
//   - the grace window for late snapshots (stream clock and Advance);
//   - final states are final; stream end abandons open runs;
//   - non-workflow tasks; run identity (run_id, parent, session, tool use);
//   - times taken from events, and replay equal to live;
//   - interrupt and stop_task matching with latency;
//   - the §6 missing-terminal-state check; secrets and previews; bad lines.
//
// Streams go through ingest.NewPipeline (replay clock) unless a case needs to
// control the clock, in which case it drives NewTracker(...).Handle directly.
package ingest_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/ingesttest"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// streamCase is one stream fed through a replay Pipeline, then Close.
type streamCase struct {
	name  string
	grace time.Duration // 0: 5 s
	lines []jobj
	// kinds is the expected lifecycle, violations left out ("" = not checked).
	kinds string
	// viol is the exact set of violations expected (nil: none at all).
	viol  map[ingest.Violation]int64
	check func(t *testing.T, rec *ingesttest.Recorder, st *ingest.Stats)
}

func runStreamCases(t *testing.T, cases []streamCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := c.grace
			if g == 0 {
				g = 5 * time.Second
			}
			// Error texts kept: the cases check how they merge.
			r := newPipeRig(ingest.PipelineOptions{Decode: streamjson.DecodeOptions{KeepErrors: true}, Tracker: ingest.TrackerOptions{Grace: g}})
			r.out(c.lines...)
			r.p.Close()
			if c.kinds != "" {
				if got := kindsOf(r.rec); got != c.kinds {
					t.Errorf("lifecycle\n got: %s\nwant: %s", got, c.kinds)
				}
			}
			want := c.viol
			if want == nil {
				want = map[ingest.Violation]int64{}
			}
			if got := violationCounts(r.stats); !maps.Equal(got, want) {
				t.Errorf("violations = %v, want %v", got, want)
			}
			if c.check != nil {
				c.check(t, r.rec, r.stats)
			}
		})
	}
}

// clockCase drives a Tracker with explicit times. A step with a nil line is
// an Advance to at.
type clockCase struct {
	name    string
	steps   []clockStep
	closeAt int64
	kinds   string
	viol    map[ingest.Violation]int64
	check   func(t *testing.T, rec *ingesttest.Recorder, st *ingest.Stats)
}

type clockStep struct {
	at   int64
	line jobj
}

func runClockCases(t *testing.T, cases []clockCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newClockRig(t, 5*time.Second)
			for _, s := range c.steps {
				if s.line == nil {
					r.tr.Advance(s.at)
				} else {
					r.at(s.at, s.line)
				}
			}
			r.tr.Close(c.closeAt)
			if c.kinds != "" {
				if got := kindsOf(r.rec); got != c.kinds {
					t.Errorf("lifecycle\n got: %s\nwant: %s", got, c.kinds)
				}
			}
			want := c.viol
			if want == nil {
				want = map[ingest.Violation]int64{}
			}
			if got := violationCounts(r.tr.Stats()); !maps.Equal(got, want) {
				t.Errorf("violations = %v, want %v", got, want)
			}
			if c.check != nil {
				c.check(t, r.rec, r.tr.Stats())
			}
		})
	}
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestTrackerSnapshots(t *testing.T) {
	runStreamCases(t, []streamCase{{
		name: "latest snapshot replaces a live agent's values",
		lines: []jobj{
			lnWorkflow("w1"),
			lnProgress("w1", agentRow(1, "start", "agentId", "a1", "startedAt", T0+10, "tokens", 50, "toolCalls", 3, "label", "first")),
			lnProgress("w1", agentRow(1, "start", "agentId", "a1", "startedAt", T0+10, "tokens", 30, "toolCalls", 1, "label", "second")),
		},
		kinds: "run_started agent_started run_finished agent_ended run_finalized",
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			r := finalRun(t, rec, "w1", "")
			eq(t, "agents", len(r.Agents), 1)
			a := agentOf(t, r, 1)
			eq(t, "tokens (not summed, not max)", a.Tokens, 30)
			eq(t, "toolCalls", a.ToolCalls, 1)
			eq(t, "label", a.Label, "second")
			eq(t, "state", a.State, ingest.AgentAbandoned)
		},
	}, {
		name: "usage-only tick updates usage and keeps agents and phases",
		lines: []jobj{
			lnWorkflow("w1"),
			set(lnProgress("w1", phaseRow(1, "Gather"),
				agentRow(1, "start", "agentId", "a1", "queuedAt", T0+5, "startedAt", T0+10),
				agentRow(2, "start", "queuedAt", T0+6)), "usage", usage(10, 1, 100)),
			lnTick("w1", usage(20, 2, 200)),
			lnNotify("w1", "stopped"),
		},
		kinds: "run_started agent_started run_finished agent_ended agent_ended run_finalized",
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			r := finalRun(t, rec, "w1", "")
			eq(t, "usage", r.Usage, streamjson.Usage{TotalTokens: 20, ToolUses: 2, DurationMs: 200})
			eq(t, "agents", len(r.Agents), 2)
			eq(t, "phases", len(r.Phases), 1)
			eq(t, "agent 1", agentOf(t, r, 1).State, ingest.AgentAbandoned)
			eq(t, "agent 2", agentOf(t, r, 2).State, ingest.AgentNotStarted)
		},
	}, {
		name: "unknown entry types are ignored",
		lines: []jobj{
			lnWorkflow("w1"),
			lnProgress("w1", jobj{"type": "workflow_note", "index": 1, "state": "exploded"}, phaseRow(1, "P"),
				agentRow(1, "done", "agentId", "a1", "startedAt", T0+1, "durationMs", 1)),
			lnNotify("w1", "completed"),
		},
		kinds: "run_started agent_started agent_ended run_finished run_finalized",
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			r := finalRun(t, rec, "w1", "")
			eq(t, "agents", len(r.Agents), 1)
			eq(t, "phases", len(r.Phases), 1)
		},
	}, {
		name: "snapshots are per task_id",
		lines: []jobj{
			lnWorkflow("w1"), lnWorkflow("w2"),
			lnProgress("w1", agentRow(1, "start", "agentId", "a1", "startedAt", T0+10, "tokens", 7)),
			lnProgress("w2", agentRow(1, "done", "agentId", "b1", "startedAt", T0+20, "durationMs", 5, "tokens", 9),
				agentRow(2, "done", "agentId", "b2", "startedAt", T0+20, "durationMs", 5, "tokens", 9)),
			lnNotify("w1", "stopped"), lnNotify("w2", "completed"),
		},
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			r1, r2 := finalRun(t, rec, "w1", ""), finalRun(t, rec, "w2", "")
			eq(t, "w1 agents", len(r1.Agents), 1)
			eq(t, "w1 agent id", agentOf(t, r1, 1).AgentID, "a1")
			eq(t, "w1 tokens", agentOf(t, r1, 1).Tokens, 7)
			eq(t, "w2 agents", len(r2.Agents), 2)
		},
	}})
}

func TestTrackerAgentAndPhaseIdentity(t *testing.T) {
	runStreamCases(t, []streamCase{{
		name: "queued agent gains agentId and startedAt: one agent, AgentStarted once",
		lines: []jobj{
			lnWorkflow("w1"),
			lnProgress("w1", agentRow(1, "start", "queuedAt", T0+1)),
			lnProgress("w1", agentRow(1, "start", "agentId", "a1", "queuedAt", T0+1, "startedAt", T0+5)),
			lnProgress("w1", agentRow(1, "start", "agentId", "a1", "queuedAt", T0+1, "startedAt", T0+5, "tokens", 3)),
			lnProgress("w1", agentRow(1, "done", "agentId", "a1", "queuedAt", T0+1, "startedAt", T0+5, "durationMs", 20)),
			lnNotify("w1", "completed"),
		},
		kinds: "run_started agent_started agent_ended run_finished run_finalized",
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			r := finalRun(t, rec, "w1", "")
			eq(t, "agents", len(r.Agents), 1)
			a := agentOf(t, r, 1)
			eq(t, "agentId", a.AgentID, "a1")
			eq(t, "queuedAt", a.QueuedAt, T0+1)
			eq(t, "start", a.Start, T0+5)
			eq(t, "end", a.End, T0+25)
			eq(t, "state", a.State, ingest.AgentDone)
		},
	}, {
		name: "phases by index, reordered and retitled",
		lines: []jobj{
			lnWorkflow("w1"),
			lnProgress("w1", phaseRow(1, "Gather"), phaseRow(2, "Sum")),
			lnProgress("w1", phaseRow(2, "Summarize"), phaseRow(1, "Gather")),
			lnNotify("w1", "completed"),
		},
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			r := finalRun(t, rec, "w1", "")
			want := []ingest.Phase{{Index: 1, Title: "Gather"}, {Index: 2, Title: "Summarize"}}
			if fmt.Sprint(r.Phases) != fmt.Sprint(want) {
				t.Errorf("phases = %+v, want %+v", r.Phases, want)
			}
		},
	}, {
		name: "phases derived from agents; phase span is min start / max end of its agents",
		lines: []jobj{
			lnWorkflow("w1"),
			lnProgress("w1", phaseRow(3, "Empty"),
				agentRow(1, "done", "agentId", "a1", "phaseIndex", 1, "phaseTitle", "Gather", "startedAt", T0+100, "durationMs", 50),
				agentRow(2, "done", "agentId", "a2", "phaseIndex", 1, "phaseTitle", "Gather", "startedAt", T0+120, "endedAt", T0+300),
				agentRow(3, "done", "agentId", "a3", "phaseIndex", 2, "phaseTitle", "Sum", "startedAt", T0+400, "durationMs", 10)),
			lnUpdated("w1", "completed", T0+500),
			lnNotify("w1", "completed"),
		},
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			r := finalRun(t, rec, "w1", "")
			want := []ingest.Phase{
				{Index: 1, Title: "Gather", Start: T0 + 100, End: T0 + 300},
				{Index: 2, Title: "Sum", Start: T0 + 400, End: T0 + 410},
				{Index: 3, Title: "Empty", Start: T0 + 500, End: T0 + 500}, // no agent: zero length at the run's end
			}
			if fmt.Sprint(r.Phases) != fmt.Sprint(want) {
				t.Errorf("phases = %+v\n want %+v", r.Phases, want)
			}
		},
	}})
}

func TestTrackerAgentStateSpellings(t *testing.T) {
	type spelling struct {
		name      string
		row       jobj
		live      ingest.AgentState // state at the first Agent* event (-1: none expected)
		final     ingest.AgentState
		cached    bool
		wantAgent bool
	}
	rows := []spelling{
		{"start with startedAt is running", agentRow(1, "start", "startedAt", T0+1), ingest.AgentRunning, ingest.AgentAbandoned, false, true},
		{"running (CodeBuddy) is running", agentRow(1, "running", "startedAt", T0+1), ingest.AgentRunning, ingest.AgentAbandoned, false, true},
		{"start without startedAt is queued", agentRow(1, "start", "queuedAt", T0+1), 255, ingest.AgentNotStarted, false, true},
		{"done", agentRow(1, "done", "startedAt", T0+1, "durationMs", 2), ingest.AgentDone, ingest.AgentDone, false, true},
		{"error", agentRow(1, "error", "startedAt", T0+1, "error", "boom"), ingest.AgentError, ingest.AgentError, false, true},
		{"cached", agentRow(1, "cached"), 255, ingest.AgentCached, true, true},
		{"done with cached:true", agentRow(1, "done", "cached", true), 255, ingest.AgentCached, true, true},
		{"done with cached:false", agentRow(1, "done", "cached", false), 255, ingest.AgentDone, false, true},
	}
	var cases []streamCase
	for _, s := range rows {
		cases = append(cases, streamCase{
			name:  s.name,
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", s.row), lnNotify("w1", "stopped")},
			check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
				if s.live != 255 {
					// The first Agent* event shows the live/final state as parsed.
					for _, e := range rec.Events {
						if e.Kind == ingest.AgentStarted || e.Kind == ingest.AgentEnded {
							eq(t, "state as parsed", e.Agent.State, s.live)
							break
						}
					}
				}
				a := agentOf(t, finalRun(t, rec, "w1", ""), 1)
				eq(t, "final state", a.State, s.final)
				eq(t, "cached flag", a.Cached, s.cached)
				eq(t, "AgentEnded", countAgent(rec, ingest.AgentEnded, "w1", 1), 1)
			},
		})
	}
	cases = append(cases, streamCase{
		name:  "unknown spelling is unknown_status and read as live",
		lines: []jobj{lnWorkflow("w1"), lnProgress("w1", agentRow(1, "exploded", "startedAt", T0+1)), lnNotify("w1", "stopped")},
		viol:  map[ingest.Violation]int64{ingest.ViolationUnknownStatus: 1},
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			// Started, never final: abandoned when the run is finalized.
			eq(t, "final state", agentOf(t, finalRun(t, rec, "w1", ""), 1).State, ingest.AgentAbandoned)
		},
	}, streamCase{
		name:  "Claude Code's progress spelling is live, not a violation",
		lines: []jobj{lnWorkflow("w1"), lnProgress("w1", agentRow(1, "progress", "startedAt", T0+1)), lnProgress("w1", agentRow(1, "done", "startedAt", T0+1, "durationMs", 5)), lnNotify("w1", "completed")},
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			eq(t, "final state", agentOf(t, finalRun(t, rec, "w1", ""), 1).State, ingest.AgentDone)
			eq(t, "AgentStarted", countAgent(rec, ingest.AgentStarted, "w1", 1), 1)
		},
	})
	runStreamCases(t, cases)
}

func TestTrackerNotStartedAndAbandoned(t *testing.T) {
	runStreamCases(t, []streamCase{{
		name: "queued never started is not_started; started never ended is abandoned at the run's end",
		lines: []jobj{
			lnWorkflow("w1"),
			lnProgress("w1", agentRow(1, "start", "agentId", "a1", "queuedAt", T0+1, "startedAt", T0+10),
				agentRow(2, "start", "queuedAt", T0+2)),
			lnUpdated("w1", "killed", T0+900),
			lnNotify("w1", "stopped"),
		},
		kinds: "run_started agent_started run_updated run_finished agent_ended agent_ended run_finalized",
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			r := finalRun(t, rec, "w1", "")
			a1, a2 := agentOf(t, r, 1), agentOf(t, r, 2)
			eq(t, "a1 state", a1.State, ingest.AgentAbandoned)
			eq(t, "a1 start", a1.Start, T0+10)
			eq(t, "a1 end = run end", a1.End, T0+900)
			eq(t, "a1 end inferred", a1.EndInferred, true)
			eq(t, "a2 state", a2.State, ingest.AgentNotStarted)
			// Never ran: a zero-length interval at its queue time.
			eq(t, "a2 start", a2.Start, T0+2)
			eq(t, "a2 end", a2.End, T0+2)
			eq(t, "a2 end inferred", a2.EndInferred, false)
			eq(t, "a1 ended", countAgent(rec, ingest.AgentEnded, "w1", 1), 1)
			eq(t, "a2 ended", countAgent(rec, ingest.AgentEnded, "w1", 2), 1)
		},
	}})
}

func TestTrackerRunStatus(t *testing.T) {
	cases := []streamCase{{
		name: "task_updated merges status, end_time and error",
		lines: []jobj{
			lnWorkflow("w1"),
			lnUpdated("w1", "running", 0),
			lnUpdated("w1", "failed", T0+700, "error", "boom"),
			set(lnNotify("w1", "failed"), "usage", usage(5, 1, 300)),
		},
		kinds: "run_started run_updated run_updated run_finished run_finalized",
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			r := finalRun(t, rec, "w1", "")
			eq(t, "status", r.Status, ingest.StatusFailed)
			eq(t, "patch status", r.PatchStatus, "failed")
			eq(t, "end", r.End, T0+700)
			eq(t, "error", r.Error, "boom")
			eq(t, "start", r.Start, T0+400)
		},
	}, {
		name:  "duplicate notification within the grace window",
		lines: []jobj{lnWorkflow("w1"), lnNotify("w1", "completed"), lnNotify("w1", "completed")},
		kinds: "run_started run_finished run_finalized",
		viol:  map[ingest.Violation]int64{ingest.ViolationDuplicateNotify: 1},
	}, {
		name:  "events for unknown tasks",
		lines: []jobj{lnTick("ghost", usage(1, 1, 1)), lnUpdated("ghost", "running", 0), lnNotify("ghost", "completed")},
		kinds: "",
		viol:  map[ingest.Violation]int64{ingest.ViolationUnknownTask: 3},
		check: func(t *testing.T, rec *ingesttest.Recorder, st *ingest.Stats) {
			eq(t, "events", st.Events(), 3)
			eq(t, "lifecycle", kindsOf(rec), "")
		},
	}, {
		name:  "task_updated conflicting with the notification",
		lines: []jobj{lnWorkflow("w1"), lnUpdated("w1", "failed", T0+10), lnNotify("w1", "completed")},
		viol:  map[ingest.Violation]int64{ingest.ViolationStatusConflict: 1},
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			eq(t, "status (notification wins)", finalRun(t, rec, "w1", "").Status, ingest.StatusCompleted)
		},
	}, {
		name:  "killed patch agrees with stopped notification",
		lines: []jobj{lnWorkflow("w1"), lnUpdated("w1", "killed", T0+10), lnNotify("w1", "stopped")},
	}, {
		name:  "task_updated after the notification",
		lines: []jobj{lnWorkflow("w1"), lnUpdated("w1", "", T0+40), lnNotify("w1", "completed"), lnUpdated("w1", "completed", T0+50)},
		kinds: "run_started run_updated run_finished run_finalized",
		viol:  map[ingest.Violation]int64{ingest.ViolationUpdateAfterNotification: 1},
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			eq(t, "end unchanged", finalRun(t, rec, "w1", "").End, T0+40)
		},
	}, {
		name:  "unknown status spellings",
		lines: []jobj{lnWorkflow("w1"), lnUpdated("w1", "exploded", 0), lnNotify("w1", "vanished")},
		viol:  map[ingest.Violation]int64{ingest.ViolationUnknownStatus: 2},
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			eq(t, "status", finalRun(t, rec, "w1", "").Status, ingest.StatusFailed)
		},
	}}
	for spell, want := range map[string]ingest.RunStatus{
		"completed": ingest.StatusCompleted, "failed": ingest.StatusFailed, "stopped": ingest.StatusStopped,
		"killed": ingest.StatusStopped, "cancelled": ingest.StatusStopped, "aborted": ingest.StatusStopped,
	} {
		cases = append(cases, streamCase{
			name:  "notification " + spell,
			lines: []jobj{lnWorkflow("w1"), lnNotify("w1", spell)},
			kinds: "run_started run_finished run_finalized",
			check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
				eq(t, "status", finalRun(t, rec, "w1", "").Status, want)
			},
		})
	}
	runStreamCases(t, cases)

	runClockCases(t, []clockCase{{
		name: "duplicate notification after the grace window",
		steps: []clockStep{
			{T0, lnWorkflow("w1")},
			{T0 + 100, lnNotify("w1", "completed")},
			{T0 + 5200, nil},
			{T0 + 5300, lnNotify("w1", "completed")},
		},
		closeAt: T0 + 6000,
		kinds:   "run_started run_finished run_finalized",
		viol:    map[ingest.Violation]int64{ingest.ViolationDuplicateNotify: 1},
	}})
}

// flipLines is a stopped workflow with two running agents whose error flips
// (with endedAt e1, e2) arrive after the notification; the run ends at T0+1000.
func flipLines(e1, e2 int64, between ...jobj) []jobj {
	l := []jobj{
		lnWorkflow("w1"),
		lnProgress("w1", agentRow(1, "start", "agentId", "a1", "startedAt", T0+10), agentRow(2, "start", "agentId", "a2", "startedAt", T0+20)),
		lnUpdated("w1", "killed", T0+1000),
		lnNotify("w1", "stopped"),
	}
	l = append(l, between...)
	return append(l, lnProgress("w1",
		agentRow(1, "error", "agentId", "a1", "startedAt", T0+10, "endedAt", e1, "error", "subagent aborted: x"),
		agentRow(2, "error", "agentId", "a2", "startedAt", T0+20, "endedAt", e2, "error", "subagent aborted: y")))
}

func checkAgents(state ingest.AgentState, end1, end2 int64) func(*testing.T, *ingesttest.Recorder, *ingest.Stats) {
	return func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
		r := finalRun(t, rec, "w1", "")
		for i, end := range map[int]int64{1: end1, 2: end2} {
			a := agentOf(t, r, i)
			eq(t, fmt.Sprintf("agent %d state", i), a.State, state)
			eq(t, fmt.Sprintf("agent %d end", i), a.End, end)
			eq(t, fmt.Sprintf("agent %d AgentEnded", i), countAgent(rec, ingest.AgentEnded, "w1", i), 1)
		}
	}
}

func TestTrackerGraceWindow(t *testing.T) {
	runStreamCases(t, []streamCase{{
		name:  "late flips within 5 s of the stopped notification update the agents",
		lines: flipLines(T0+3000, T0+5900),
		kinds: "run_started agent_started agent_started run_updated run_finished agent_ended agent_ended run_finalized",
		check: checkAgents(ingest.AgentError, T0+3000, T0+5900),
	}, {
		name:  "late flips whose own time is past the window are late_event",
		lines: flipLines(T0+7000, T0+7000),
		kinds: "run_started agent_started agent_started run_updated run_finished agent_ended agent_ended run_finalized",
		viol:  map[ingest.Violation]int64{ingest.ViolationLateEvent: 1},
		check: checkAgents(ingest.AgentAbandoned, T0+1000, T0+1000),
	}, {
		name: "late flips after another task's event moved the clock past the window",
		lines: flipLines(T0+3000, T0+3000,
			lnWorkflow("w2"),
			lnProgress("w2", agentRow(1, "start", "agentId", "b1", "startedAt", T0+6500))),
		viol:  map[ingest.Violation]int64{ingest.ViolationLateEvent: 1},
		check: checkAgents(ingest.AgentAbandoned, T0+1000, T0+1000),
	}})

	flip := lnProgress("w1", agentRow(1, "error", "agentId", "a1", "startedAt", T0+10, "error", "subagent aborted"))
	head := []clockStep{
		{T0, lnWorkflow("w1")},
		{T0 + 20, lnProgress("w1", agentRow(1, "start", "agentId", "a1", "startedAt", T0+10))},
		{T0 + 1000, lnUpdated("w1", "killed", T0+1000)},
		{T0 + 1000, lnNotify("w1", "stopped")},
	}
	runClockCases(t, []clockCase{{
		name:    "flip just inside the window (clock)",
		steps:   append(append([]clockStep{}, head...), clockStep{T0 + 5999, flip}),
		closeAt: T0 + 9000,
		kinds:   "run_started agent_started run_updated run_finished agent_ended run_finalized",
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			eq(t, "state", agentOf(t, finalRun(t, rec, "w1", ""), 1).State, ingest.AgentError)
		},
	}, {
		name:    "flip after Advance closed the window",
		steps:   append(append([]clockStep{}, head...), clockStep{T0 + 6000, nil}, clockStep{T0 + 6001, flip}),
		closeAt: T0 + 9000,
		kinds:   "run_started agent_started run_updated run_finished agent_ended run_finalized",
		viol:    map[ingest.Violation]int64{ingest.ViolationLateEvent: 1},
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			a := agentOf(t, finalRun(t, rec, "w1", ""), 1)
			eq(t, "state", a.State, ingest.AgentAbandoned)
			eq(t, "end", a.End, T0+1000)
			// The run was finalized by Advance, before Close.
			for i, e := range rec.Events {
				if e.Kind == ingest.RunFinalized && e.At != T0+6000 {
					t.Errorf("event %d: RunFinalized at %d, want %d (Advance)", i, e.At, T0+6000)
				}
			}
		},
	}})
}

func TestTrackerFinalStatesAreFinal(t *testing.T) {
	done := agentRow(1, "done", "agentId", "a1", "startedAt", T0+1, "durationMs", 10)
	cases := []struct {
		name  string
		later jobj
		want  ingest.AgentState
		first jobj
	}{
		{"done then start", agentRow(1, "start", "agentId", "a1", "startedAt", T0+1), ingest.AgentDone, done},
		{"done then error", agentRow(1, "error", "agentId", "a1", "startedAt", T0+1, "error", "late"), ingest.AgentDone, done},
		{"error then done", agentRow(1, "done", "agentId", "a1", "startedAt", T0+1, "durationMs", 50), ingest.AgentError,
			agentRow(1, "error", "agentId", "a1", "startedAt", T0+1, "durationMs", 10, "error", "first")},
	}
	var sc []streamCase
	for _, c := range cases {
		sc = append(sc, streamCase{
			name:  c.name,
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", c.first), lnProgress("w1", c.later), lnNotify("w1", "completed")},
			kinds: "run_started agent_started agent_ended run_finished run_finalized",
			viol:  map[ingest.Violation]int64{ingest.ViolationAgentRegression: 1},
			check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
				a := agentOf(t, finalRun(t, rec, "w1", ""), 1)
				eq(t, "state", a.State, c.want)
				eq(t, "end", a.End, T0+11)
				if c.want == ingest.AgentDone {
					eq(t, "error", a.Error, "")
				}
			},
		})
	}
	runStreamCases(t, sc)
}

func TestTrackerStreamEnd(t *testing.T) {
	runStreamCases(t, []streamCase{{
		name: "Close abandons an open run and its running agents",
		lines: []jobj{
			lnWorkflow("w1"),
			lnProgress("w1", agentRow(1, "start", "agentId", "a1", "startedAt", T0+10),
				agentRow(2, "done", "agentId", "a2", "startedAt", T0+5, "durationMs", 5)),
		},
		kinds: "run_started agent_started agent_started agent_ended run_finished agent_ended run_finalized",
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			r := finalRun(t, rec, "w1", "")
			eq(t, "status", r.Status, ingest.StatusAbandoned)
			eq(t, "end", r.End, T0+10)
			a := agentOf(t, r, 1)
			eq(t, "a1 state", a.State, ingest.AgentAbandoned)
			eq(t, "a1 end", a.End, r.End)
			eq(t, "a2 state", agentOf(t, r, 2).State, ingest.AgentDone)
		},
	}, {
		name:  "Close abandons a plain task",
		lines: []jobj{lnStarted("b1", "", "Bash", "")},
		kinds: "task_started task_ended run_finalized",
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			eq(t, "status", finalRun(t, rec, "b1", "").Status, ingest.StatusAbandoned)
		},
	}})

	t.Run("second Close emits nothing", func(t *testing.T) {
		r := newPipeRig(ingest.PipelineOptions{})
		r.out(lnWorkflow("w1"))
		r.p.Close()
		n := len(r.rec.Events)
		r.p.Close()
		eq(t, "events after second Close", len(r.rec.Events), n)
	})
}

// TestTrackerCloseWithManyRuns closes a stream with more open runs than the
// Tracker's open-list compaction threshold: every run must still end and be
// finalized exactly once, without a panic.
func TestTrackerCloseWithManyRuns(t *testing.T) {
	for _, c := range []struct{ finishedBefore, openAtClose int }{{0, 200}, {60, 10}} {
		t.Run(fmt.Sprintf("%d finalized before, %d open at Close", c.finishedBefore, c.openAtClose), func(t *testing.T) {
			r := newClockRig(t, time.Second)
			now := T0
			for i := range c.finishedBefore {
				id := fmt.Sprintf("done%d", i)
				r.at(now, lnStarted(id, "", "Bash", ""))
				r.at(now, lnNotify(id, "completed"))
			}
			now += 10_000
			r.tr.Advance(now) // finalize them all (tombstones, still in the open list)
			for i := range c.openAtClose {
				r.at(now, lnWorkflow(fmt.Sprintf("open%d", i)))
			}
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("Close panicked: %v", p)
					}
				}()
				r.tr.Close(now + 1)
			}()
			total := c.finishedBefore + c.openAtClose
			eq(t, "RunFinalized", countKind(r.rec, ingest.RunFinalized), total)
			eq(t, "RunFinished", countKind(r.rec, ingest.RunFinished), c.openAtClose)
			eq(t, "open after Close", len(r.tr.Open()), 0)
		})
	}
}

func TestTrackerNonWorkflowTasks(t *testing.T) {
	var cases []streamCase
	for _, typ := range []string{"Bash", "Agent", "PowerShell", "local_agent", "local_bash", "mcp_task", "Workflow", "workflow"} {
		cases = append(cases, streamCase{
			name:  typ,
			lines: []jobj{lnStarted("t1", "", typ, "maybe"), lnTick("t1", usage(3, 1, 10)), lnNotify("t1", "completed")},
			kinds: "task_started task_ended run_finalized",
			check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
				r := finalRun(t, rec, "t1", "")
				eq(t, "workflow", r.Workflow, false)
				eq(t, "task type", r.TaskType, typ)
				eq(t, "status", r.Status, ingest.StatusCompleted)
			},
		})
	}
	cases = append(cases, streamCase{
		name:  "local_workflow",
		lines: []jobj{lnStarted("t1", "", "local_workflow", "wf"), lnNotify("t1", "completed")},
		kinds: "run_started run_finished run_finalized",
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			r := finalRun(t, rec, "t1", "")
			eq(t, "workflow", r.Workflow, true)
			eq(t, "name", r.Name, "wf")
		},
	})
	runStreamCases(t, cases)
}

func TestTrackerRunIdentity(t *testing.T) {
	runStreamCases(t, []streamCase{{
		name: "run_id, session, tool use and a seen parent are kept; an unseen parent is dropped",
		lines: []jobj{
			lnStarted("p0", "rp", "local_agent", ""),
			set(lnStarted("w1", "r1", "local_workflow", "wf"), "parent_task_id", "p0"),
			set(lnStarted("w2", "r2", "local_workflow", "wf"), "parent_task_id", "never-seen"),
			set(lnNotify("w1", "completed"), "run_id", "r1"),
			set(lnNotify("w2", "completed"), "run_id", "r2"),
			set(lnNotify("p0", "completed"), "run_id", "rp"),
		},
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			r1 := finalRun(t, rec, "w1", "r1")
			eq(t, "run id", r1.RunID, "r1")
			eq(t, "session", r1.SessionID, "S1")
			eq(t, "tool use", r1.ToolUseID, "toolu-w1")
			eq(t, "parent", r1.ParentTaskID, "p0")
			eq(t, "unseen parent", finalRun(t, rec, "w2", "r2").ParentTaskID, "")
		},
	}, {
		name: "two runs of one task_id are two runs, and events route by run_id",
		lines: []jobj{
			lnStarted("w1", "r1", "local_workflow", "wf"),
			lnStarted("w1", "r2", "local_workflow", "wf"),
			set(lnProgress("w1", agentRow(1, "done", "agentId", "a1", "startedAt", T0+5, "durationMs", 5)), "run_id", "r2"),
			lnUpdated("w1", "", 0, "error", "no run id"),
			set(lnUpdated("w1", "killed", T0+100, "error", "stop r1"), "run_id", "r1"),
			set(lnNotify("w1", "stopped"), "run_id", "r1"),
			set(lnNotify("w1", "completed"), "run_id", "r2"),
		},
		kinds: "run_started run_started agent_started agent_ended run_updated run_updated run_finished run_finished run_finalized run_finalized",
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			r1, r2 := finalRun(t, rec, "w1", "r1"), finalRun(t, rec, "w1", "r2")
			eq(t, "r1 agents", len(r1.Agents), 0)
			eq(t, "r1 status", r1.Status, ingest.StatusStopped)
			eq(t, "r1 error", r1.Error, "stop r1")
			eq(t, "r2 agents", len(r2.Agents), 1)
			eq(t, "r2 status", r2.Status, ingest.StatusCompleted)
			// The update without run_id went to the latest run.
			eq(t, "r2 error", r2.Error, "no run id")
		},
	}})
}

// timesStream is a workflow with known times: agents queued at T0+350,
// started at T0+400/T0+410, ended by endedAt and by durationMs; the run
// ends at T0+1000 with usage.duration_ms dur.
func timesStream(dur int64) []jobj {
	return []jobj{
		lnWorkflow("w1"),
		lnProgress("w1", phaseRow(1, "P"),
			agentRow(1, "start", "agentId", "a1", "phaseIndex", 1, "queuedAt", T0+350, "startedAt", T0+400),
			agentRow(2, "start", "phaseIndex", 1, "queuedAt", T0+360)),
		lnProgress("w1", phaseRow(1, "P"),
			agentRow(1, "done", "agentId", "a1", "phaseIndex", 1, "queuedAt", T0+350, "startedAt", T0+400, "endedAt", T0+600, "durationMs", 50),
			agentRow(2, "done", "agentId", "a2", "phaseIndex", 1, "queuedAt", T0+360, "startedAt", T0+410, "durationMs", 90)),
		lnUpdated("w1", "completed", T0+1000),
		set(lnNotify("w1", "completed"), "usage", usage(1, 1, dur)),
	}
}

func TestTrackerTimesFromEvents(t *testing.T) {
	check := func(start int64) func(*testing.T, *ingesttest.Recorder, *ingest.Stats) {
		return func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			r := finalRun(t, rec, "w1", "")
			eq(t, "end = end_time", r.End, T0+1000)
			eq(t, "start", r.Start, start)
			a1, a2 := agentOf(t, r, 1), agentOf(t, r, 2)
			eq(t, "a1 start", a1.Start, T0+400)
			eq(t, "a1 end = endedAt", a1.End, T0+600)
			eq(t, "a2 start", a2.Start, T0+410)
			eq(t, "a2 end = startedAt+durationMs", a2.End, T0+500)
			eq(t, "phase", fmt.Sprint(r.Phases), fmt.Sprint([]ingest.Phase{{Index: 1, Title: "P", Start: T0 + 400, End: T0 + 600}}))
		}
	}
	runStreamCases(t, []streamCase{
		{name: "start = end − duration_ms when smaller", lines: timesStream(700), check: check(T0 + 300)},
		{name: "start = earliest queuedAt when smaller", lines: timesStream(100), check: check(T0 + 350)},
	})
}

// fakeClock is a controllable Now: each call returns the current time and
// then advances it by step.
type fakeClock struct {
	cur  time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time { t := c.cur; c.cur = c.cur.Add(c.step); return t }

func TestTrackerReplayEqualsLive(t *testing.T) {
	lines := append(flipLines(T0+3000, T0+3500),
		lnWorkflow("w2"),
		lnProgress("w2", phaseRow(1, "A"), phaseRow(2, "B"),
			agentRow(1, "done", "agentId", "b1", "phaseIndex", 1, "queuedAt", T0+100, "startedAt", T0+110, "durationMs", 40),
			agentRow(2, "start", "agentId", "b2", "phaseIndex", 2, "queuedAt", T0+120, "startedAt", T0+200),
			agentRow(3, "start", "phaseIndex", 2, "queuedAt", T0+130)),
		lnUpdated("w2", "failed", T0+2000),
		set(lnNotify("w2", "failed"), "usage", usage(9, 2, 1950)),
	)
	type times struct {
		Start, End int64
		Phases     []ingest.Phase
		Agents     [][4]int64
	}
	collect := func(live bool, clk *fakeClock) map[string]times {
		opts := ingest.PipelineOptions{Live: live, Tracker: ingest.TrackerOptions{Grace: 5 * time.Second}}
		if clk != nil {
			opts.Now = clk.now
		}
		r := newPipeRig(opts)
		r.out(lines...)
		r.p.Close()
		out := map[string]times{}
		for _, e := range r.rec.Events {
			if e.Kind != ingest.RunFinalized {
				continue
			}
			tm := times{Start: e.Run.Start, End: e.Run.End, Phases: e.Run.Phases}
			for _, a := range e.Run.Agents {
				tm.Agents = append(tm.Agents, [4]int64{int64(a.Index), int64(a.State), a.Start, a.End})
			}
			out[e.Run.TaskID] = tm
		}
		return out
	}
	replay := collect(false, nil)
	if len(replay) != 2 {
		t.Fatalf("replay finalized %d runs, want 2", len(replay))
	}
	for _, clk := range []*fakeClock{
		{cur: time.UnixMilli(T0 + 50_000_000), step: time.Millisecond},
		{cur: time.UnixMilli(T0 - 3_000_000), step: 37 * time.Millisecond},
	} {
		live := collect(true, clk)
		if fmt.Sprint(live) != fmt.Sprint(replay) {
			t.Errorf("live (step %v) differs from replay\nlive:   %+v\nreplay: %+v", clk.step, live, replay)
		}
	}
}

func TestTrackerInterrupt(t *testing.T) {
	type result struct {
		matched   []ingesttest.Recorded
		requested int
		rec       *ingesttest.Recorder
	}
	run := func(feed func(r *pipeRig, clk *fakeClock)) result {
		clk := &fakeClock{cur: time.UnixMilli(T0)}
		r := newPipeRig(ingest.PipelineOptions{Live: true, Now: clk.now})
		feed(r, clk)
		r.p.Close()
		res := result{rec: r.rec, requested: countKind(r.rec, ingest.InterruptRequested)}
		for _, e := range r.rec.Events {
			if e.Kind == ingest.InterruptMatched {
				res.matched = append(res.matched, e)
			}
		}
		return res
	}
	stopped := func(r *pipeRig, task string) { r.out(lnUpdated(task, "killed", 0), lnNotify(task, "stopped")) }

	t.Run("interrupt then stopped notification matches with latency", func(t *testing.T) {
		res := run(func(r *pipeRig, clk *fakeClock) {
			r.out(lnWorkflow("w1"))
			clk.cur = time.UnixMilli(T0 + 100)
			r.in(lnInterrupt("S1"))
			clk.cur = time.UnixMilli(T0 + 1334)
			// end_time differs from the notification's arrival: the latency
			// is measured to the notification.
			r.out(lnUpdated("w1", "killed", T0+1200), lnNotify("w1", "stopped"))
		})
		eq(t, "InterruptRequested", res.requested, 1)
		if len(res.matched) != 1 {
			t.Fatalf("InterruptMatched %d times, want 1", len(res.matched))
		}
		eq(t, "latency", res.matched[0].LatencyMs, 1234)
		eq(t, "run latency", finalRun(t, res.rec, "w1", "").InterruptLatencyMs, 1234)
	})
	t.Run("interrupt for another session does not match", func(t *testing.T) {
		res := run(func(r *pipeRig, clk *fakeClock) {
			r.out(lnWorkflow("w1"))
			r.in(lnInterrupt("OTHER"))
			clk.cur = clk.cur.Add(time.Second)
			stopped(r, "w1")
		})
		eq(t, "InterruptMatched", len(res.matched), 0)
		eq(t, "run latency", finalRun(t, res.rec, "w1", "").InterruptLatencyMs, -1)
	})
	t.Run("stop_task matches only its task", func(t *testing.T) {
		res := run(func(r *pipeRig, clk *fakeClock) {
			r.out(lnWorkflow("w1"), lnWorkflow("w2"))
			clk.cur = time.UnixMilli(T0 + 500)
			r.in(lnStopTask("w2"))
			clk.cur = time.UnixMilli(T0 + 800)
			stopped(r, "w1")
			stopped(r, "w2")
		})
		if len(res.matched) != 1 || res.matched[0].Run.TaskID != "w2" {
			t.Fatalf("matched %+v, want only w2", res.matched)
		}
		eq(t, "latency", res.matched[0].LatencyMs, 300)
	})
	// The budget cap's interrupt (run --budget.max-cost-usd) is told apart
	// by its request_id: a run it stops has reason budget; an SDK's
	// interrupt, a completed run or the notification's own reason keep
	// theirs.
	for _, tc := range []struct {
		name, requestID, status, reason, want string
	}{
		{"budget stop", ingest.BudgetRequestIDPrefix + "0123456789abcdef", "stopped", "", ingest.StopReasonBudget},
		{"sdk stop", "k3j2h1", "stopped", "", ""},
		{"budget, completed anyway", ingest.BudgetRequestIDPrefix + "01", "completed", "", ""},
		{"budget, the CLI's own reason", ingest.BudgetRequestIDPrefix + "01", "stopped", "worker_restart", "worker_restart"},
		{"prefix elsewhere", "x-" + ingest.BudgetRequestIDPrefix, "stopped", "", ""},
	} {
		t.Run("reason: "+tc.name, func(t *testing.T) {
			res := run(func(r *pipeRig, clk *fakeClock) {
				r.out(lnWorkflow("w1"))
				r.in(set(lnInterrupt("S1"), "request_id", tc.requestID))
				n := lnNotify("w1", tc.status)
				if tc.reason != "" {
					n = set(n, "reason", tc.reason)
				}
				r.out(n)
			})
			eq(t, "Reason", finalRun(t, res.rec, "w1", "").Reason, tc.want)
		})
	}
	t.Run("completed after an interrupt is not matched", func(t *testing.T) {
		res := run(func(r *pipeRig, clk *fakeClock) {
			r.out(lnWorkflow("w1"))
			r.in(lnInterrupt("S1"))
			r.out(lnNotify("w1", "completed"))
		})
		eq(t, "InterruptMatched", len(res.matched), 0)
	})
}

func TestTrackerMissingTerminalAgentState(t *testing.T) {
	rows := []jobj{
		agentRow(1, "start", "agentId", "a1", "startedAt", T0+1),
		agentRow(2, "running", "agentId", "a2", "startedAt", T0+2),
		agentRow(3, "start", "queuedAt", T0+3),
		agentRow(4, "done", "agentId", "a4", "startedAt", T0+4, "durationMs", 1),
		agentRow(5, "done", "cached", true),
	}
	var cases []streamCase
	for status, n := range map[string]int64{"completed": 2, "failed": 2, "stopped": 0, "killed": 0} {
		c := streamCase{
			name:  status,
			lines: []jobj{lnWorkflow("w1"), lnProgress("w1", rows...), lnNotify("w1", status)},
		}
		if n > 0 {
			c.viol = map[ingest.Violation]int64{ingest.ViolationMissingTerminal: n}
		}
		cases = append(cases, c)
	}
	runStreamCases(t, cases)
}

func TestTrackerSecrets(t *testing.T) {
	const (
		token   = "CANARY-TOKEN"
		email   = "canary@x"
		prompt  = "CANARY-PROMPT"
		result  = "CANARY-PREVIEW-RESULT"
		pprev   = "CANARY-PREVIEW-PROMPT"
		summary = "CANARY-SUMMARY"
	)
	lines := []jobj{
		{"type": "control_response", "response": jobj{"subtype": "success", "request_id": "init",
			"response": jobj{"account": jobj{"token": token, "email": email}}}},
		{"type": "system", "subtype": "init", "session_id": "S1", "apiKeySource": token},
		set(lnWorkflow("w1"), "prompt", prompt),
		lnProgress("w1", agentRow(1, "done", "agentId", "a1", "startedAt", T0+1, "durationMs", 2,
			"resultPreview", result, "promptPreview", pprev, "lastToolSummary", prompt)),
		set(lnNotify("w1", "completed"), "summary", summary),
	}
	dump := func(rec *ingesttest.Recorder) string {
		j, err := json.Marshal(rec.Events)
		if err != nil {
			t.Fatal(err)
		}
		return string(j) + fmt.Sprintf("%+v", rec.Events)
	}
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("KeepPreviews=%v", keep), func(t *testing.T) {
			r := newPipeRig(ingest.PipelineOptions{Decode: streamjson.DecodeOptions{KeepPreviews: keep}})
			r.out(lines...)
			r.p.Close()
			if countKind(r.rec, ingest.RunFinalized) != 1 {
				t.Fatalf("no run: %s", kindsOf(r.rec))
			}
			all := dump(r.rec)
			for _, secret := range []string{token, email, prompt} {
				if strings.Contains(all, secret) {
					t.Errorf("%q recorded", secret)
				}
			}
			for _, opt := range []string{result, pprev, summary} {
				if got := strings.Contains(all, opt); got != keep {
					t.Errorf("%q recorded = %v, want %v", opt, got, keep)
				}
			}
		})
	}
}

func TestTrackerBadLines(t *testing.T) {
	const maxLine = 512
	long := strings.Repeat("x", 2*maxLine)
	progress := string(encodeLines(lnProgress("w0", agentRow(1, "start", "label", long))))
	assistant := `{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"` + long + `"}]}}` + "\n"
	assistantQuoting := `{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Here is the event: {\"type\":\"system\",\"subtype\":\"task_started\",\"task_id\":\"w9\"} ` + long + `"}]}}` + "\n"
	cases := []struct {
		name   string
		line   string
		reason streamjson.Reason // ReasonNone: nothing rejected
	}{
		{"truncated JSON", `{"type":"system","subtype":"task_started",` + "\n", streamjson.ReasonInvalidJSON},
		{"not an object", "hello\n", streamjson.ReasonInvalidJSON},
		{"array", `[{"type":"system","subtype":"task_started"}]` + "\n", streamjson.ReasonInvalidJSON},
		{"task_id of the wrong type", `{"type":"system","subtype":"task_started","task_id":5}` + "\n", streamjson.ReasonBadShape},
		{"task event without task_id", `{"type":"system","subtype":"task_notification","status":"completed"}` + "\n", streamjson.ReasonBadShape},
		{"task_progress over MaxLine", progress, streamjson.ReasonTooLong},
		{"assistant line over MaxLine", assistant, streamjson.ReasonNone},
		{"assistant line over MaxLine quoting a task event", assistantQuoting, streamjson.ReasonNone},
		{"other types pass", `{"type":"system","subtype":"background_tasks_changed","tasks":[{"task_id":"w0","task_type":"local_workflow"}]}` + "\n" +
			`{"type":"file-history-snapshot","snapshot":{}}` + "\n" + `{"type":"system","subtype":"status","status":null,"__timestamp":1}` + "\n", streamjson.ReasonNone},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newPipeRig(ingest.PipelineOptions{MaxLine: maxLine})
			r.p.Write(tap.SourceStdout, []byte(c.line))
			r.out(lnWorkflow("w1"), lnNotify("w1", "completed"))
			r.p.Close()
			for _, reason := range streamjson.Reasons() {
				want := int64(0)
				if reason == c.reason {
					want = 1
				}
				eq(t, "rejected "+reason.String(), r.stats.Rejected(reason), want)
			}
			if v := violationCounts(r.stats); len(v) != 0 {
				t.Errorf("violations %v", v)
			}
			// Never fatal: the next good lines still make a run.
			eq(t, "lifecycle", kindsOf(r.rec), "run_started run_finished run_finalized")
			eq(t, "bytes", r.stats.Bytes(tap.SourceStdout), int64(len(c.line)+len(encodeLines(lnWorkflow("w1"), lnNotify("w1", "completed")))))
		})
	}
}

// TestTrackerSnapshotFieldsDoNotLeakBetweenLines: a field absent from an
// entry must read as absent, whatever an earlier line held at the same
// position of its workflow_progress array.
func TestTrackerSnapshotFieldsDoNotLeakBetweenLines(t *testing.T) {
	runStreamCases(t, []streamCase{{
		name: "cached, error, endedAt and startedAt of another task's entry",
		lines: []jobj{
			lnWorkflow("w1"), lnWorkflow("w2"),
			lnProgress("w1",
				agentRow(1, "done", "agentId", "x1", "cached", true, "startedAt", T0+5, "endedAt", T0+9, "error", "boom"),
				agentRow(2, "error", "agentId", "x2", "startedAt", T0+5, "durationMs", 4, "error", "bad")),
			lnProgress("w2",
				agentRow(1, "done", "agentId", "y1", "startedAt", T0+30, "durationMs", 5),
				agentRow(2, "start", "queuedAt", T0+31)),
			lnNotify("w1", "completed"), lnNotify("w2", "stopped"),
		},
		check: func(t *testing.T, rec *ingesttest.Recorder, _ *ingest.Stats) {
			r := finalRun(t, rec, "w2", "")
			a1, a2 := agentOf(t, r, 1), agentOf(t, r, 2)
			eq(t, "y1 state", a1.State, ingest.AgentDone)
			eq(t, "y1 cached", a1.Cached, false)
			eq(t, "y1 error", a1.Error, "")
			eq(t, "y1 end", a1.End, T0+35)
			eq(t, "queued agent state", a2.State, ingest.AgentNotStarted)
			eq(t, "queued agent start = its queue time", a2.Start, T0+31)
			eq(t, "queued agent zero length", a2.End, T0+31)
			eq(t, "queued agent id", a2.AgentID, "")
			eq(t, "AgentStarted for w2 agent 2", countAgent(rec, ingest.AgentStarted, "w2", 2), 0)
		},
	}})
}

// TestTrackerBadFieldIsNotABadLine: lines that were bad_shape before issue
// #17 because of a field other than their identity are events now; the
// bad field is counted and costs nothing else.
func TestTrackerBadFieldIsNotABadLine(t *testing.T) {
	r := newPipeRig(ingest.PipelineOptions{})
	r.out(lnWorkflow("w1"))
	r.p.Write(tap.SourceStdout, []byte(`{"type":"system","subtype":"task_updated","task_id":"w1"}`+"\n"))
	r.p.Write(tap.SourceStdout, []byte(`{"type":"system","subtype":"task_progress","task_id":"w1","workflow_progress":{"a":1},"usage":{"total_tokens":7}}`+"\n"))
	r.p.Write(tap.SourceStdout, []byte(`{"type":"system","subtype":"task_notification","task_id":"w1","status":"completed","usage":{"total_tokens":"9"}}`+"\n"))
	r.p.Close()
	for _, reason := range streamjson.Reasons() {
		eq(t, "rejected "+reason.String(), r.stats.Rejected(reason), int64(0))
	}
	eq(t, "violations", fmt.Sprint(violationCounts(r.stats)), "map[bad_field:2]")
	run := finalRun(t, r.rec, "w1", "")
	eq(t, "status", run.Status, ingest.StatusCompleted)
	eq(t, "tokens from the last readable usage", run.Usage.TotalTokens, int64(7))
}
