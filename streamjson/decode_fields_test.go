// Table tests of issue #17: one bad value costs only its field (BadFields)
// or its workflow_progress element (BadEntries), never the line, unless
// it is the line's identity; names are matched case-sensitively. Every
// case runs on both paths (the scanner and decodePlain).
package streamjson

import (
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/tap"
)

// fieldCase is one line and what it must decode to.
type fieldCase struct {
	name       string
	line       string
	reason     Reason
	kind       Kind // KindNone with ReasonNone: not of interest
	badFields  int
	badEntries int
	// unsure marks lines the scanner leaves to decodePlain (duplicate or
	// escaped keys); every other case must be decoded by the scanner.
	unsure bool
	check  func(t *testing.T, ev *Event)
}

const (
	hProgress = `{"type":"system","subtype":"task_progress","task_id":"t",`
	hStarted  = `{"type":"system","subtype":"task_started","task_id":"t",`
	hUpdated  = `{"type":"system","subtype":"task_updated","task_id":"t",`
	hNotify   = `{"type":"system","subtype":"task_notification","task_id":"t",`
)

// progressOf is a task_progress whose workflow_progress holds elems.
func progressOf(elems ...string) string {
	return hProgress + `"workflow_progress":[` + strings.Join(elems, ",") + `]}`
}

// agentWith is a workflow_agent element of index 1 with extra members.
func agentWith(members string) string {
	return `{"type":"workflow_agent","index":1,"agentId":"a1","state":"done",` + members + `}`
}

func usageIs(want Usage) func(*testing.T, *Event) {
	return func(t *testing.T, ev *Event) {
		t.Helper()
		if !ev.HasUsage || ev.Usage != want {
			t.Errorf("usage %v %+v, want %+v", ev.HasUsage, ev.Usage, want)
		}
	}
}

func entriesAre(n int, f func(t *testing.T, es []Entry)) func(*testing.T, *Event) {
	return func(t *testing.T, ev *Event) {
		t.Helper()
		if !ev.HasProgress || len(ev.Entries) != n {
			t.Fatalf("HasProgress %v, %d entries %+v; want %d", ev.HasProgress, len(ev.Entries), ev.Entries, n)
		}
		if f != nil {
			f(t, ev.Entries)
		}
	}
}

func noProgress(t *testing.T, ev *Event) {
	t.Helper()
	if ev.HasProgress || len(ev.Entries) != 0 {
		t.Errorf("HasProgress %v with %d entries, want none", ev.HasProgress, len(ev.Entries))
	}
}

func statusIs(want string) func(*testing.T, *Event) {
	return func(t *testing.T, ev *Event) { t.Helper(); eq(t, ev.Status, want) }
}

