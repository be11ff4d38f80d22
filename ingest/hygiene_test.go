package ingest_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/safetext"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// textBounds is the bound of every text field the Tracker hands its sinks
// (by type and field name): ingest is the one boundary, so each is
// safetext-clean to its bound (Clean(x, bound) == x) and the sinks only
// Cut. A text field not listed fails checkText: a new field must be
// cleaned where it enters ingest (the decoder, Restore's hygiene.go, join)
// and listed here.
var textBounds = map[string]int{
	"Run.TaskID": boundID, "Run.RunID": boundID, "Run.SessionID": boundID, "Run.ToolUseID": boundID,
	"Run.ParentTaskID": boundID, "Run.TaskType": boundID, "Run.PatchStatus": boundID, "Run.Reason": boundID,
	"Run.Name": boundName, "Run.Description": boundText, "Run.Error": boundText, "Run.Summary": boundPreview,
	"AgentRef.TaskID": boundID, "AgentRef.RunID": boundID, "AgentRef.AgentID": boundID, "AgentRef.RootTask": boundID,
	"AgentRef.RootRun": boundID, "AgentRef.Workflow": boundName, "AgentRef.Label": boundName,
	"Phase.Title":   boundName,
	"Agent.AgentID": boundID, "Agent.Label": boundName, "Agent.PhaseTitle": boundName, "Agent.Error": boundText,
	"Agent.ResultPreview": boundPreview, "Agent.PromptPreview": boundPreview,
	"Model.Model":       boundID,
	"ModelCall.AgentID": boundID, "ModelCall.ToolUseID": boundID, "ModelCall.SessionID": boundID,
	"ModelCall.Workflow": boundName, "ModelCall.TaskID": boundID, "ModelCall.RunID": boundID,
	"Turn.SessionID": boundID, "Turn.Subtype": boundID,
}

// isClean is the definition of clean text: what Clean leaves as it is.
func isClean(s string, bound int) bool { return safetext.Clean(s, bound) == s }

// checkText walks v (a struct, or a pointer or slice of them) and fails
// on any text field that is not clean to its bound, or has no bound.
func checkText(t *testing.T, where string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			checkText(t, where, v.Elem())
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			checkText(t, where, v.Index(i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f, fv := v.Type().Field(i), v.Field(i)
			if f.Type.Kind() != reflect.String {
				checkText(t, where, fv)
				continue
			}
			key := v.Type().Name() + "." + f.Name
			bound, ok := textBounds[key]
			if !ok {
				t.Errorf("%s: text field %s has no bound: clean it where it enters ingest and list it in textBounds", where, key)
				continue
			}
			if s := fv.String(); !isClean(s, bound) {
				t.Errorf("%s: %s is not clean to %d bytes: %q", where, key, bound, s)
			}
		}
	}
}

// checkLifecycleText checks every text an event hands its sinks.
func checkLifecycleText(t *testing.T, l ingest.Lifecycle) {
	t.Helper()
	where := l.Kind.String()
	checkText(t, where, reflect.ValueOf(l.Run))
	checkText(t, where, reflect.ValueOf(l.Agent))
	checkText(t, where, reflect.ValueOf(l.Call))
	checkText(t, where, reflect.ValueOf(l.Turn))
}

// hostileTexts are what a stream or a checkpoint may say: controls,
// escapes, bidirectional marks, invalid UTF-8, runs of spaces, and more
// than any bound.
var hostileTexts = []string{
	"evil\x00\x1b[31mred\x7f\u0085",
	"\u202eenod\u202c \u2066x\u2069 \u200bzero-width\ufeff",
	"bad\xff\xfeutf8\xc0",
	"  spaced \t\r\n out  ",
	strings.Repeat("long-name-", 200),
	strings.Repeat("名", 700),
	strings.Repeat("a ", 600),
}

