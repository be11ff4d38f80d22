// End-to-end tests of the whole pipeline through the built binary:
// `run -- cbc-otel simulate` driven like an SDK (interrupt included) must
// pass every byte and reconstruct exactly the runs the simulator played;
// `demo` must show every scenario with its status.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestE2ERunSimulateReconstructsEveryRun(t *testing.T) {
	for _, dialect := range []string{"cbc", "claude"} {
		t.Run(dialect, func(t *testing.T) {
			dir := t.TempDir()
			expect, record := filepath.Join(dir, "expect.ndjson"), filepath.Join(dir, "record.ndjson")
			summary, prom := filepath.Join(dir, "summary.ndjson"), filepath.Join(dir, "metrics.prom")
			cmd := exec.Command(wrapperBin, "run", "--web.listen-address=", "--tracker.grace=1s",
				"--tracker.capture-errors", "--summary.file", summary, "--metrics.file", prom, "--",
				wrapperBin, "simulate", "--dialect", dialect, "--speed", "0.05", "--noise", "3000",
				"--expect", expect, "--record", record)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			send := func(v any) {
				b, _ := json.Marshal(v)
				if _, err := stdin.Write(append(b, '\n')); err != nil {
					t.Fatalf("writing to the wrapper: %v", err)
				}
			}
			type obj = map[string]any
			send(obj{"type": "control_request", "request_id": "init", "request": obj{"subtype": "initialize"}})

			// Read the wrapper's stdout as an SDK would, keeping every byte.
			var got bytes.Buffer
			lines := make(chan map[string]any, 1024)
			readDone := make(chan error, 1)
			go func() {
				br := bufio.NewReader(io.TeeReader(stdout, &got))
				for {
					l, err := br.ReadBytes('\n')
					if len(l) > 0 {
						var m map[string]any
						if json.Unmarshal(l, &m) == nil {
							lines <- m
						}
					}
					if err != nil {
						close(lines)
						readDone <- err
						return
					}
				}
			}()
			deadline := time.After(60 * time.Second)
			next := func() map[string]any {
				select {
				case m, ok := <-lines:
					if !ok {
						t.Fatalf("wrapper stdout ended early; stderr:\n%s", stderr.String())
					}
					return m
				case <-deadline:
					t.Fatalf("timed out; stderr:\n%s", stderr.String())
				}
				return nil
			}
			session := ""
			for i, sc := range []string{"completed", "failed", "stopped", "cached", "mixed"} {
				send(obj{"type": "user", "message": obj{"role": "user", "content": fmt.Sprintf("[[SCENARIO:%s]] turn %d", sc, i)}})
				workflow, interrupted := "", false
				for {
					m := next()
					if m["type"] != "system" {
						continue
					}
					if m["subtype"] == "init" {
						session, _ = m["session_id"].(string)
					}
					if m["subtype"] == "task_started" && m["task_type"] == "local_workflow" {
						workflow, _ = m["task_id"].(string)
					}
					if sc == "stopped" && !interrupted && m["subtype"] == "task_progress" && m["task_id"] == workflow {
						interrupted = true
						send(obj{"type": "control_request", "request_id": "stop-1", "request": obj{"subtype": "interrupt", "session_id": session, "reason": "user cancel"}})
					}
					if m["subtype"] == "task_notification" && m["task_id"] == workflow {
						if sc == "stopped" && m["status"] != "stopped" {
							t.Fatalf("interrupt through the wrapper did not stop the workflow: %v", m["status"])
						}
						break
					}
				}
			}
			stdin.Close()
			for range lines {
			}
			<-readDone
			if err := cmd.Wait(); err != nil {
				t.Fatalf("wrapper: %v; stderr:\n%s", err, stderr.String())
			}
			if stderr.Len() > 0 {
				t.Errorf("wrapper wrote to stderr at the default log level:\n%s", stderr.String())
			}

			// Byte-exact: what the SDK read is what the simulator wrote.
			rec, err := os.ReadFile(record)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), rec) {
				t.Fatalf("stdout differs from what the simulator wrote (%d vs %d bytes)", got.Len(), len(rec))
			}

			// Every run reconstructed as the simulator played it.
			sum, err := os.ReadFile(summary)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(expect)
			if err != nil {
				t.Fatal(err)
			}
			gotRuns, stats := splitSummary(t, sum)
			wantRuns, _ := splitSummary(t, want)
			if len(gotRuns) != 5+2 || !reflect.DeepEqual(gotRuns, wantRuns) {
				t.Errorf("runs differ from the simulator's record\n got: %v\nwant: %v", gotRuns, wantRuns)
			}
			if stats == nil || len(stats["rejected"].(map[string]any)) != 0 || len(stats["violations"].(map[string]any)) != 0 {
				t.Errorf("stats %v: want no rejected lines and no violations", stats)
			}
			// The interrupt seen on stdin was matched to the stopped run.
			pm, err := os.ReadFile(prom)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"cbc_interrupts_total 1", "cbc_interrupt_stop_seconds_count 1", `status="stopped",workflow=`} {
				if !bytes.Contains(pm, []byte(want)) {
					t.Errorf("metrics file lacks %q", want)
				}
			}
		})
	}
}

// splitSummary parses replay --summary.json lines: the runs, sorted by task id, and
// the stats object.
func splitSummary(t *testing.T, b []byte) (runs []map[string]any, stats map[string]any) {
	t.Helper()
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		if m["kind"] == "stats" {
			stats = m
			continue
		}
		runs = append(runs, m)
	}
	sort.Slice(runs, func(i, j int) bool { return fmt.Sprint(runs[i]["task_id"]) < fmt.Sprint(runs[j]["task_id"]) })
	return runs, stats
}

func TestE2EDemo(t *testing.T) {
	for _, dialect := range []string{"cbc", "claude"} {
		t.Run(dialect, func(t *testing.T) {
			tracesFile := filepath.Join(t.TempDir(), "traces.jsonl")
			cmd := exec.Command(wrapperBin, "demo", "--summary.json", "--simulate.dialect", dialect, "--simulate.speed", "0.05",
				"--web.listen-address=127.0.0.1:0", "--traces.file", tracesFile)
			var out, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("demo: %v\n%s", err, stderr.String())
			}
			runs, stats := splitSummary(t, out.Bytes())
			var statuses []string
			tasks := 0
			for _, r := range runs {
				if r["kind"] == "task" {
					tasks++
					continue
				}
				statuses = append(statuses, r["status"].(string))
			}
			sort.Strings(statuses)
			if want := []string{"completed", "completed", "completed", "failed", "stopped"}; !reflect.DeepEqual(statuses, want) || tasks != 2 {
				t.Errorf("demo runs: statuses %v and %d tasks, want %v and 2", statuses, tasks, want)
			}
			if stats == nil || len(stats["violations"].(map[string]any)) != 0 {
				t.Errorf("stats %v", stats)
			}
			for _, want := range []string{"up only while the demo runs; add --hold", "traces to "} {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("demo did not say where to look (%q):\n%s", want, stderr.String())
				}
			}
			if strings.Contains(stderr.String(), "http://127.0.0.1:") {
				t.Errorf("a plain demo printed URLs that are dead once it ends:\n%s", stderr.String())
			}
			tr, err := os.ReadFile(tracesFile)
			if err != nil || !bytes.Contains(tr, []byte(`"name":"invoke_workflow sim-review"`)) {
				t.Errorf("demo exported no workflow span to the traces file (%v)", err)
			}
		})
	}
}
