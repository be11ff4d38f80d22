package e2e

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
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// claudeRun is one session of the real CLI.
type claudeRun struct {
	stdout   []byte // every byte the driver read
	stderr   string
	exitCode int
	dir      string
	summary  string // files written by the wrapper (when wrapped)
	metrics  string
	traces   string
	// the workflow's task_notification as the driver saw it
	notification map[string]any
}

type claudeOpts struct {
	scenario  string // mock scenario
	wrapped   bool   // run under cbc-otel run with telemetry files
	interrupt bool   // send an interrupt once the hanging agent's request arrived
	// budget: the wrapper's --budget.max-cost-usd stops the session (its
	// interrupt and ack unseen here): done at the stopped notification.
	budget bool
	// runArgs, when set (with wrapped), replaces the wrapper's default
	// flags: `cbc-otel run RUNARGS -- cli ...`; the summary, metrics and
	// traces files are then whatever runArgs name.
	runArgs []string
	env     []string // appended to claudeEnv
	// beforeClose, when set, is called once the session is done, just
	// before the driver closes the CLI's stdin (the CLI and the wrapper are
	// still up: their live endpoints can be polled).
	beforeClose func()
}

// runClaude runs one session of the real CLI against the mock, driven over
// stream-json like an SDK would:
//
//  1. initialize control_request, then one user message carrying the
//     scenario marker;
//  2. when the main turn's result line is out, the mock's agents are
//     released (so the order of stdout never depends on scheduling);
//  3. interrupt scenario: once agent 1 is done on stdout and the hanging
//     agent's request reached the mock, an interrupt control_request;
//  4. stdin is closed after the task-notification turn's result (or, when
//     interrupted, after the stopped notification and the interrupt's
//     control_response); the CLI then exits by itself.
//
// Bounded by 90 s; the whole process group is killed on cleanup.
func runClaude(t *testing.T, bin, cli string, api *mockAnthropic, o claudeOpts) *claudeRun {
	t.Helper()
	root := t.TempDir()
	run := &claudeRun{dir: root}
	for _, d := range []string{"home", "config", "work", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cliArgs := []string{"-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
		"--allowedTools", "Workflow"}
	var cmd *exec.Cmd
	switch {
	case o.wrapped && o.runArgs != nil:
		args := append(append([]string{"run"}, o.runArgs...), "--", cli)
		cmd = exec.Command(bin, append(args, cliArgs...)...)
	case o.wrapped:
		run.summary, run.metrics, run.traces = filepath.Join(root, "summary.ndjson"), filepath.Join(root, "metrics.prom"), filepath.Join(root, "traces.jsonl")
		args := []string{"run", "--web.listen-address=", "--tracker.grace=1s", "--tracker.capture-errors", "--summary.file", run.summary,
			"--metrics.file", run.metrics, "--traces.file", run.traces, "--", cli}
		cmd = exec.Command(bin, append(args, cliArgs...)...)
	default:
		cmd = exec.Command(cli, cliArgs...)
	}
	cmd.Dir = filepath.Join(root, "work")
	cmd.Env = append(claudeEnv(root, api.URL), o.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &promLockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
	})
	var got bytes.Buffer
	type line struct {
		raw []byte
		m   map[string]any
	}
	lines := make(chan line, 4096)
	go func() {
		defer close(lines)
		br := bufio.NewReaderSize(io.TeeReader(stdout, &got), 1<<20)
		for {
			l, err := br.ReadBytes('\n')
			if len(l) > 0 {
				var m map[string]any
				json.Unmarshal(l, &m)
				lines <- line{l, m}
			}
			if err != nil {
				return
			}
		}
	}()
	send := func(v any) {
		b, _ := json.Marshal(v)
		if _, err := stdin.Write(append(b, '\n')); err != nil {
			t.Errorf("writing to the CLI: %v", err)
		}
	}
	type obj = map[string]any
	send(obj{"type": "control_request", "request_id": "init", "request": obj{"subtype": "initialize", "hooks": obj{}, "capabilities": obj{}, "hasPrompt": true}})
	send(obj{"type": "user", "message": obj{"role": "user", "content": "[[SCENARIO:" + o.scenario + "]] Please run the workflow."}, "parent_tool_use_id": nil, "session_id": ""})

	// The hanging agent's request reaching the mock, as a channel.
	var hang chan struct{}
	if o.interrupt {
		hang = make(chan struct{})
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			deadline := time.NewTimer(60 * time.Second)
			defer deadline.Stop()
			for {
				api.mu.Lock()
				seen := false
				for _, r := range api.reqs {
					seen = seen || r.Reply == "hang"
				}
				ch := make(chan struct{})
				api.waiters = append(api.waiters, ch)
				api.mu.Unlock()
				if seen {
					close(hang)
					return
				}
				select {
				case <-ch:
				case <-stop:
					return
				case <-deadline.C:
					return
				}
			}
		}()
	}

	deadline := time.NewTimer(90 * time.Second)
	defer deadline.Stop()
	session, results, notified, acked, firstDone, interrupted, closed := "", 0, false, false, false, false, false
	hangSeen := hang
	for l := range claudeChanUntil(lines, deadline.C, func() {
		t.Fatalf("CLI session not done within 90 s; stderr:\n%s\nstdout so far:\n%s", stderr.String(), got.String())
	}) {
		m := l.m
		if m == nil {
			t.Errorf("stdout line is not a JSON object: %s", sdkTrunc(l.raw, 300))
			continue
		}
		switch {
		case m["type"] == "system" && m["subtype"] == "init":
			session, _ = m["session_id"].(string)
		case m["type"] == "system" && m["subtype"] == "task_notification":
			notified = true
			run.notification = m
		case m["type"] == "control_response":
			if r, _ := m["response"].(map[string]any); r["request_id"] == "stop-1" {
				acked = true
			}
		case m["type"] == "result":
			results++
			if results == 1 {
				api.releaseAgents()
			}
		case m["type"] == "system" && m["subtype"] == "task_progress":
			if wp, ok := m["workflow_progress"].([]any); ok {
				for _, e := range wp {
					if a, _ := e.(map[string]any); a["type"] == "workflow_agent" && sdkNum(a["index"]) == 1 && a["state"] == "done" {
						firstDone = true
					}
				}
			}
		}
		if o.interrupt && !interrupted && firstDone {
			if hangSeen != nil {
				select {
				case <-hangSeen:
					hangSeen = nil
				case <-deadline.C:
					t.Fatalf("the hanging agent's request never reached the mock; served: %+v", api.requests())
				}
			}
			interrupted = true
			send(obj{"type": "control_request", "request_id": "stop-1", "request": obj{"subtype": "interrupt", "session_id": session, "reason": "user cancel"}})
		}
		done := notified && results >= 2
		if o.interrupt {
			done = notified && acked && results >= 1
		}
		if o.budget {
			done = notified && results >= 1
		}
		if done && !closed {
			closed = true
			if o.beforeClose != nil {
				o.beforeClose()
			}
			stdin.Close()
		}
	}
	cmd.Wait()
	close(exited)
	run.stdout = got.Bytes()
	run.stderr = stderr.String()
	run.exitCode = cmd.ProcessState.ExitCode()
	if !closed {
		t.Errorf("the CLI's stdout ended before the session was done (results %d, notified %v, acked %v); stderr:\n%s", results, notified, acked, run.stderr)
	}
	return run
}