var fieldCases = []fieldCase{
	// Numbers: wrong types and ranges cost the field.
	{name: "number as string", line: hProgress + `"usage":{"total_tokens":"5","tool_uses":2}}`, kind: KindTaskProgress, badFields: 1, check: usageIs(Usage{0, 2, 0})},
	{name: "1e400", line: hProgress + `"usage":{"total_tokens":1e400,"tool_uses":2}}`, kind: KindTaskProgress, badFields: 1, check: usageIs(Usage{0, 2, 0})},
	{name: "-1e400", line: hProgress + `"usage":{"duration_ms":-1e400}}`, kind: KindTaskProgress, badFields: 1, check: usageIs(Usage{})},
	{name: "object where a number belongs", line: hProgress + `"usage":{"tool_uses":{"n":1},"duration_ms":[1],"total_tokens":true}}`, kind: KindTaskProgress, badFields: 3, check: usageIs(Usage{})},
	{name: "negative and above 2^53", line: hProgress + `"usage":{"total_tokens":-1,"tool_uses":9007199254740994,"duration_ms":-0.5}}`, kind: KindTaskProgress, badFields: 3, check: usageIs(Usage{})},
	{name: "numbers in range", line: hProgress + `"usage":{"total_tokens":9007199254740992,"tool_uses":-0,"duration_ms":1.9e1}}`, kind: KindTaskProgress, check: usageIs(Usage{1 << 53, 0, 19})},
	{name: "underflow is zero", line: hProgress + `"usage":{"total_tokens":1e-400,"tool_uses":-1e-400,"duration_ms":null}}`, kind: KindTaskProgress, check: usageIs(Usage{})},
	{name: "usage not an object", line: hProgress + `"usage":[1,2,3]}`, kind: KindTaskProgress, badFields: 1,
		check: func(t *testing.T, ev *Event) {
			if ev.HasUsage {
				t.Error("HasUsage from a non-object usage")
			}
		}},
	{name: "usage null", line: hProgress + `"usage":null}`, kind: KindTaskProgress},
	{name: "patch end_time bad, status applies", line: hUpdated + `"patch":{"status":"killed","end_time":"1796206130354","error":7}}`, kind: KindTaskUpdated, badFields: 2,
		check: func(t *testing.T, ev *Event) {
			eq(t, ev.PatchStatus, "killed")
			eq(t, ev.PatchError, "")
			if ev.PatchEndTime != 0 {
				t.Errorf("end_time %d", ev.PatchEndTime)
			}
		}},
	{name: "patch end_time in range", line: hUpdated + `"patch":{"status":"killed","end_time":1796206130354.9}}`, kind: KindTaskUpdated,
		check: func(t *testing.T, ev *Event) {
			if ev.PatchEndTime != 1796206130354 {
				t.Errorf("end_time %d", ev.PatchEndTime)
			}
		}},
	{name: "patch not an object is a no-op", line: hUpdated + `"patch":"killed"}`, kind: KindTaskUpdated, badFields: 1,
		check: func(t *testing.T, ev *Event) { eq(t, ev.PatchStatus, "") }},
	{name: "patch array is a no-op", line: hUpdated + `"patch":[{"status":"killed"}]}`, kind: KindTaskUpdated, badFields: 1},
	{name: "patch absent is a no-op", line: hUpdated + `"x":1}`, kind: KindTaskUpdated},

	// Strings given as anything else.
	{name: "array for a string field", line: hStarted + `"workflow_name":["wf"],"task_type":"local_workflow","description":{"d":1},"parent_task_id":true,"run_id":[],"tool_use_id":1,"session_id":7}`,
		kind: KindTaskStarted, badFields: 6,
		check: func(t *testing.T, ev *Event) {
			eq(t, ev.TaskType, "local_workflow")
			eq(t, ev.WorkflowName, "")
			eq(t, ev.SessionID, "")
		}},
	{name: "spawn_depth and parent_agent_id of the wrong types", line: hStarted + `"task_type":"local_workflow","spawn_depth":"2","parent_agent_id":7}`,
		kind: KindTaskStarted, badFields: 2,
		check: func(t *testing.T, ev *Event) {
			if ev.SpawnDepth != 0 || ev.ParentAgentID != "" {
				t.Errorf("spawn_depth %d, parent_agent_id %q: a bad value reads as absent", ev.SpawnDepth, ev.ParentAgentID)
			}
		}},
	{name: "spawn_depth out of range", line: hStarted + `"task_type":"local_workflow","spawn_depth":-1}`, kind: KindTaskStarted, badFields: 1},
	{name: "spawn_depth huge is bounded", line: hStarted + `"task_type":"local_workflow","spawn_depth":1e9}`, kind: KindTaskStarted,
		check: func(t *testing.T, ev *Event) {
			if ev.SpawnDepth != MaxSpawnDepth {
				t.Errorf("spawn_depth %d, want %d", ev.SpawnDepth, MaxSpawnDepth)
			}
		}},
	{name: "notification status not a string", line: hNotify + `"status":5,"reason":"r"}`, kind: KindTaskNotification, badFields: 1, check: statusIs("")},
	{name: "notification with a bad usage carries its status", line: hNotify + `"status":"completed","usage":{"total_tokens":"12","duration_ms":1e999},"output_file":{}}`,
		kind: KindTaskNotification, badFields: 2, check: statusIs("completed")},
	{name: "notification with a non-object usage carries its status", line: hNotify + `"usage":"lots","status":"failed","summary":[1]}`,
		kind: KindTaskNotification, badFields: 2, check: statusIs("failed")},

	// Bools.
	{name: "cached as string", line: progressOf(agentWith(`"cached":"yes"`)), kind: KindTaskProgress, badFields: 1,
		check: entriesAre(1, func(t *testing.T, es []Entry) {
			if es[0].Cached {
				t.Error("cached from a string")
			}
		})},
	{name: "cached as number and null", line: progressOf(agentWith(`"cached":1`), `{"type":"workflow_agent","index":2,"cached":null}`), kind: KindTaskProgress, badFields: 1, check: entriesAre(2, nil)},
	{name: "cached true", line: progressOf(agentWith(`"cached":true`)), kind: KindTaskProgress,
		check: entriesAre(1, func(t *testing.T, es []Entry) {
			if !es[0].Cached {
				t.Error("cached lost")
			}
		})},

	// workflow_progress itself.
	{name: "workflow_progress object", line: hProgress + `"workflow_progress":{"a":1}}`, kind: KindTaskProgress, badFields: 1, check: noProgress},
	{name: "workflow_progress string", line: hProgress + `"workflow_progress":"[]"}`, kind: KindTaskProgress, badFields: 1, check: noProgress},
	{name: "workflow_progress number", line: hProgress + `"workflow_progress":3}`, kind: KindTaskProgress, badFields: 1, check: noProgress},
	{name: "workflow_progress bool", line: hProgress + `"workflow_progress":false}`, kind: KindTaskProgress, badFields: 1, check: noProgress},
	{name: "workflow_progress null", line: hProgress + `"workflow_progress":null}`, kind: KindTaskProgress, check: noProgress},
	{name: "workflow_progress empty", line: progressOf(), kind: KindTaskProgress, check: entriesAre(0, nil)},
	{name: "workflow_progress not read on task_updated", line: hUpdated + `"patch":{},"workflow_progress":[1,{"type":"workflow_agent","index":-1}]}`, kind: KindTaskUpdated, check: noProgress},

	// Elements that are not objects, each kind.
	{name: "element number", line: progressOf(`1`, agentWith(`"x":1`)), kind: KindTaskProgress, badEntries: 1, check: entriesAre(1, nil)},
	{name: "element string", line: progressOf(`"x"`, agentWith(`"x":1`)), kind: KindTaskProgress, badEntries: 1, check: entriesAre(1, nil)},
	{name: "element array", line: progressOf(`[]`, agentWith(`"x":1`)), kind: KindTaskProgress, badEntries: 1, check: entriesAre(1, nil)},
	{name: "element bool", line: progressOf(`true`, agentWith(`"x":1`)), kind: KindTaskProgress, badEntries: 1, check: entriesAre(1, nil)},
	{name: "element null", line: progressOf(`null`, agentWith(`"x":1`)), kind: KindTaskProgress, badEntries: 1, check: entriesAre(1, nil)},
	{name: "every non-object element", line: progressOf(`1`, `"x"`, `[{"type":"workflow_agent"}]`, `true`, `false`, `null`, `-2.5e3`), kind: KindTaskProgress, badEntries: 7, check: entriesAre(0, nil)},

	// Element types.
	{name: "element type not a string", line: progressOf(`{"type":5,"index":1}`, `{"type":["workflow_agent"],"index":2}`), kind: KindTaskProgress, badEntries: 2, check: entriesAre(0, nil)},
	{name: "element without type", line: progressOf(`{"index":1,"state":"done"}`, `{}`, `{"type":null}`), kind: KindTaskProgress, badEntries: 3, check: entriesAre(0, nil)},
	{name: "unknown element type ignored", line: progressOf(`{"type":"workflow_note","index":"x","tokens":"y"}`, `{"type":""}`, agentWith(`"x":1`)), kind: KindTaskProgress, check: entriesAre(1, nil)},

	// Indexes.
	{name: "index -1", line: progressOf(`{"type":"workflow_agent","index":-1}`), kind: KindTaskProgress, badEntries: 1, check: entriesAre(0, nil)},
	{name: "index 1.5", line: progressOf(`{"type":"workflow_phase","index":1.5,"title":"P"}`), kind: KindTaskProgress, badEntries: 1, check: entriesAre(0, nil)},
	{name: "index 1e20", line: progressOf(`{"type":"workflow_agent","index":1e20}`), kind: KindTaskProgress, badEntries: 1, check: entriesAre(0, nil)},
	{name: "index as string", line: progressOf(`{"type":"workflow_agent","index":"3"}`), kind: KindTaskProgress, badEntries: 1, check: entriesAre(0, nil)},
	{name: "index 1e400, bool, object", line: progressOf(`{"type":"workflow_agent","index":1e400}`, `{"type":"workflow_agent","index":true}`, `{"type":"workflow_phase","index":{}}`), kind: KindTaskProgress, badEntries: 3, check: entriesAre(0, nil)},
	{name: "index above MaxEntryIndex", line: progressOf(`{"type":"workflow_agent","index":1048577}`), kind: KindTaskProgress, badEntries: 1, check: entriesAre(0, nil)},
	{name: "indexes valid", line: progressOf(`{"type":"workflow_agent","index":1048576}`, `{"type":"workflow_agent","index":2.0}`, `{"type":"workflow_agent","index":-0}`, `{"type":"workflow_agent"}`, `{"type":"workflow_phase","index":null}`, `{"type":"workflow_agent","index":3e0}`),
		kind: KindTaskProgress, check: entriesAre(6, func(t *testing.T, es []Entry) {
			for i, want := range []int{MaxEntryIndex, 2, 0, 0, 0, 3} {
				if es[i].Index != want {
					t.Errorf("entry %d: index %d, want %d", i, es[i].Index, want)
				}
			}
		})},
	{name: "bad index skips only its element", line: progressOf(`{"type":"workflow_phase","index":1,"title":"P"}`, `{"type":"workflow_agent","index":-1,"tokens":"x"}`, agentWith(`"tokens":5`)),
		kind: KindTaskProgress, badEntries: 1, check: entriesAre(2, func(t *testing.T, es []Entry) {
			if !es[0].Phase || es[1].Tokens != 5 {
				t.Errorf("%+v", es)
			}
		})},
	{name: "invalid phaseIndex", line: progressOf(agentWith(`"phaseIndex":-1`), agentWith(`"phaseIndex":1.5`), agentWith(`"phaseIndex":1e20`), agentWith(`"phaseIndex":"1"`), agentWith(`"phaseIndex":2`)),
		kind: KindTaskProgress, badFields: 4, check: entriesAre(5, func(t *testing.T, es []Entry) {
			for i, want := range []int{0, 0, 0, 0, 2} {
				if es[i].PhaseIndex != want || es[i].State != "done" {
					t.Errorf("entry %d: phaseIndex %d state %q, want %d done", i, es[i].PhaseIndex, es[i].State, want)
				}
			}
		})},
	{name: "bad fields inside an agent", line: progressOf(agentWith(`"tokens":"7","label":7,"startedAt":1e400,"endedAt":-3,"toolCalls":2,"error":{"m":1},"resultPreview":5,"queuedAt":12`)),
		kind: KindTaskProgress, badFields: 6, check: entriesAre(1, func(t *testing.T, es []Entry) {
			e := es[0]
			if e.Tokens != 0 || e.Label != "" || e.StartedAt != 0 || e.EndedAt != 0 || e.ToolCalls != 2 || e.QueuedAt != 12 || e.AgentID != "a1" || e.Error != "" {
				t.Errorf("%+v", e)
			}
		})},
	{name: "phase reads only its title", line: progressOf(`{"type":"workflow_phase","index":1,"title":5,"tokens":"x","phaseIndex":-1,"label":[]}`),
		kind: KindTaskProgress, badFields: 1, check: entriesAre(1, nil)},

	// written_at.
	{name: "written_at", line: hStarted + `"written_at":"2026-11-30T10:15:02.123Z"}`, kind: KindTaskStarted,
		check: func(t *testing.T, ev *Event) {
			if want := time.Date(2026, 11, 30, 10, 15, 2, 123e6, time.UTC).UnixMilli(); ev.WrittenAt != want {
				t.Errorf("WrittenAt %d, want %d", ev.WrittenAt, want)
			}
		}},
	{name: "written_at with an offset", line: hNotify + `"status":"completed","written_at":"2026-11-30T11:15:02+01:00"}`, kind: KindTaskNotification,
		check: func(t *testing.T, ev *Event) {
			if want := time.Date(2026, 11, 30, 10, 15, 2, 0, time.UTC).UnixMilli(); ev.WrittenAt != want {
				t.Errorf("WrittenAt %d, want %d", ev.WrittenAt, want)
			}
		}},
	{name: "written_at on a control line", line: `{"type":"control_request","request_id":"r","request":{"subtype":"interrupt"},"written_at":"2026-11-30T10:15:02.123Z"}`, kind: KindControlRequest,
		check: func(t *testing.T, ev *Event) {
			if ev.WrittenAt == 0 {
				t.Error("written_at lost")
			}
		}},
	{name: "written_at unparseable", line: hStarted + `"written_at":"yesterday"}`, kind: KindTaskStarted, badFields: 1},
	{name: "written_at not RFC 3339", line: hStarted + `"written_at":"2026-11-30 10:15:02Z"}`, kind: KindTaskStarted, badFields: 1},
	{name: "written_at before 1970", line: hStarted + `"written_at":"1969-12-31T23:59:59.999Z"}`, kind: KindTaskStarted, badFields: 1},
	{name: "written_at a number", line: hStarted + `"written_at":1796000000000}`, kind: KindTaskStarted, badFields: 1},
	{name: "written_at null", line: hStarted + `"written_at":null}`, kind: KindTaskStarted},

	// Names are case-sensitive.
	{name: "Status after status does not override", line: hNotify + `"status":"completed","Status":"failed"}`, kind: KindTaskNotification, check: statusIs("completed")},
	{name: "TASK_ID after task_id does not override", line: hNotify + `"status":"completed","TASK_ID":"other"}`, kind: KindTaskNotification,
		check: func(t *testing.T, ev *Event) { eq(t, ev.TaskID, "t") }},
	{name: "SubType after subtype does not override", line: hNotify + `"status":"completed","SubType":"task_started"}`, kind: KindTaskNotification},
	{name: "Type after type does not override", line: hNotify + `"status":"completed","Type":"assistant"}`, kind: KindTaskNotification},
	{name: "folded keys inside objects", line: hUpdated + `"patch":{"status":"failed","Status":"completed","END_TIME":"x"},"Usage":7}`, kind: KindTaskUpdated,
		check: func(t *testing.T, ev *Event) { eq(t, ev.PatchStatus, "failed") }},
	{name: "folded keys inside elements", line: progressOf(`{"type":"workflow_agent","Type":"workflow_phase","index":2,"Index":-1,"state":"start","State":7}`), kind: KindTaskProgress,
		check: entriesAre(1, func(t *testing.T, es []Entry) {
			if es[0].Phase || es[0].Index != 2 || es[0].State != "start" {
				t.Errorf("%+v", es[0])
			}
		})},
	{name: "only folded keys is not an event", line: `{"Type":"system","SubType":"task_notification","Task_Id":"t","Status":"completed"}`},
	{name: "folded subtype is no subtype", line: `{"type":"system","SubType":"task_started","Task_Id":"t"}`},
	{name: "folded task_id is no task_id", line: `{"type":"system","subtype":"task_started","Task_Id":"t"}`, reason: ReasonBadShape},

	// Identity.
	{name: "type not a string", line: `{"type":5,"subtype":"task_started","task_id":"t"}`, reason: ReasonBadShape},
	{name: "type an array", line: `{"type":["system"],"subtype":"task_started","task_id":"t"}`, reason: ReasonBadShape},
	{name: "type null", line: `{"type":null,"subtype":"task_started","task_id":"t"}`},
	{name: "subtype not a string", line: `{"type":"system","subtype":{"x":1},"task_id":"t"}`, reason: ReasonBadShape},
	{name: "subtype null", line: `{"type":"system","subtype":null,"task_id":"t"}`},
	{name: "subtype of another type is not read", line: `{"type":"user","subtype":5,"task_id":"t"}`},
	{name: "task_id empty", line: `{"type":"system","subtype":"task_progress","task_id":""}`, reason: ReasonBadShape},
	{name: "task_id a number", line: `{"type":"system","subtype":"task_notification","task_id":5,"status":"completed"}`, reason: ReasonBadShape},
	{name: "task_id null", line: `{"type":"system","subtype":"task_updated","task_id":null,"patch":{}}`, reason: ReasonBadShape},
	{name: "request not an object", line: `{"type":"control_request","request_id":"r","request":"interrupt"}`, reason: ReasonBadShape},
	{name: "request null", line: `{"type":"control_request","request_id":"r","request":null}`, reason: ReasonBadShape},
	{name: "response not an object", line: `{"type":"control_response","response":[]}`, reason: ReasonBadShape},
	{name: "request with bad fields", line: `{"type":"control_request","request_id":5,"request":{"subtype":"interrupt","session_id":1,"task_id":{}},"session_id":[]}`, kind: KindControlRequest, badFields: 3,
		check: func(t *testing.T, ev *Event) { eq(t, ev.RequestSubtype, "interrupt") }},
	{name: "response with bad fields", line: `{"type":"control_response","response":{"subtype":true,"request_id":"r"},"request_id":[]}`, kind: KindControlResponse, badFields: 1,
		check: func(t *testing.T, ev *Event) { eq(t, ev.RequestID, "r") }},
	{name: "init with a bad session_id", line: `{"type":"system","subtype":"init","session_id":5,"task_id":6}`, kind: KindInit, badFields: 1},

	// Unknown fields, and fields this kind does not read, cost nothing.
	{name: "unknown fields of any type", line: hNotify + `"status":"completed","uuid":[1,2],"output_file":{},"x":null,"y":1e400}`, kind: KindTaskNotification, check: statusIs("completed")},
	{name: "fields of other kinds", line: hProgress + `"status":5,"patch":1,"workflow_name":[],"request":"x"}`, kind: KindTaskProgress},

	// Duplicates (the last wins) and escaped keys: decodePlain decides.
	{name: "duplicate status", line: hNotify + `"status":"failed","status":"completed"}`, kind: KindTaskNotification, unsure: true, check: statusIs("completed")},
	{name: "duplicate usage, last wins whole", line: hNotify + `"usage":{"total_tokens":"x"},"usage":{"tool_uses":3},"status":"completed"}`, kind: KindTaskNotification, unsure: true, check: usageIs(Usage{0, 3, 0})},
	{name: "duplicate bad status", line: hNotify + `"status":"completed","status":5}`, kind: KindTaskNotification, badFields: 1, unsure: true, check: statusIs("")},
	{name: "escaped key", line: hNotify + `"st\u0061tus":"completed"}`, kind: KindTaskNotification, unsure: true, check: statusIs("completed")},

	// Issue 28: what the Claude Agent SDK's reader accepts. A notification
	// carries the run's final snapshot; a snapshot may be resent; rows
	// carry endedWithRun, queuedAt, lastProgressAt and a redacted error.
	{name: "notification carries the final snapshot", line: hNotify + `"status":"completed","reason":"worker_restart","workflow_progress":[{"type":"workflow_phase","index":1,"title":"P"},` + agentWith(`"queuedAt":1796206130329,"lastProgressAt":1796206130335,"endedWithRun":"stopped","error":"error"`) + `]}`,
		kind: KindTaskNotification, check: func(t *testing.T, ev *Event) {
			eq(t, ev.Status, "completed")
			eq(t, ev.Reason, "worker_restart")
			entriesAre(2, func(t *testing.T, es []Entry) {
				a := es[1]
				if !a.EndedWithRun {
					t.Errorf("endedWithRun not kept")
				}
				eq(t, a.Error, RedactedError)
				if a.QueuedAt != 1796206130329 || a.LastProgressAt != 1796206130335 {
					t.Errorf("queuedAt %d lastProgressAt %d", a.QueuedAt, a.LastProgressAt)
				}
			})(t, ev)
		}},
	{name: "notification snapshot's bad element", line: hNotify + `"status":"stopped","workflow_progress":[5,{"type":"workflow_agent","index":1,"queuedAt":"x","lastProgressAt":-1,"endedWithRun":7}]}`,
		kind: KindTaskNotification, badFields: 3, badEntries: 1, check: entriesAre(1, func(t *testing.T, es []Entry) {
			if es[0].QueuedAt != 0 || es[0].LastProgressAt != 0 || es[0].EndedWithRun {
				t.Errorf("bad values kept: %+v", es[0])
			}
		})},
	{name: "notification snapshot not an array", line: hNotify + `"status":"completed","workflow_progress":{"x":1}}`, kind: KindTaskNotification, badFields: 1,
		check: func(t *testing.T, ev *Event) { noProgress(t, ev); eq(t, ev.Status, "completed") }},
	{name: "notification without snapshot", line: hNotify + `"status":"completed"}`, kind: KindTaskNotification, check: noProgress},
	{name: "resent snapshot", line: hProgress + `"resent":true,"workflow_progress":[]}`, kind: KindTaskProgress,
		check: func(t *testing.T, ev *Event) {
			if !ev.Resent || !ev.HasProgress {
				t.Errorf("Resent %v HasProgress %v", ev.Resent, ev.HasProgress)
			}
		}},
	{name: "resent false and null", line: hProgress + `"resent":false,"usage":{"total_tokens":1}}`, kind: KindTaskProgress,
		check: func(t *testing.T, ev *Event) {
			if ev.Resent {
				t.Error("Resent from false")
			}
		}},
	{name: "resent of the wrong type is a bad field, not resent", line: hProgress + `"resent":"yes"}`, kind: KindTaskProgress, badFields: 1,
		check: func(t *testing.T, ev *Event) {
			if ev.Resent {
				t.Error(`Resent from "yes"`)
			}
		}},
	{name: "resent notification", line: hNotify + `"status":"stopped","resent":true}`, kind: KindTaskNotification,
		check: func(t *testing.T, ev *Event) {
			if !ev.Resent {
				t.Error("Resent lost")
			}
		}},
	{name: "resent is not read on other kinds", line: hUpdated + `"resent":1,"patch":{}}`, kind: KindTaskUpdated},
	{name: "error redacted to the word", line: progressOf(`{"type":"workflow_agent","index":1,"state":"error","error":" error "}`), kind: KindTaskProgress,
		check: entriesAre(1, func(t *testing.T, es []Entry) { eq(t, es[0].Error, RedactedError); eq(t, es[0].State, "error") })},
	{name: "reason bounded and cleaned", line: hNotify + `"status":"stopped","reason":"worker\u0000_restart ` + strings.Repeat("x", 300) + `"}`, kind: KindTaskNotification,
		check: func(t *testing.T, ev *Event) {
			if len(ev.Reason) > maxIDLen || !strings.HasPrefix(ev.Reason, "worker_restart x") {
				t.Errorf("reason %q", ev.Reason)
			}
		}},

	// Syntax errors stay invalid_json.
	{name: "syntax error beside a bad field", line: hNotify + `"status":"completed","usage":{"total_tokens":"x",}}`, reason: ReasonInvalidJSON},
}

