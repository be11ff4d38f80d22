package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// Field 2 holds spaces and a parenthesis: fields count from the last ')'.
	stat := "4242 (cbc (otel) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 157 43 9 11 20 0 8 0 100 0 0\n"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * time.Second; got != want { // (157 + 43) ticks of 10 ms
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 u s"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q): no error", bad)
		}
	}
}

// TestZombieCPU checks the run case's measure: the CPU read while a
// process is a zombie is all of its own (awk alone), but not that of the
// child it reaped (a shell running awk), and the process can still be
// reaped afterwards.
func TestZombieCPU(t *testing.T) {
	const burn = `awk 'BEGIN { for (i = 0; i < 3000000; i++) s += i }'`
	for _, tc := range []struct {
		name  string
		cmd   string
		ownIs bool // own CPU is the total (else it is a small part of it)
	}{
		{"own", "exec " + burn, true},
		// "; exit 0" keeps the shell from exec'ing awk in its place.
		{"child", burn + "; exit 0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("sh", "-c", tc.cmd)
			if err := cmd.Start(); err != nil {
				t.Skip("no sh:", err)
			}
			own, err := zombieCPU(cmd.Process.Pid)
			if err != nil {
				cmd.Wait()
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("reaping after zombieCPU: %v", err)
			}
			ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			all := time.Duration(ru.Utime.Nano() + ru.Stime.Nano()) // with reaped children
			t.Logf("own %v, with children %v", own, all)
			if all < 50*time.Millisecond {
				t.Skipf("awk burnt only %v: too little to tell", all)
			}
			// /proc counts in 10 ms ticks; rusage in µs.
			if d := (all - own).Abs(); tc.ownIs && d > 20*time.Millisecond {
				t.Fatalf("own CPU %v differs from rusage %v by %v", own, all, d)
			}
			if !tc.ownIs && own > all/2 {
				t.Fatalf("own CPU %v is most of the total %v: the child's CPU is in it", own, all)
			}
		})
	}
}

func TestPromSum(t *testing.T) {
	text := `# HELP cbc_otel_lines_total Lines framed from each tapped stream.
# TYPE cbc_otel_lines_total counter
cbc_otel_lines_total{source="stdout"} 1234
cbc_otel_lines_total{source="stdin"} 6
cbc_otel_lines_total_other 99
cbc_otel_lines_rejected_total{reason="invalid_json"} 3
cbc_otel_tap_dropped_bytes_total{source="stdout"} 0
cbc_otel_tap_dropped_bytes_total{source="stdin"} 0
plain_gauge 2.5e+00 1700000000000
`
	for _, tc := range []struct {
		name  string
		sum   float64
		found bool
	}{
		{"cbc_otel_lines_total", 1240, true},
		{"cbc_otel_tap_dropped_bytes_total", 0, true},
		{"plain_gauge", 2.5, true},
		{"cbc_otel_missing_total", 0, false},
	} {
		sum, found, err := promSum(strings.NewReader(text), tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if sum != tc.sum || found != tc.found {
			t.Errorf("%s: got %v %v, want %v %v", tc.name, sum, found, tc.sum, tc.found)
		}
	}
	if _, _, err := promSum(strings.NewReader("x{a=\"b\"} notanumber\n"), "x"); err == nil {
		t.Error("a bad value gave no error")
	}
}

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
	lines, events, err := countTaskEvents(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if lines != 8 || events != 4 {
		t.Fatalf("got %d lines, %d events; want 8, 4", lines, events)
	}
}

// TestFollowLine checks the generated follow streams: every line one JSON
// task event, runs of followRunLines in protocol order, agents that only
// move forward, and every fourth run failed.
func TestFollowLine(t *testing.T) {
	var all bytes.Buffer
	var buf []byte
	const runs = 4
	for seq := range runs * followRunLines {
		buf = followLine(buf[:0], 7, seq)
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
		run, k := seq/followRunLines, seq%followRunLines
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
	lines, events, err := countTaskEvents(&all)
	if err != nil {
		t.Fatal(err)
	}
	if lines != runs*followRunLines || events != lines {
		t.Fatalf("%d lines, %d task events; want %d of both", lines, events, runs*followRunLines)
	}
}

func TestAddCompared(t *testing.T) {
	bins := []cpuBin{{name: "new"}, {name: "baseline abc"}}
	rep := &report{}
	addCompared(rep, bins, "cpu", "replay", "µs", "%.2f", [][]float64{{1, 3, 2}, {4, 4}}, "≤ 2 µs", func(v float64) bool { return v <= 2 })
	if len(rep.rows) != 3 {
		t.Fatalf("rows: %+v", rep.rows)
	}
	if r := rep.rows[0]; r.value != "2.00 µs (1.00–3.00)" || r.verdict != "meets" {
		t.Errorf("new row: %+v", r)
	}
	if r := rep.rows[1]; r.name != "replay, baseline abc" || r.value != "4.00 µs (4.00–4.00)" || r.target != "" {
		t.Errorf("baseline row: %+v", r)
	}
	if r := rep.rows[2]; r.value != "0.50" {
		t.Errorf("ratio row: %+v", r)
	}
	rep = &report{}
	addCompared(rep, bins[:1], "cpu", "run", "µs", "%.2f", [][]float64{nil}, "≤ 10 µs", func(v float64) bool { return v <= 10 })
	if len(rep.rows) != 1 || rep.rows[0].verdict != "" || !strings.Contains(rep.rows[0].value, "no valid run") {
		t.Errorf("no valid run: %+v", rep.rows)
	}
}

func TestIsPrefix(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	long := write("long", "a\nb\nc\n")
	for _, tc := range []struct {
		short string
		want  bool
	}{{"a\nb\n", true}, {"", true}, {"a\nc\n", false}, {"a\nb\nc\nd\n", false}} {
		got, err := isPrefix(write("short", tc.short), long)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("isPrefix(%q) = %v, want %v", tc.short, got, tc.want)
		}
	}
}