// chanUntil yields the values of c until it closes; at the deadline it
// calls onTimeout (which must not return normally, e.g. t.Fatalf).
func claudeChanUntil[T any](c <-chan T, deadline <-chan time.Time, onTimeout func()) func(func(T) bool) {
	return func(yield func(T) bool) {
		for {
			select {
			case v, ok := <-c:
				if !ok || !yield(v) {
					return
				}
			case <-deadline:
				onTimeout()
				return
			}
		}
	}
}

func sdkTrunc(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// claudeEnv is the offline environment of the CLI: the mock API, no
// nonessential traffic, throwaway HOME and config dir.
func claudeEnv(root, apiURL string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + filepath.Join(root, "home"),
		"CLAUDE_CONFIG_DIR=" + filepath.Join(root, "config"),
		"TMPDIR=" + filepath.Join(root, "tmp"),
		"ANTHROPIC_BASE_URL=" + apiURL,
		"ANTHROPIC_API_KEY=sk-ant-mock-e2e",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_AUTOUPDATER=1",
		"NO_PROXY=127.0.0.1,localhost",
	}
	return env
}

// ---- the normaliser ----
//
// Two sessions of the real CLI with the same stdin against the same mock
// differ only in what is minted per process or read from a clock. The
// normaliser works on each stdout line's bytes (key order and formatting are
// kept, so apart from the substitutions below the comparison is byte for
// byte) and replaces:
//
//   - the session's temporary root (cwd, HOME, CLAUDE_CONFIG_DIR, TMPDIR
//     live under it), and the project-dir spelling of the cwd Claude Code
//     uses under ~/.claude/projects (every non-alphanumeric byte → '-'),
//     by <root> / <cwd>;
//   - UUIDs (session_id, uuid, ...) by <uuid>;
//   - ids minted per run, numbered by first appearance in the stream:
//     task_id (<task1>), run_id (<run1>), workflow agentId (<agent1>) and the
//     workflow run dir id wf_XXXXXXXX-N (<wf1>), wherever they occur (tool
//     result text, output_file paths, origin.runId);
//   - clock readings: ISO-8601 timestamps (<ts>) and the integer values of
//     duration_ms, duration_api_ms, durationMs, ttft_ms, ttft_stream_ms,
//     time_to_request_ms, first_content_frame_ms, startedAt, endedAt,
//     queuedAt, lastProgressAt, end_time, total_paused_ms and pid (→ 0);
//   - the messaging socket name cc-socks/<pid>.sock.
//
// task_progress lines are taken out of the sequence: Claude Code emits them
// on a timer and on agent transitions, so how many intermediate snapshots
// (and usage-only ticks) a run prints depends on scheduling even without
// the wrapper. They are compared separately: the LAST workflow_progress
// snapshot of each task, normalised as above, must be identical. Everything
// else (control_response, system/init, assistant, user, result,
// background_tasks_changed, task_started/updated/notification) must match
// line for line, in order.