func TestDecodeBadFields(t *testing.T) {
	for _, c := range fieldCases {
		t.Run(c.name, func(t *testing.T) {
			for _, plain := range []bool{false, true} {
				d := NewDecoder(DecodeOptions{KeepErrors: true, KeepPreviews: true})
				d.plainOnly = plain
				ev, reason := d.Decode(tap.SourceStdout, []byte(c.line))
				if reason != c.reason {
					t.Fatalf("plain=%v: reason %v, want %v", plain, reason, c.reason)
				}
				if c.kind == KindNone {
					if ev != nil {
						t.Fatalf("plain=%v: event %v, want none", plain, ev.Kind)
					}
					continue
				}
				if ev == nil || ev.Kind != c.kind {
					t.Fatalf("plain=%v: got %+v, want kind %v", plain, ev, c.kind)
				}
				if ev.BadFields != c.badFields || ev.BadEntries != c.badEntries {
					t.Errorf("plain=%v: BadFields %d BadEntries %d, want %d %d", plain, ev.BadFields, ev.BadEntries, c.badFields, c.badEntries)
				}
				if c.check != nil {
					c.check(t, ev)
				}
			}
			// The scanner decides every case but duplicates and escapes
			// itself: a fallback would make the comparison above vacuous.
			if _, _, ok := NewDecoder(DecodeOptions{}).decodeFast(tap.SourceStdout, []byte(c.line)); ok == c.unsure {
				t.Errorf("scanner handled the line: %v, want %v", ok, !c.unsure)
			}
		})
	}
}

