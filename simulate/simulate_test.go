package simulate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/internal/golden"
)

const (
	testEpoch = 1796205994000
	initLine  = `{"type":"control_request","request_id":"init","request":{"subtype":"initialize","hooks":{},"capabilities":{},"hasPrompt":true}}`
)

func userLine(text string) string {
	b, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}, "parent_tool_use_id": nil, "session_id": ""})
	return string(b)
}

// event is the part of an output line the tests look at.
type event struct {
	Type      string          `json:"type"`
	Subtype   string          `json:"subtype"`
	TaskID    string          `json:"task_id"`
	RunID     *string         `json:"run_id"`
	TaskType  string          `json:"task_type"`
	Status    string          `json:"status"`
	Prompt    string          `json:"prompt"`
	Usage     json.RawMessage `json:"usage"`
	Patch     map[string]any  `json:"patch"`
	Progress  []row           `json:"workflow_progress"`
	HasProg   bool            `json:"-"`
	Response  json.RawMessage `json:"response"`
	SessionID string          `json:"session_id"`
	raw       string
}

// runKey names the run of a task_* line: task_id/run_id (run_id empty
// for cbc).
func (e event) runKey() string {
	if e.RunID == nil {
		return e.TaskID + "/"
	}
	return e.TaskID + "/" + *e.RunID
}

type row struct {
	Type       string  `json:"type"`
	Index      int     `json:"index"`
	AgentID    *string `json:"agentId"`
	State      string  `json:"state"`
	StartedAt  *int64  `json:"startedAt"`
	Cached     bool    `json:"cached"`
	Error      string  `json:"error"`
	EndedWith  string  `json:"endedWithRun"`
	PhaseIndex int     `json:"phaseIndex"`
}

func parseLines(t *testing.T, out []byte) []event {
	t.Helper()
	var evs []event
	for i, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		var e event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i+1, err, line)
		}
		var probe map[string]json.RawMessage
		_ = json.Unmarshal([]byte(line), &probe)
		_, e.HasProg = probe["workflow_progress"]
		e.raw = line
		evs = append(evs, e)
	}
	return evs
}

func runSim(t *testing.T, cfg Config, lines ...string) (out, expect []byte) {
	t.Helper()
	var o, x bytes.Buffer
	cfg.Expect = &x
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := Run(ctx, cfg, strings.NewReader(strings.Join(lines, "\n")+"\n"), &o); err != nil {
		t.Fatalf("Run: %v", err)
	}
	return o.Bytes(), x.Bytes()
}

type goldenCase struct {
	scenario       string
	interruptAfter int
}

func goldenCases() []goldenCase {
	var cs []goldenCase
	for _, s := range Scenarios() {
		cs = append(cs, goldenCase{scenario: s})
	}
	// The stopped scenario without a client would just wait out its stall;
	// the self-interrupt shows the stop path deterministically.
	return append(cs, goldenCase{scenario: ScenarioStopped, interruptAfter: 2},
		goldenCase{scenario: ScenarioManyAgents, interruptAfter: 10},
		goldenCase{scenario: ScenarioMixed, interruptAfter: 1})
}

func (c goldenCase) name(dialect string) string {
	n := c.scenario + "-" + dialect
	if c.interruptAfter > 0 {
		n += fmt.Sprintf("-interrupt%d", c.interruptAfter)
	}
	return n
}

func TestScenariosGolden(t *testing.T) {
	for _, c := range goldenCases() {
		for _, d := range []string{DialectCBC, DialectClaude} {
			t.Run(c.name(d), func(t *testing.T) {
				cfg := Config{Scenario: c.scenario, Dialect: d, Epoch: testEpoch, Seed: 7, Agents: 12, Noise: 600, InterruptAfter: c.interruptAfter}
				out, expect := runSim(t, cfg, initLine, userLine("Please run the workflow."))
				evs := parseLines(t, out)
				checkStream(t, d, c.interruptAfter > 0, evs)
				checkExpect(t, expect, evs)

				again, _ := runSim(t, cfg, initLine, userLine("Please run the workflow."))
				if !bytes.Equal(out, again) {
					t.Fatal("output with --epoch is not reproducible")
				}
				checkGolden(t, c.dir(), c.name(d)+".ndjson", out)
				checkGolden(t, c.dir(), c.name(d)+".expect.ndjson", expect)
			})
		}
	}
}

