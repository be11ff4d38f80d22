// Tests of the decoder: event shapes of both dialects, the cheap prefilter,
// rejection reasons, bounded and sanitized strings, and that secrets have no
// field to land in.
package streamjson

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/tap"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name   string
		src    tap.Source
		line   string
		kind   Kind
		reason Reason
		check  func(t *testing.T, ev *Event)
	}{
		{name: "blank", line: "   ", kind: KindNone},
		{name: "assistant ignored", line: `{"type":"assistant","message":{"content":"hi"}}`, kind: KindNone},
		{name: "assistant quoting a task marker is still ignored", line: `{"type":"assistant","message":{"content":"see \"task_started\""}}`, kind: KindNone},
		{name: "other system subtype ignored", line: `{"type":"system","subtype":"background_tasks_changed","tasks":[{"task_id":"x"}]}`, kind: KindNone},
		{name: "init", line: `{"type":"system","subtype":"init","session_id":"s1","model":"m"}`, kind: KindInit,
			check: func(t *testing.T, ev *Event) { eq(t, ev.SessionID, "s1") }},
		{name: "task_started claude", line: `{"type":"system","subtype":"task_started","task_id":"ww1t7k50l","run_id":"r1","tool_use_id":"tu","task_type":"local_workflow","workflow_name":"mock-review","prompt":"SECRET SOURCE","parent_task_id":"p","session_id":"s"}`, kind: KindTaskStarted,
			check: func(t *testing.T, ev *Event) {
				eq(t, ev.TaskID, "ww1t7k50l")
				eq(t, ev.RunID, "r1")
				eq(t, ev.ToolUseID, "tu")
				eq(t, ev.TaskType, "local_workflow")
				eq(t, ev.WorkflowName, "mock-review")
				eq(t, ev.ParentTaskID, "p")
				if strings.Contains(fmt.Sprintf("%+v", *ev), "SECRET") {
					t.Error("the workflow prompt was kept")
				}
			}},
		{name: "task_started nested", line: `{"type":"system","subtype":"task_started","task_id":"w2","run_id":"r2","task_type":"local_workflow","workflow_name":"child","spawn_depth":2,"parent_task_id":"w1","parent_agent_id":"a4e08089a89a08aa0","session_id":"s"}`, kind: KindTaskStarted,
			check: func(t *testing.T, ev *Event) {
				eq(t, ev.ParentTaskID, "w1")
				eq(t, ev.ParentAgentID, "a4e08089a89a08aa0")
				if ev.SpawnDepth != 2 {
					t.Errorf("spawn_depth %d, want 2", ev.SpawnDepth)
				}
			}},
		{name: "task_progress with a workflow() child phase", line: `{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"type":"workflow_phase","index":1,"title":"Outer"},{"type":"workflow_phase","index":3,"title":"\u25b8 nestwf","kind":"child"},{"type":"workflow_phase","index":4,"title":"x","kind":"future"},{"type":"workflow_phase","index":5,"title":"y","kind":7}]}`, kind: KindTaskProgress,
			check: func(t *testing.T, ev *Event) {
				if len(ev.Entries) != 4 || ev.Entries[0].Child || !ev.Entries[1].Child || ev.Entries[1].Title != "▸ nestwf" || ev.Entries[2].Child || ev.Entries[3].Child {
					t.Errorf("entries: %+v", ev.Entries)
				}
				if ev.BadFields != 1 {
					t.Errorf("bad fields %d, want 1 (kind 7)", ev.BadFields)
				}
			}},
		{name: "task_started remote", line: `{"type":"system","subtype":"task_started","task_id":"t9","task_type":"remote_agent","description":"remote","session_id":"s"}`, kind: KindTaskStarted,
			check: func(t *testing.T, ev *Event) { eq(t, ev.TaskType, "remote_agent") }},
		{name: "task_progress with entries", line: `{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":5,"tool_uses":1,"duration_ms":9},"workflow_progress":[{"type":"workflow_phase","index":1,"title":"G"},{"type":"future_entry","index":9},{"type":"workflow_agent","index":2,"agentId":"v2:ab","state":"done","cached":true,"startedAt":1000,"endedAt":2000,"phaseIndex":1,"tokens":7,"resultPreview":"PREVIEW"}]}`, kind: KindTaskProgress,
			check: func(t *testing.T, ev *Event) {
				if !ev.HasProgress || !ev.HasUsage || ev.Usage != (Usage{5, 1, 9}) {
					t.Errorf("usage/progress: %+v", ev)
				}
				if len(ev.Entries) != 2 || !ev.Entries[0].Phase || ev.Entries[1].AgentID != "v2:ab" || !ev.Entries[1].Cached || ev.Entries[1].EndedAt != 2000 {
					t.Errorf("entries: %+v", ev.Entries)
				}
				eq(t, ev.Entries[1].ResultPreview, "") // opt-in only
			}},
		{name: "usage-only tick", line: `{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":5}}`, kind: KindTaskProgress,
			check: func(t *testing.T, ev *Event) {
				if ev.HasProgress {
					t.Error("a tick without workflow_progress must not look like a snapshot")
				}
			}},
		{name: "task_updated", line: `{"type":"system","subtype":"task_updated","task_id":"t","patch":{"status":"killed","end_time":1796206130354,"error":"boom"}}`, kind: KindTaskUpdated,
			check: func(t *testing.T, ev *Event) {
				eq(t, ev.PatchStatus, "killed")
				eq(t, ev.PatchError, "boom")
				if ev.PatchEndTime != 1796206130354 {
					t.Errorf("end_time %d", ev.PatchEndTime)
				}
			}},
		{name: "notification", line: `{"type":"system","subtype":"task_notification","task_id":"t","status":"stopped","reason":"worker_restart","summary":"SUMMARY"}`, kind: KindTaskNotification,
			check: func(t *testing.T, ev *Event) {
				eq(t, ev.Status, "stopped")
				eq(t, ev.Reason, "worker_restart")
				eq(t, ev.Summary, "")
			}},
		{name: "interrupt on stdin", src: tap.SourceStdin, line: `{"type":"control_request","request_id":"stop-1","request":{"subtype":"interrupt","session_id":"s","reason":"user cancel"}}`, kind: KindControlRequest,
			check: func(t *testing.T, ev *Event) {
				eq(t, ev.RequestSubtype, "interrupt")
				eq(t, ev.SessionID, "s")
				eq(t, ev.RequestID, "stop-1")
			}},
		{name: "stop_task", src: tap.SourceStdin, line: `{"type":"control_request","request_id":"x","request":{"subtype":"stop_task","task_id":"t9"}}`, kind: KindControlRequest,
			check: func(t *testing.T, ev *Event) { eq(t, ev.TaskID, "t9") }},
		{name: "initialize response keeps no account", line: `{"type":"control_response","response":{"subtype":"success","request_id":"init","response":{"account":{"token":"JWT-SECRET","email":"a@b"}}}}`, kind: KindControlResponse,
			check: func(t *testing.T, ev *Event) {
				if s := fmt.Sprintf("%+v", *ev); strings.Contains(s, "JWT-SECRET") || strings.Contains(s, "a@b") {
					t.Errorf("secret kept: %s", s)
				}
			}},
		{name: "hostile name sanitized", line: "{\"type\":\"system\",\"subtype\":\"task_started\",\"task_id\":\"t\",\"task_type\":\"local_workflow\",\"workflow_name\":\"a\\u0007b\\u202ec\\n\\nd\"}", kind: KindTaskStarted,
			check: func(t *testing.T, ev *Event) { eq(t, ev.WorkflowName, "abc d") }},
		{name: "long name bounded", line: `{"type":"system","subtype":"task_started","task_id":"t","workflow_name":"` + strings.Repeat("é", 10000) + `"}`, kind: KindTaskStarted,
			check: func(t *testing.T, ev *Event) {
				if len(ev.WorkflowName) > maxNameLen {
					t.Errorf("name of %d bytes kept", len(ev.WorkflowName))
				}
			}},
		{name: "not json", line: `hello`, reason: ReasonInvalidJSON},
		{name: "truncated json of interest", line: `{"type":"system","subtype":"task_started","task_id":"t" "x"}`, reason: ReasonInvalidJSON},
		{name: "wrong type", line: `{"type":"system","subtype":"task_started","task_id":5}`, reason: ReasonBadShape},
		{name: "missing task id", line: `{"type":"system","subtype":"task_notification","status":"completed"}`, reason: ReasonBadShape},
		{name: "updated without patch changes nothing", line: `{"type":"system","subtype":"task_updated","task_id":"t"}`, kind: KindTaskUpdated,
			check: func(t *testing.T, ev *Event) {
				if ev.PatchStatus != "" || ev.BadFields != 0 {
					t.Errorf("%+v", ev)
				}
			}},
		{name: "progress with a wrong entry shape skips the entry", line: `{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"type":"workflow_agent","index":"one"}]}`, kind: KindTaskProgress,
			check: func(t *testing.T, ev *Event) {
				if !ev.HasProgress || len(ev.Entries) != 0 || ev.BadEntries != 1 || ev.BadFields != 0 {
					t.Errorf("%+v", ev)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, reason := NewDecoder(DecodeOptions{KeepErrors: true}).Decode(tt.src, []byte(tt.line))
			if reason != tt.reason {
				t.Fatalf("reason %v, want %v", reason, tt.reason)
			}
			if tt.kind == KindNone {
				if ev != nil {
					t.Fatalf("got event %v, want none", ev.Kind)
				}
				return
			}
			if ev == nil || ev.Kind != tt.kind {
				t.Fatalf("got %+v, want kind %v", ev, tt.kind)
			}
			if tt.check != nil {
				tt.check(t, ev)
			}
		})
	}
}