// TestDecodeBadFieldsInReusedElements: an element taken from the
// snapshot cache counts exactly what decoding it counts, line after line.
func TestDecodeBadFieldsInReusedElements(t *testing.T) {
	bad := agentWith(`"tokens":"7","phaseIndex":-1`)                // 2 bad fields
	skipped := `{"type":"workflow_agent","index":1.5,"tokens":"x"}` // 1 bad entry
	lines := []string{
		progressOf(bad, skipped, `null`, `{"type":"future","x":"y"}`),           // 2, 2
		progressOf(bad, skipped, `null`, `{"type":"future","x":"y"}`),           // all reused
		progressOf(bad, skipped, `null`, `{"type":"future","x":"y"}`, bad),      // 4, 2
		progressOf(`{"type":"workflow_agent","index":2}`, skipped, `null`, bad), // 2, 2
		progressOf(),
	}
	want := [][2]int{{2, 2}, {2, 2}, {4, 2}, {2, 2}, {0, 0}}
	for _, plain := range []bool{false, true} {
		d := NewDecoder(DecodeOptions{})
		d.plainOnly = plain
		for i, l := range lines {
			ev, r := d.Decode(tap.SourceStdout, []byte(l))
			if r != ReasonNone || ev == nil {
				t.Fatalf("plain=%v line %d: %v", plain, i, r)
			}
			if got := [2]int{ev.BadFields, ev.BadEntries}; got != want[i] {
				t.Errorf("plain=%v line %d: BadFields, BadEntries = %v, want %v", plain, i, got, want[i])
			}
		}
		if !plain && d.snap.decoded != 4+1+1 {
			t.Errorf("decoded %d elements, want 6 (the cache was not used)", d.snap.decoded)
		}
	}
}