// dir is where the case's goldens live: testdata/simulate, whose streams
// the consumers' tests replay.
func (c goldenCase) dir() string {
	return filepath.Join("..", "testdata", "simulate")
}

// checkGolden compares got with dir/name (-update rewrites it).
func checkGolden(t *testing.T, dir, name string, got []byte) {
	t.Helper()
	golden.Assert(t, filepath.Join(dir, name), got)
}

// checkStream asserts the protocol invariants the consumers rely on.
func checkStream(t *testing.T, dialect string, interrupted bool, evs []event) {
	t.Helper()
	claude := dialect == DialectClaude
	if evs[0].Type != "control_response" || !strings.Contains(evs[0].raw, CanaryToken) || !strings.Contains(evs[0].raw, CanaryEmail) {
		t.Errorf("first line must be the initialize response with the canary account: %s", evs[0].raw)
	}
	if evs[1].Subtype != "init" || evs[1].SessionID == "" {
		t.Errorf("second line must be system/init: %s", evs[1].raw)
	}
	if last := evs[len(evs)-1]; last.Type != "result" {
		t.Errorf("last line must be the result: %s", last.raw)
	}
	started := map[string]event{}
	notified := map[string]int{} // by run: a resumed sub-agent has one per run
	lastRows := map[string]map[int]row{}
	for i, e := range evs {
		if e.Type != "system" || !strings.HasPrefix(e.Subtype, "task_") {
			continue
		}
		if claude != (e.RunID != nil) {
			t.Errorf("line %d: run_id presence must match dialect %s: %s", i+1, dialect, e.raw)
		}
		switch e.Subtype {
		case "task_started":
			started[e.TaskID] = e
			notified[e.runKey()] += 0
			if claude && e.TaskType == "local_workflow" && !strings.Contains(e.Prompt, CanaryPrompt) {
				t.Errorf("claude task_started must carry the prompt canary")
			}
			if !claude && e.TaskType == "local_workflow" && len(e.TaskID) != 36 {
				t.Errorf("cbc task ids are UUIDs: %q", e.TaskID)
			}
			if claude && e.TaskType == "local_workflow" && (len(e.TaskID) != 9 || e.TaskID[0] != 'w') {
				t.Errorf("claude workflow ids are w+8 base36: %q", e.TaskID)
			}
		case "task_progress":
			if _, ok := started[e.TaskID]; !ok {
				t.Errorf("line %d: progress before task_started", i+1)
			}
			if len(e.Usage) == 0 {
				t.Errorf("line %d: progress without usage", i+1)
			}
			if !e.HasProg {
				if !claude {
					t.Errorf("line %d: cbc frames always carry the snapshot", i+1)
				}
				continue
			}
			prev := lastRows[e.TaskID]
			cur := map[int]row{}
			phases := 0
			for _, r := range e.Progress {
				if r.Type == "workflow_phase" {
					phases++
					continue
				}
				cur[r.Index] = r
				checkRow(t, i+1, claude, r)
			}
			if phases == 0 {
				t.Errorf("line %d: snapshot without phases", i+1)
			}
			for idx := range prev {
				if _, ok := cur[idx]; !ok {
					t.Errorf("line %d: agent %d vanished from the snapshot", i+1, idx)
				}
			}
			lastRows[e.TaskID] = cur
		case "task_updated":
			if terminalPatch(e.Patch) && e.Patch["end_time"] == nil {
				t.Errorf("line %d: terminal patch without end_time", i+1)
			}
		case "task_notification":
			notified[e.runKey()]++
			if started[e.TaskID].TaskType != "local_workflow" {
				continue
			}
			if claude && e.Status == "stopped" && len(e.Usage) != 0 {
				t.Errorf("claude stopped notification must not carry usage")
			}
			if e.Status != "stopped" {
				for idx, r := range lastRows[e.TaskID] {
					if r.State == "start" || r.State == "running" {
						t.Errorf("agent %d still %s at a %s notification", idx, r.State, e.Status)
					}
				}
			}
		}
	}
	for id, n := range notified {
		if n != 1 {
			t.Errorf("run %s has %d notifications, want 1", id, n)
		}
	}
	if interrupted {
		checkStopOrder(t, claude, evs)
	}
}

