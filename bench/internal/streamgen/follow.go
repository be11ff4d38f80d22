package streamgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Shape of the generated follow streams: every run of a workflow is
// FollowRunLines lines (task_started, 8 task_progress, task_updated,
// task_notification) with 4 agents in 2 phases.
const (
	FollowRunLines = 11
	FollowStepMS   = 20 // virtual time between two lines of a run
)

// followAgents are the agents of every generated run: label, phase, and
// the steps (1–8, one per task_progress line) at which each starts and
// ends.
var followAgents = []struct {
	label      string
	phase      int
	start, end int
}{
	{"reader:alpha", 1, 1, 3},
	{"reader:beta", 1, 2, 4},
	{"summarize", 2, 5, 7},
	{"check", 2, 6, 8},
}

// followPhases are the phase titles, by index − 1.
var followPhases = []string{"Gather", "Summarize"}

// FollowLine appends line seq of generated file `file` to buf. Lines come
// in workflow runs of FollowRunLines (task_started, a task_progress
// snapshot per agent start or end, task_updated, task_notification), with
// times on a virtual clock that starts at epochMS (Unix ms: the harness's
// simulate epoch), so the files are the same on every run; every fourth run
// fails (its last agent errors).
func FollowLine(buf []byte, epochMS int64, file, seq int) []byte {
	run, k := seq/FollowRunLines, seq%FollowRunLines
	taskID := fmt.Sprintf("bench-f%03d-r%06d", file, run)
	session := fmt.Sprintf("bench-session-%03d", file)
	uuid := fmt.Sprintf("%08x-0000-4000-8000-%012x", file, seq)
	failed := run%4 == 3
	t0 := epochMS + int64(seq-k)*FollowStepMS
	at := func(step int) int64 { return t0 + int64(step)*FollowStepMS }
	status := "completed"
	if failed {
		status = "failed"
	}
	switch {
	case k == 0:
		return fmt.Appendf(buf, `{"type":"system","subtype":"task_started","task_id":%q,"tool_use_id":"call_%s","description":"Benchmark follow workflow","task_type":"local_workflow","workflow_name":"bench-follow","uuid":%q,"session_id":%q}`+"\n",
			taskID, taskID, uuid, session)
	case k <= 8:
		buf = fmt.Appendf(buf, `{"type":"system","subtype":"task_progress","task_id":%q,"tool_use_id":"call_%s","description":"step %d","usage":{"total_tokens":%d,"tool_uses":%d,"duration_ms":%d},"workflow_progress":[`,
			taskID, taskID, k, 600*k, k/4, k*FollowStepMS)
		for i, p := range followPhases {
			buf = fmt.Appendf(buf, `{"type":"workflow_phase","index":%d,"title":%q},`, i+1, p)
		}
		for i, a := range followAgents {
			if a.start > k {
				continue
			}
			state := "start"
			if a.end <= k {
				state = "done"
				if failed && i == len(followAgents)-1 {
					state = "error"
				}
			}
			buf = fmt.Appendf(buf, `{"type":"workflow_agent","index":%d,"agentId":"v2:%016x%016x%016x%016x","state":%q,"startedAt":%d,`,
				i+1, file, run, i, seq-k, state, at(a.start))
			if a.end <= k {
				buf = fmt.Appendf(buf, `"endedAt":%d,"tokens":%d,`, at(a.end), 1000+100*i)
			}
			buf = fmt.Appendf(buf, `"label":%q,"phaseIndex":%d,"phaseTitle":%q},`, a.label, a.phase, followPhases[a.phase-1])
		}
		buf = bytes.TrimSuffix(buf, []byte(","))
		return fmt.Appendf(buf, `],"uuid":%q,"session_id":%q}`+"\n", uuid, session)
	case k == 9:
		return fmt.Appendf(buf, `{"type":"system","subtype":"task_updated","task_id":%q,"patch":{"status":%q,"end_time":%d},"uuid":%q,"session_id":%q}`+"\n",
			taskID, status, at(9), uuid, session)
	default:
		return fmt.Appendf(buf, `{"type":"system","subtype":"task_notification","task_id":%q,"tool_use_id":"call_%s","status":%q,"summary":"Dynamic workflow \"Benchmark follow workflow\" %s","usage":{"total_tokens":4800,"tool_uses":2,"duration_ms":%d},"uuid":%q,"session_id":%q}`+"\n",
			taskID, taskID, status, status, 9*FollowStepMS, uuid, session)
	}
}

// taskSubtypes are the system subtypes that make a line a task event.
var taskSubtypes = map[string]bool{"task_started": true, "task_progress": true, "task_updated": true, "task_notification": true}

// CountTaskEventsFile counts the lines and the task events of a file.
func CountTaskEventsFile(path string) (lines, events int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("count task events: %w", err)
	}
	defer f.Close()
	return CountTaskEvents(f)
}

// CountTaskEvents counts the lines of r and among them the task events:
// system lines whose subtype is one of taskSubtypes. Only the top level
// counts (an assistant text quoting such a line is no event), so a line
// that mentions a task subtype at all is decoded.
func CountTaskEvents(r io.Reader) (lines, events int64, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	marker := []byte(`"task_`)
	for sc.Scan() {
		lines++
		if !bytes.Contains(sc.Bytes(), marker) {
			continue
		}
		var l struct {
			Type    string `json:"type"`
			Subtype string `json:"subtype"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Type == "system" && taskSubtypes[l.Subtype] {
			events++
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("count task events: %w", err)
	}
	return lines, events, nil
}