// fillText sets every text field reachable from v (pointers allocated) to
// text, through set, which may vary it by field.
func fillText(v reflect.Value, set func(key string) string) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() && v.CanSet() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		if !v.IsNil() {
			fillText(v.Elem(), set)
		}
	case reflect.Slice:
		for i := range v.Len() {
			fillText(v.Index(i), set)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f, fv := v.Type().Field(i), v.Field(i)
			if !fv.CanSet() {
				continue
			}
			if f.Type.Kind() == reflect.String {
				fv.SetString(set(v.Type().Name() + "." + f.Name))
			} else {
				fillText(fv, set)
			}
		}
	}
}

// recordSink checks the text of every event and counts them.
type recordSink struct {
	t *testing.T
	n int
}

func (s *recordSink) Observe(l ingest.Lifecycle) { s.n++; checkLifecycleText(s.t, l) }

// checkRestoredText is the property a checkpoint holds to: whatever text
// it says (every text field of every run, launcher, tombstone and session
// baseline set to text), the runs a Tracker restores from it, and every
// event it then emits (more lines, the grace windows closing, Close), are
// clean to their fields' bounds.
func checkRestoredText(t *testing.T, text string) {
	t.Helper()
	st := restorableState(t)
	fillText(reflect.ValueOf(&st).Elem(), func(key string) string {
		if strings.HasSuffix(key, ".TaskID") {
			return "t" + text // a run needs a task id
		}
		return text
	})
	for i := range st.Tombstones {
		st.Tombstones[i] = [2]string{text, text + "x"}
	}
	sink := &recordSink{t: t}
	tr := ingest.NewTracker(ingest.TrackerOptions{Grace: time.Second, Sinks: []ingest.Sink{sink}, AttributeCalls: true})
	if err := tr.Restore(st, st.Now); err != nil {
		// A checkpoint whose text cleans to a clash (two session
		// baselines under one id) may be refused: then nothing leaks.
		t.Logf("Restore refused: %v", err)
		return
	}
	for _, r := range tr.Open() {
		checkText(t, "restored", reflect.ValueOf(r))
	}
	back := tr.Snapshot()
	checkText(t, "snapshot", reflect.ValueOf(back.Runs))
	checkText(t, "snapshot", reflect.ValueOf(back.Launchers))
	for _, k := range back.Tombstones {
		if !isClean(k[0], boundID) || !isClean(k[1], boundID) {
			t.Errorf("tombstone %q not clean", k)
		}
	}
	for _, s := range back.Sessions {
		if !isClean(s.ID, boundID) {
			t.Errorf("session %q not clean", s.ID)
		}
		for _, m := range s.Models {
			if !isClean(m.Model.Model, boundID) {
				t.Errorf("session model %q not clean", m.Model.Model)
			}
		}
	}
	// Drive the restored runs to their ends: every event they emit is clean.
	dec := streamjson.NewDecoder(streamjson.DecodeOptions{KeepPreviews: true, KeepErrors: true})
	now := st.Now + 100
	for _, r := range tr.Open() {
		line := `{"type":"system","subtype":"task_notification","task_id":"` + r.TaskID + `","run_id":"` + r.RunID + `","status":"failed"}`
		if ev, reason := dec.Decode(tap.SourceStdout, []byte(line)); ev != nil && reason == streamjson.ReasonNone {
			tr.Handle(ev, now)
		}
	}
	tr.Advance(now + 10_000)
	tr.Close(now + 20_000)
	if sink.n == 0 {
		t.Errorf("the restored runs emitted nothing")
	}
}

