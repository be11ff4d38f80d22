package streamgen

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestCountTaskEvents(t *testing.T) {
	in := strings.Join([]string{
		`{"type":"system","subtype":"task_started","task_id":"a"}`,
		`{"type":"system","subtype":"init"}`,
		`{"subtype":"task_progress","type":"system","task_id":"a"}`,
		`{"type":"assistant","message":{"content":[{"type":"text","text":"{\"type\":\"system\",\"subtype\":\"task_progress\"}"}]}}`,
		`{"type":"system","subtype":"task_updated","task_id":"a"}`,
		`{"type":"system","subtype":"task_notification","task_id":"a","status":"completed"}`,
		`not json "task_started"`,
		`{"type":"user","subtype":"task_started"}`,
	}, "\n") + "\n"
	lines, events, err := CountTaskEvents(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if lines != 8 || events != 4 {
		t.Fatalf("got %d lines, %d events; want 8, 4", lines, events)
	}
}

// TestFollowLine checks the generated follow streams: every line one JSON
// task event, runs of FollowRunLines in protocol order, agents that only
// move forward, and every fourth run failed.
func TestFollowLine(t *testing.T) {
	var all bytes.Buffer
	var buf []byte
	const runs = 4
	for seq := range runs * FollowRunLines {
		buf = FollowLine(buf[:0], 1785000000000, 7, seq) // the harness's simulate epoch
		if bytes.Count(buf, []byte("\n")) != 1 || buf[len(buf)-1] != '\n' {
			t.Fatalf("line %d is not one line: %q", seq, buf)
		}
		var l struct {
			Type     string `json:"type"`
			Subtype  string `json:"subtype"`
			TaskID   string `json:"task_id"`
			Status   string `json:"status"`
			Progress []struct {
				Type    string `json:"type"`
				State   string `json:"state"`
				Started int64  `json:"startedAt"`
				Ended   int64  `json:"endedAt"`
			} `json:"workflow_progress"`
		}
		if err := json.Unmarshal(buf, &l); err != nil {
			t.Fatalf("line %d: %v: %s", seq, err, buf)
		}
		run, k := seq/FollowRunLines, seq%FollowRunLines
		want := map[bool]string{true: "task_progress"}[k >= 1 && k <= 8]
		switch k {
		case 0:
			want = "task_started"
		case 9:
			want = "task_updated"
		case 10:
			want = "task_notification"
		}
		if l.Type != "system" || l.Subtype != want {
			t.Fatalf("line %d: %s/%s, want system/%s", seq, l.Type, l.Subtype, want)
		}
		if wantID := "bench-f007-r00000" + string(rune('0'+run)); l.TaskID != wantID {
			t.Fatalf("line %d: task_id %q, want %q", seq, l.TaskID, wantID)
		}
		if k == 10 {
			if wantStatus := map[bool]string{true: "failed", false: "completed"}[run == 3]; l.Status != wantStatus {
				t.Fatalf("run %d ended %q, want %q", run, l.Status, wantStatus)
			}
		}
		agents := 0
		for _, p := range l.Progress {
			if p.Type != "workflow_agent" {
				continue
			}
			agents++
			if p.Started == 0 || (p.State != "start") != (p.Ended != 0) {
				t.Fatalf("line %d: agent %+v", seq, p)
			}
		}
		started := 0
		for _, a := range followAgents {
			if k >= 1 && k <= 8 && a.start <= k {
				started++
			}
		}
		if agents != started {
			t.Fatalf("line %d: %d agents in the snapshot, %d started", seq, agents, started)
		}
		all.Write(buf)
	}
	lines, events, err := CountTaskEvents(&all)
	if err != nil {
		t.Fatal(err)
	}
	if lines != runs*FollowRunLines || events != lines {
		t.Fatalf("%d lines, %d task events; want %d of both", lines, events, runs*FollowRunLines)
	}
}