// TestDecoderReuseDoesNotLeak is the regression test for decoding into
// reused entries: fields absent from a later snapshot must not keep the
// values of an earlier one.
func TestDecoderReuseDoesNotLeak(t *testing.T) {
	d := NewDecoder(DecodeOptions{})
	first := `{"type":"system","subtype":"task_progress","task_id":"a","workflow_progress":[{"type":"workflow_agent","index":1,"state":"error","error":"boom","tokens":9,"agentId":"x"}]}`
	second := `{"type":"system","subtype":"task_progress","task_id":"b","workflow_progress":[{"type":"workflow_agent","index":1,"state":"start"}]}`
	if _, r := d.Decode(tap.SourceStdout, []byte(first)); r != ReasonNone {
		t.Fatal(r)
	}
	ev, r := d.Decode(tap.SourceStdout, []byte(second))
	if r != ReasonNone || len(ev.Entries) != 1 {
		t.Fatalf("%v %+v", r, ev)
	}
	if e := ev.Entries[0]; e.Error != "" || e.Tokens != 0 || e.AgentID != "" {
		t.Errorf("fields of the previous snapshot leaked: %+v", e)
	}
}

func TestDecodeKeepPreviews(t *testing.T) {
	line := `{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"type":"workflow_agent","index":1,"state":"done","resultPreview":"R\u0000X","promptPreview":"P"}]}`
	ev, _ := NewDecoder(DecodeOptions{KeepPreviews: true}).Decode(tap.SourceStdout, []byte(line))
	eq(t, ev.Entries[0].ResultPreview, "RX")
	eq(t, ev.Entries[0].PromptPreview, "P")
}