// terminalPatch reports whether a task_updated patch ends its task (a
// remote agent's "remote_launched" does not).
func terminalPatch(p map[string]any) bool {
	switch p["status"] {
	case "completed", "failed", "killed", "stopped":
		return true
	}
	return false
}

func checkRow(t *testing.T, line int, claude bool, r row) {
	t.Helper()
	switch {
	case claude && r.State == "start" && r.StartedAt == nil:
		if r.AgentID != nil {
			t.Errorf("line %d: queued claude agent %d has an agentId", line, r.Index)
		}
	case claude && r.Cached:
		if r.State != "done" || r.StartedAt != nil {
			t.Errorf("line %d: claude cached agent must be done without startedAt", line)
		}
	case claude && r.State == "cached":
		t.Errorf("line %d: claude spells cached as done+cached", line)
	case !claude:
		if r.AgentID == nil || !strings.HasPrefix(*r.AgentID, "v2:") || len(*r.AgentID) != 67 || r.StartedAt == nil {
			t.Errorf("line %d: cbc agent %d needs agentId v2:<sha256> and startedAt", line, r.Index)
		}
	}
}

// checkStopOrder asserts the dialect's stop path ordering.
func checkStopOrder(t *testing.T, claude bool, evs []event) {
	t.Helper()
	var wf string
	for _, e := range evs {
		if e.Subtype == "task_started" && e.TaskType == "local_workflow" {
			wf = e.TaskID
		}
	}
	var order []string
	for _, e := range evs {
		if e.TaskID != wf {
			continue
		}
		switch {
		case e.Subtype == "task_progress" && strings.Contains(e.raw, `"state":"error"`) &&
			(strings.Contains(e.raw, "Stopped because the workflow was stopped") || strings.Contains(e.raw, "subagent aborted")):
			order = append(order, "flip")
		case e.Subtype == "task_updated":
			order = append(order, "killed:"+fmt.Sprint(e.Patch["status"]))
		case e.Subtype == "task_notification":
			order = append(order, "notify:"+e.Status)
		}
	}
	got := strings.Join(order, ",")
	if claude {
		if !strings.HasSuffix(got, "flip,killed:killed,notify:stopped") {
			t.Errorf("claude stop order = %s", got)
		}
	} else if !strings.HasPrefix(got, "killed:killed,notify:stopped,flip") {
		t.Errorf("cbc stop order = %s", got)
	}
}

// checkExpect cross-checks the ground truth against the stream.
func checkExpect(t *testing.T, expect []byte, evs []event) {
	t.Helper()
	var runs []ExpectedRun
	sc := bufio.NewScanner(bytes.NewReader(expect))
	for sc.Scan() {
		var r ExpectedRun
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("expect line: %v", err)
		}
		// The shape must round-trip exactly.
		b, err := json.Marshal(r)
		if err != nil || string(b) != sc.Text() {
			t.Errorf("expect line does not round-trip:\n%s\n%s", sc.Text(), b)
		}
		runs = append(runs, r)
	}
	var startedIDs []string
	status := map[string]string{}
	for _, e := range evs {
		if e.Subtype == "task_started" {
			startedIDs = append(startedIDs, e.runKey())
		}
		if e.Subtype == "task_notification" {
			status[e.runKey()] = e.Status
		}
	}
	if len(runs) != len(startedIDs) {
		t.Fatalf("%d expected runs for %d tasks", len(runs), len(startedIDs))
	}
	for i, r := range runs {
		if k := r.TaskID + "/" + r.RunID; k != startedIDs[i] || r.Status != status[k] {
			t.Errorf("run %d = %s/%s, stream says %s/%s", i, r.TaskID, r.Status, startedIDs[i], status[startedIDs[i]])
		}
		if r.Kind != KindWorkflow {
			continue
		}
		if r.Start == 0 || r.End < r.Start || r.DurationMS != r.End-r.Start {
			t.Errorf("bad run times %+v", r)
		}
		for _, a := range r.Agents {
			if a.State != "not_started" && a.State != "cached" && a.Start == 0 && !strings.HasPrefix(r.TaskID, "w") {
				t.Errorf("cbc agent %d without start", a.Index)
			}
		}
	}
}