var (
	claudeUUIDRe   = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	claudeISORe    = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	claudeClockRe  = regexp.MustCompile(`"(duration_ms|duration_api_ms|durationMs|ttft_ms|ttft_stream_ms|time_to_request_ms|first_content_frame_ms|startedAt|endedAt|queuedAt|lastProgressAt|end_time|total_paused_ms|pid)":\d+`)
	claudeSockRe   = regexp.MustCompile(`cc-socks/\d+\.sock`)
	claudeWfRe     = regexp.MustCompile(`wf_[0-9a-f]{8}-[0-9a-z]+`)
	claudeTaskRe   = regexp.MustCompile(`"task_id":"([^"]+)"`)
	claudeRunRe    = regexp.MustCompile(`"run_id":"([^"]+)"`)
	claudeAgentRe  = regexp.MustCompile(`"agentId":"([^"]+)"`)
	claudeNonAlnum = regexp.MustCompile(`[^A-Za-z0-9]`)
)

// normalisedStream is a session's stdout after normalisation.
type normalisedStream struct {
	lines    []string          // every line but task_progress, in order
	progress map[string]string // task → last workflow_progress snapshot
	frames   int               // task_progress lines left out
}

func normaliseClaude(t *testing.T, r *claudeRun) normalisedStream {
	t.Helper()
	text := string(r.stdout)
	cwd := filepath.Join(r.dir, "work")
	text = strings.ReplaceAll(text, claudeNonAlnum.ReplaceAllString(cwd, "-"), "<cwd>")
	text = strings.ReplaceAll(text, r.dir, "<root>")
	ids := map[string]string{}
	number := func(re *regexp.Regexp, name string, group int) {
		n := 0
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			if _, ok := ids[m[group]]; !ok {
				n++
				ids[m[group]] = fmt.Sprintf("<%s%d>", name, n)
			}
		}
	}
	number(claudeTaskRe, "task", 1)
	number(claudeRunRe, "run", 1)
	number(claudeAgentRe, "agent", 1)
	number(claudeWfRe, "wf", 0)
	// Longest first, so that no id is replaced inside a longer one.
	keys := mockSortedKeys(ids)
	sort.SliceStable(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	for _, k := range keys {
		text = strings.ReplaceAll(text, k, ids[k])
	}
	text = claudeUUIDRe.ReplaceAllString(text, "<uuid>")
	text = claudeISORe.ReplaceAllString(text, "<ts>")
	text = claudeClockRe.ReplaceAllString(text, `"$1":0`)
	text = claudeSockRe.ReplaceAllString(text, "cc-socks/<pid>.sock")

	out := normalisedStream{progress: map[string]string{}}
	for _, l := range strings.SplitAfter(text, "\n") {
		if l == "" {
			continue
		}
		var m struct {
			Type     string          `json:"type"`
			Subtype  string          `json:"subtype"`
			TaskID   string          `json:"task_id"`
			Progress json.RawMessage `json:"workflow_progress"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("stdout line is not JSON (%v): %s", err, sdkTrunc([]byte(l), 300))
		}
		if m.Type == "system" && m.Subtype == "task_progress" {
			out.frames++
			if len(m.Progress) > 0 {
				out.progress[m.TaskID] = string(m.Progress)
			}
			continue
		}
		out.lines = append(out.lines, l)
	}
	return out
}

// compareStreams fails with the first differing line.
func compareStreams(t *testing.T, direct, wrapped normalisedStream) {
	t.Helper()
	n := min(len(direct.lines), len(wrapped.lines))
	for i := 0; i < n; i++ {
		if direct.lines[i] != wrapped.lines[i] {
			t.Errorf("stdout line %d differs after normalisation:\n without the wrapper: %s\n    with the wrapper: %s",
				i+1, sdkTrunc([]byte(direct.lines[i]), 2000), sdkTrunc([]byte(wrapped.lines[i]), 2000))
			return
		}
	}
	if len(direct.lines) != len(wrapped.lines) {
		t.Errorf("stdout has %d lines (task_progress aside) without the wrapper, %d with it", len(direct.lines), len(wrapped.lines))
	}
	if !reflect.DeepEqual(direct.progress, wrapped.progress) {
		t.Errorf("last workflow_progress snapshots differ:\n without: %v\n    with: %v", direct.progress, wrapped.progress)
	}
	if len(direct.progress) == 0 {
		t.Errorf("no workflow_progress snapshot at all")
	}
}

// ---- the tests ----

// claudeWant is what a scenario must reconstruct to.
var claudeWant = map[string]struct {
	status string
	agents []string // final state per agent, in index order ("" = never ran)
}{
	"complete":  {"completed", []string{"done", "done", "done", "done"}},
	"fail":      {"failed", []string{"done", "error", "done"}},
	"interrupt": {"stopped", []string{"done", "error", ""}},
}

// TestClaudeCodeUnderWrapper runs the real Claude Code CLI (the native binary
// of @anthropic-ai/claude-agent-sdk-linux-x64) offline against the mock
// Messages API, once as is and once under `cbc-otel run` with every
// telemetry output on, and checks that (1) the stdout streams are identical
// after normalisation, and (2) the reconstructed runs, metrics and traces
// match the workflow the mock drove: phases, agents, states, statuses,
// tokens.
func TestClaudeCodeUnderWrapper(t *testing.T) {
	cli := claudeBin(t)
	bin := promBuildCLI(t)
	for _, sc := range []string{"complete", "fail", "interrupt"} {
		t.Run(sc, func(t *testing.T) {
			o := claudeOpts{scenario: sc, interrupt: sc == "interrupt"}
			apiDirect := startMockAnthropic(t, true)
			direct := runClaude(t, bin, cli, apiDirect, o)
			o.wrapped = true
			api := startMockAnthropic(t, true)
			wrapped := runClaude(t, bin, cli, api, o)
			if t.Failed() {
				t.FailNow()
			}
			if direct.exitCode != 0 || wrapped.exitCode != 0 {
				t.Fatalf("exit codes: %d without the wrapper, %d with it; stderr:\n%s\n---\n%s", direct.exitCode, wrapped.exitCode, direct.stderr, wrapped.stderr)
			}
			if direct.stderr != wrapped.stderr {
				t.Errorf("stderr differs:\n without: %q\n    with: %q", direct.stderr, wrapped.stderr)
			}
			compareStreams(t, normaliseClaude(t, direct), normaliseClaude(t, wrapped))
			if !reflect.DeepEqual(requestShape(apiDirect.requests()), requestShape(api.requests())) {
				t.Errorf("the two sessions made different API requests:\n without: %v\n    with: %v", requestShape(apiDirect.requests()), requestShape(api.requests()))
			}
			checkClaudeRun(t, sc, wrapped, api)
			if d := os.Getenv("CBC_E2E_KEEP"); d != "" {
				for _, f := range []string{wrapped.summary, wrapped.metrics, wrapped.traces} {
					b, _ := os.ReadFile(f)
					os.WriteFile(filepath.Join(d, sc+"-"+filepath.Base(f)), b, 0o644)
				}
				os.WriteFile(filepath.Join(d, sc+"-stdout.ndjson"), wrapped.stdout, 0o644)
			}
		})
	}
}

// requestShape is the multiset of (kind, agent, reply, status) the mock served.
func requestShape(rs []mockRequest) map[string]int {
	out := map[string]int{}
	for _, r := range rs {
		out[fmt.Sprint(r.Kind, "/", r.Agent, "/", r.Reply, "/", r.Status)]++
	}
	return out
}

// checkClaudeRun compares the wrapper's summary with the mock's scenario and
// what it served, then the metrics and traces with the summary.
func checkClaudeRun(t *testing.T, sc string, r *claudeRun, api *mockAnthropic) {
	t.Helper()
	scen := api.scenarios[sc]
	want := claudeWant[sc]
	runs, stats := sdkSummaryRuns(t, r.summary)
	if len(runs) != 1 {
		t.Fatalf("summary has %d runs, want 1: %v", len(runs), runs)
	}
	run := runs[0]
	// Claude Code 2.1.328 shows an agent that is inside a tool call as
	// state "progress" (when a snapshot happens to fall in that window), a
	// state PROTOCOL.md does not list; cbc-otel counts such a row as an
	// unknown_status violation. Tolerated here up to the number of such rows
	// (and reported), everything else must be clean.
	// Claude Code shows agents inside a tool call with state "progress",
	// which PROTOCOL.md does not list; cbc-otel reads it as live. Nothing
	// else may be out of the ordinary either.
	if stats == nil || len(stats["rejected"].(map[string]any)) != 0 || len(stats["violations"].(map[string]any)) != 0 {
		t.Errorf("stats %v: want no rejected lines and no violations (agent states outside the protocol seen: %v)", stats, oddAgentStates(r.stdout))
	}
	if run["kind"] != "workflow" || run["workflow"] != scen.Workflow || run["status"] != want.status {
		t.Errorf("run %v %q %v, want workflow %q %v", run["kind"], run["workflow"], run["status"], scen.Workflow, want.status)
	}
	if run["task_id"] != r.notification["task_id"] || run["run_id"] != r.notification["run_id"] || run["session_id"] != r.notification["session_id"] {
		t.Errorf("run ids %v/%v/%v, the notification says %v/%v/%v", run["task_id"], run["run_id"], run["session_id"],
			r.notification["task_id"], r.notification["run_id"], r.notification["session_id"])
	}
	if sdkNum(run["start"]) <= 0 || sdkNum(run["end"]) < sdkNum(run["start"]) || sdkNum(run["duration_ms"]) != sdkNum(run["end"])-sdkNum(run["start"]) {
		t.Errorf("run times start %v end %v duration %v", run["start"], run["end"], run["duration_ms"])
	}
	var titles []string
	for _, p := range sdkList(run["phases"]) {
		titles = append(titles, fmt.Sprint(p["title"]))
		if sdkNum(p["index"]) != int64(len(titles)) {
			t.Errorf("phase %v has index %v", p["title"], p["index"])
		}
	}
	if !reflect.DeepEqual(titles, scen.Phases) {
		t.Errorf("phases %v, want %v (meta.phases)", titles, scen.Phases)
	}

	// Agents: label, phase, state, tokens against the mock.
	served := api.agentServed()
	lastInput := map[string]int{}
	for _, q := range api.requests() {
		if q.Kind == "agent" && q.Status == 200 && q.Reply != "hang" {
			lastInput[q.Agent] = q.Input
		}
	}
	agents := map[int64]map[string]any{}
	for _, a := range sdkList(run["agents"]) {
		agents[sdkNum(a["index"])] = a
	}
	var total int64
	for i, ma := range scen.Agents {
		a, seen := agents[int64(i+1)]
		wantState := want.agents[i]
		if wantState == "" {
			if _, ok := served[ma.Name]; ok {
				t.Errorf("agent %s should never have run, the mock served it %+v", ma.Name, served[ma.Name])
			}
			if seen && (a["state"] == "done" || a["state"] == "error") {
				t.Errorf("agent %d (%s) never ran but ended %v", i+1, ma.Name, a["state"])
			}
			continue
		}
		if !seen {
			t.Errorf("agent %d (%s) missing from the summary", i+1, ma.Name)
			continue
		}
		phaseIdx := int64(0)
		for j, p := range scen.Phases {
			if p == ma.Phase {
				phaseIdx = int64(j + 1)
			}
		}
		if a["label"] != ma.Label || sdkNum(a["phaseIndex"]) != phaseIdx || a["state"] != wantState || a["cached"] != false {
			t.Errorf("agent %d: %v; want label %q phase %d state %s", i+1, a, ma.Label, phaseIdx, wantState)
		}
		if s, _ := a["agentId"].(string); s == "" {
			t.Errorf("agent %d has no agentId", i+1)
		}
		switch {
		case sdkNum(a["start"]) <= 0:
			t.Errorf("agent %d has no start", i+1)
		case ma.Mode == "hang" && sdkNum(a["end"]) == 0:
			// Claude Code's stop flip carries neither endedAt nor
			// durationMs: the summary says 0, unknown (its span ends
			// with the run).
			t.Logf("the stopped agent %d has no end time in the stream (end 0 in the summary)", i+1)
		case sdkNum(a["end"]) < sdkNum(a["start"]):
			t.Errorf("agent %d times %v..%v", i+1, a["start"], a["end"])
		}
		// Claude Code 2.1.328 counts an agent's tokens as the usage of its
		// LAST response as of message_start: input (+ cache) tokens plus the
		// output_tokens of message_start (1 on the wire), not the sum over
		// the agent's requests nor message_delta's final output count.
		wantTokens := int64(0)
		if wantState == "done" {
			wantTokens = int64(lastInput[ma.Name] + 1)
		}
		if sdkNum(a["tokens"]) != wantTokens {
			t.Errorf("agent %d (%s): tokens %v, want %d (served %+v)", i+1, ma.Name, a["tokens"], wantTokens, served[ma.Name])
		}
		total += sdkNum(a["tokens"])
		switch {
		case ma.Mode == "fail":
			if e, _ := a["error"].(string); !strings.Contains(e, "400") || !strings.Contains(e, "agent "+ma.Name+" is rejected") {
				t.Errorf("agent %d error %q, want the mock's HTTP 400 message", i+1, e)
			}
		case ma.Mode == "hang":
			if e, _ := a["error"].(string); e != "Stopped because the workflow was stopped" {
				t.Errorf("agent %d error %q, want the stop flip", i+1, e)
			}
		}
	}
	if sdkNum(run["tokens"]) != total {
		t.Errorf("run tokens %v, want the sum of its agents' %d", run["tokens"], total)
	}
	wantTools := int64(0)
	for _, ma := range scen.Agents {
		if ma.Mode == "bash" {
			wantTools++
		}
	}
	if sdkNum(run["tool_uses"]) != wantTools {
		t.Errorf("run tool_uses %v, want %d", run["tool_uses"], wantTools)
	}
	sdkCheckTelemetry(t, runs, r.metrics, r.traces)
	met := sdkMetricsFile(t, r.metrics)
	if sc == "interrupt" {
		if met["cbc_interrupts_total"] != 1 {
			t.Errorf("metrics: cbc_interrupts_total %v, want 1", met["cbc_interrupts_total"])
		}
		sdkCheckInterruptLatency(t, met, 1)
	}
}

// oddAgentStates lists the workflow_agent states in stdout that PROTOCOL.md
// does not define (start, done, error, cached), one per row.
func oddAgentStates(stdout []byte) []string {
	var out []string
	for _, l := range bytes.Split(stdout, []byte("\n")) {
		var m struct {
			Progress []struct {
				Type  string `json:"type"`
				State string `json:"state"`
			} `json:"workflow_progress"`
		}
		if json.Unmarshal(l, &m) != nil {
			continue
		}
		for _, e := range m.Progress {
			switch e.State {
			case "start", "done", "error", "cached":
			default:
				if e.Type == "workflow_agent" {
					out = append(out, e.State)
				}
			}
		}
	}
	return out
}