// restorableState is a checkpoint of a stream with runs of every kind open:
// workflows with phases and agents (previews and errors kept), a nested
// run, a plain task, a session baseline and a model call's cost.
func restorableState(t *testing.T) ingest.TrackerState {
	t.Helper()
	tr := ingest.NewTracker(ingest.TrackerOptions{Grace: time.Hour, AttributeCalls: true})
	dec := streamjson.NewDecoder(streamjson.DecodeOptions{KeepPreviews: true, KeepErrors: true})
	now := T0
	for _, line := range []string{
		`{"type":"system","subtype":"task_started","task_id":"w1","run_id":"r1","session_id":"s","task_type":"local_workflow","workflow_name":"wf","description":"d","tool_use_id":"tu"}`,
		`{"type":"system","subtype":"task_progress","task_id":"w1","run_id":"r1","session_id":"s","workflow_progress":[{"type":"workflow_phase","index":1,"title":"P1"},` +
			`{"type":"workflow_agent","index":1,"agentId":"v1:1","label":"a","phaseIndex":1,"phaseTitle":"P1","state":"running","startedAt":1700000000000,"promptPreview":"p"},` +
			`{"type":"workflow_agent","index":2,"agentId":"v1:2","label":"b","phaseIndex":1,"phaseTitle":"P1","state":"error","startedAt":1700000000000,"endedAt":1700000000500,"error":"boom","resultPreview":"r"}]}`,
		`{"type":"system","subtype":"task_started","task_id":"n1","run_id":"r2","session_id":"s","task_type":"local_workflow","workflow_name":"inner","parent_task_id":"w1","parent_agent_id":"v1:1","spawn_depth":2}`,
		`{"type":"system","subtype":"task_started","task_id":"b1","session_id":"s","task_type":"local_bash","description":"sleep"}`,
		`{"type":"system","subtype":"task_updated","task_id":"w1","run_id":"r1","patch":{"status":"running","error":"e"}}`,
		`{"type":"result","session_id":"s","total_cost_usd":1,"modelUsage":{"m":{"inputTokens":1,"outputTokens":1,"costUSD":1}}}`,
		`{"type":"system","subtype":"task_started","task_id":"d1","run_id":"r9","session_id":"s","task_type":"local_workflow","workflow_name":"done"}`,
		`{"type":"system","subtype":"task_notification","task_id":"d1","run_id":"r9","session_id":"s","status":"completed","summary":"ok","reason":"worker_restart"}`,
	} {
		now += 10
		ev, reason := dec.Decode(tap.SourceStdout, []byte(line))
		if reason != streamjson.ReasonNone || ev == nil {
			t.Fatalf("line rejected (%v): %s", reason, line)
		}
		tr.Handle(ev, now)
	}
	tr.HandleCall(ingest.ModelCall{AgentID: "v1:1", SessionID: "s"}, now)
	st := tr.Snapshot()
	if len(st.Runs) < 4 || len(st.Sessions) == 0 {
		t.Fatalf("a poor checkpoint: %d runs, %d sessions", len(st.Runs), len(st.Sessions))
	}
	return st
}

func TestRestoreCleansText(t *testing.T) {
	for _, text := range hostileTexts {
		checkRestoredText(t, text)
	}
	// Every field was filled: a field fillText cannot reach would be
	// silently unchecked.
	st := restorableState(t)
	fillText(reflect.ValueOf(&st).Elem(), func(string) string { return "\x00" })
	checkFilled(t, reflect.ValueOf(st.Runs))
}

// checkFilled fails on a text field fillText left alone.
func checkFilled(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			t.Errorf("a nil %s left unfilled", v.Type())
			return
		}
		checkFilled(t, v.Elem())
	case reflect.Slice:
		for i := range v.Len() {
			checkFilled(t, v.Index(i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() && f.Type.Kind() == reflect.String && v.Field(i).String() != "\x00" {
				t.Errorf("%s.%s not filled", v.Type().Name(), f.Name)
			} else if f.IsExported() {
				checkFilled(t, v.Field(i))
			}
		}
	}
}

// FuzzRestoreText: whatever text a checkpoint says, what the Tracker
// restores and emits from it is clean.
func FuzzRestoreText(f *testing.F) {
	for _, s := range hostileTexts {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 4096 {
			text = text[:4096]
		}
		checkRestoredText(t, text)
	})
}

// fzNames are the texts FuzzTracker's streams name workflows, describe
// runs and agents' errors, previews and summaries with (JSON string
// contents): plain, and the hostile kinds of hostileTexts.
var fzNames = [...]string{"wf", "wf", `w\u0000f\u001b[31m\u007f`, `\u202ewf\u2066 \u200b`, "bad\xffwf\xc0", `  tab\t\tand\r\n  `,
	strings.Repeat("long-name-", 120), strings.Repeat("名", 400)}