func eq(t *testing.T, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func BenchmarkDecodeIgnored(b *testing.B) {
	line := []byte(`{"type":"assistant","message":{"content":"` + strings.Repeat("z", 8000) + `"}}`)
	d := NewDecoder(DecodeOptions{})
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		d.Decode(tap.SourceStdout, line)
	}
}

// TestLeadingType: the sniff that dismisses assistant and user messages
// without a scan only trusts a plain leading "type" value.
func TestLeadingType(t *testing.T) {
	for _, tc := range []struct {
		line string
		typ  string
		ok   bool
	}{
		{`{"type":"assistant","message":{}}`, "assistant", true},
		{`{"type":"system","subtype":"init"}`, "system", true},
		{`{"type":"sys\"tem"}`, "", false},
		{`{"subtype":"task_started","type":"system"}`, "", false},
		{` {"type":"user"}`, "", false},
	} {
		typ, ok := leadingType([]byte(tc.line))
		if string(typ) != tc.typ || ok != tc.ok {
			t.Errorf("leadingType(%s) = %q, %v; want %q, %v", tc.line, typ, ok, tc.typ, tc.ok)
		}
	}
	// A task event written with "type" after other keys is still decoded.
	ev, r := NewDecoder(DecodeOptions{}).Decode(tap.SourceStdout, []byte(`{"subtype":"task_started","task_id":"t","type":"system"}`))
	if r != ReasonNone || ev == nil || ev.Kind != KindTaskStarted {
		t.Fatalf("got %v %v", ev, r)
	}
}

// TestDecodeWithholdsErrors: by default the text of error fields never
// leaves the decoder (it can quote secrets), but that there was an error
// does, so statuses are unchanged; KeepErrors keeps the cleaned text.
func TestDecodeWithholdsErrors(t *testing.T) {
	updated := `{"type":"system","subtype":"task_updated","task_id":"t","patch":{"status":"failed","error":"token sk-canary\u001b[31m"}}`
	progress := `{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"type":"workflow_agent","index":0,"agentId":"a","state":"error","error":"mail me@example.com"},{"type":"workflow_agent","index":1,"agentId":"b","state":"done","error":""}]}`
	for _, tt := range []struct {
		keep               bool
		patchErr, agentErr string
	}{
		{false, WithheldError, WithheldError},
		{true, "token sk-canary[31m", "mail me@example.com"},
	} {
		d := NewDecoder(DecodeOptions{KeepErrors: tt.keep})
		ev, r := d.Decode(tap.SourceStdout, []byte(updated))
		if r != ReasonNone {
			t.Fatalf("keep=%v: updated rejected: %v", tt.keep, r)
		}
		eq(t, ev.PatchError, tt.patchErr)
		ev, r = d.Decode(tap.SourceStdout, []byte(progress))
		if r != ReasonNone || len(ev.Entries) != 2 {
			t.Fatalf("keep=%v: progress: %v %+v", tt.keep, r, ev)
		}
		eq(t, ev.Entries[0].Error, tt.agentErr)
		eq(t, ev.Entries[1].Error, "") // no error: nothing to withhold
	}
}