func TestInterruptHandshake(t *testing.T) {
	for _, d := range []string{DialectCBC, DialectClaude} {
		t.Run(d, func(t *testing.T) {
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			errc := make(chan error, 1)
			// Speed 0.1: the stall lasts 3 s of real time, ample for the
			// interrupt, and the cbc late flips take under 100 ms.
			go func() {
				err := Run(ctx, Config{Scenario: ScenarioStopped, Dialect: d, Speed: 0.1, Epoch: testEpoch, Noise: 100}, inR, outW)
				outW.CloseWithError(io.EOF)
				errc <- err
			}()
			lines := make(chan string, 1024)
			go func() {
				defer close(lines)
				br := bufio.NewReader(outR)
				for {
					l, err := br.ReadString('\n')
					if l != "" {
						lines <- l
					}
					if err != nil {
						return
					}
				}
			}()
			write := func(s string) {
				t.Helper()
				if _, err := io.WriteString(inW, s+"\n"); err != nil {
					t.Fatal(err)
				}
			}
			next := func() event {
				t.Helper()
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatal("stdout ended early")
					}
					return parseLines(t, []byte(l))[0]
				case <-ctx.Done():
					t.Fatal("timed out reading stdout")
				}
				return event{}
			}
			write(initLine)
			write(userLine("[[scenario:interrupt]] slow please"))
			for {
				e := next()
				if e.Subtype == "task_progress" && strings.Contains(e.raw, `"startedAt"`) {
					break
				}
			}
			write(`{"type":"control_request","request_id":"stop-1","request":{"subtype":"interrupt","reason":"user cancel"}}`)
			var order []string
			for {
				e := next()
				switch {
				case e.Type == "control_response":
					order = append(order, "ack")
				case e.Subtype == "task_progress" && strings.Contains(e.raw, `"state":"error"`):
					order = append(order, "flip")
				case e.Subtype == "task_updated":
					order = append(order, "killed")
				case e.Subtype == "task_notification":
					order = append(order, "notify")
				case e.Subtype == "task_progress":
					order = append(order, "progress")
				}
				if e.Type == "result" {
					break
				}
			}
			got := strings.Join(order, ",")
			// The ack precedes every task event of the stop path. Progress
			// frames of agents that started before the interrupt was read
			// may still precede the stop path.
			ack := strings.Index(got, "ack")
			stopPath := strings.IndexAny(got, "fkn") // first flip, killed or notify
			if ack < 0 || stopPath < ack || strings.Count(got, "ack") != 1 || strings.Count(got, "notify") != 1 {
				t.Fatalf("events after interrupt: %s", got)
			}
			rest := strings.ReplaceAll(got[ack+len("ack,"):], "progress,", "")
			if d == DialectClaude && rest != "flip,killed,notify" {
				t.Errorf("claude stop order: %s", got)
			}
			if d == DialectCBC && !strings.HasPrefix(rest, "killed,notify,flip") {
				t.Errorf("cbc stop order: %s", got)
			}
			// A repeated interrupt after the notification is acked and
			// does nothing else; then stdin EOF ends Run.
			write(`{"type":"control_request","request_id":"stop-2","request":{"subtype":"interrupt"}}`)
			if e := next(); e.Type != "control_response" || !strings.Contains(e.raw, "stop-2") {
				t.Fatalf("repeated interrupt not acked: %s", e.raw)
			}
			inW.Close()
			for range lines {
			}
			if err := <-errc; err != nil {
				t.Fatalf("Run: %v", err)
			}
		})
	}
}

func TestStopTaskClaude(t *testing.T) {
	// stop_task needs the task id, so drive it through a pipe like a client.
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		err := Run(ctx, Config{Scenario: ScenarioStopped, Dialect: DialectClaude, Speed: 0.1, Epoch: testEpoch}, inR, outW)
		outW.Close()
		errc <- err
	}()
	go func() {
		io.WriteString(inW, initLine+"\n"+userLine("go")+"\n")
	}()
	br := bufio.NewReader(outR)
	var taskID string
	var got []string
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			break
		}
		e := parseLines(t, []byte(l))[0]
		if e.Subtype == "task_started" {
			taskID = e.TaskID
		}
		if e.Subtype == "task_progress" && strings.Contains(l, `"startedAt"`) && len(got) == 0 {
			got = append(got, "started")
			go func() {
				io.WriteString(inW, `{"type":"control_request","request_id":"st","request":{"subtype":"stop_task","task_id":"`+taskID+`"}}`+"\n")
			}()
		}
		if e.Subtype == "task_notification" {
			got = append(got, e.Status)
		}
		if e.Type == "result" {
			inW.Close()
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "started,stopped" {
		t.Fatalf("stop_task: %v", got)
	}
}

func TestEOFWithoutInput(t *testing.T) {
	var out bytes.Buffer
	if err := Run(context.Background(), Config{}, strings.NewReader(""), &out); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Fatalf("no input, yet output: %s", out.String())
	}
}

func TestUnknownLinesIgnoredAndMarkers(t *testing.T) {
	out, expect := runSim(t, Config{Epoch: testEpoch, Dialect: DialectClaude},
		"not json", `{"type":"keep_alive"}`, initLine, "",
		`{"type":"user","message":{"role":"user","content":[{"type":"text","text":"[[SCENARIO:fail]] go"}]}}`,
		userLine("[[scenario:cached]] again"), userLine("[[SCENARIO:nonsense]] default"))
	evs := parseLines(t, out)
	var statuses []string
	sessions := map[string]bool{}
	for _, e := range evs {
		if e.Subtype == "task_notification" {
			statuses = append(statuses, e.Status)
		}
		if e.Subtype == "init" {
			sessions[e.SessionID] = true
		}
	}
	if strings.Join(statuses, ",") != "failed,completed,completed" {
		t.Fatalf("statuses %v", statuses)
	}
	if len(sessions) != 1 {
		t.Fatalf("session id must be stable across turns: %v", sessions)
	}
	if n := bytes.Count(expect, []byte("\n")); n != 3 {
		t.Fatalf("%d expect lines, want 3", n)
	}
	if !bytes.Contains(expect, []byte(`"state":"cached","cached":true`)) {
		t.Fatalf("cached agents missing from expect: %s", expect)
	}
}

func TestContextCancel(t *testing.T) {
	inR, inW := io.Pipe()
	defer inW.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	cancel()
	if err := Run(ctx, Config{}, inR, &out); err == nil {
		t.Fatal("want the context's error")
	}
}

func TestSeedsDiffer(t *testing.T) {
	a, _ := runSim(t, Config{Epoch: testEpoch, Seed: 1}, initLine, userLine("x"))
	b, _ := runSim(t, Config{Epoch: testEpoch, Seed: 2}, initLine, userLine("x"))
	if bytes.Equal(a, b) {
		t.Fatal("different seeds gave identical output")
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []Config{{Scenario: "nope"}, {Dialect: "vim"}, {Speed: -1}, {Scenario: ScenarioManyAgents, Agents: 2}} {
		if err := Run(context.Background(), cfg, strings.NewReader(""), io.Discard); err == nil {
			t.Errorf("%+v: want an error", cfg)
		}
	}
}

func TestNoiseSize(t *testing.T) {
	out, _ := runSim(t, Config{Epoch: testEpoch, Noise: 8 << 10}, initLine, userLine("x"))
	big := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, `"type":"assistant"`) && len(l) > 8<<10 {
			big++
		}
	}
	if big < 2 {
		t.Fatalf("want several ~8 KiB assistant messages, got %d", big)
	}
}
