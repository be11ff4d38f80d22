package e2e

// A local stand-in for the Anthropic Messages API, good enough to drive the
// real Claude Code CLI (2.1.328) offline through a Dynamic Workflow, the way
// the recordings in /work/shared/corpus/claude-code-2.1.328 were made.
//
// Requests are told apart by the text of their FIRST user message:
//   - [[AGENT:name]]   a workflow sub-agent (the marker is in agent()'s prompt);
//   - [[SCENARIO:x]]   the main conversation: its first request is answered
//     with a Workflow tool call carrying the scenario's inline script, the
//     request carrying that call's tool_result with a short text, and every
//     later one (the task-notification turn) with another short text;
//   - anything else     a side request of the CLI (titles, ...): a short text.
//
// Agents behave as their plan says: answer with text, first call a Bash tool
// then answer, fail with an HTTP 400 (not retried by the CLI), or hang until
// the client goes away (the interrupt scenario). Every response carries the
// agent's own token counts so the test can compare what the CLI reports with
// what was served. Only loopback; everything is bounded in time.

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// mockAgent is how one [[AGENT:name]] behaves.
type mockAgent struct {
	Name   string
	Label  string
	Phase  string // phase title the script puts it in
	Mode   string // "text", "bash" (one Bash tool call, then text), "fail" (HTTP 400), "hang"
	Input  int    // usage.input_tokens served on each of its responses
	Output int    // usage.output_tokens served on each of its responses
}

// mockScenario is one main-conversation script.
type mockScenario struct {
	Name        string // [[SCENARIO:name]]
	Workflow    string // meta.name
	Description string // meta.description
	Phases      []string
	Agents      []mockAgent
	Script      string
}

// mockAnthropicScenarios are the workflows the stand-in launches. Agents
// live in 2 phases; 4 in "complete" (one uses Bash), 3 in "fail" (one gets
// an HTTP 400, then the script throws), 3 in "interrupt" (one hangs).
func mockAnthropicScenarios() map[string]*mockScenario {
	sc := map[string]*mockScenario{
		"complete": {
			Name: "complete", Workflow: "mock-review", Description: "Mock two-phase workflow for e2e",
			Phases: []string{"Gather", "Summarize"},
			Agents: []mockAgent{
				{Name: "alpha", Label: "reader:alpha", Phase: "Gather", Mode: "text", Input: 120, Output: 7},
				{Name: "beta", Label: "reader:beta", Phase: "Gather", Mode: "text", Input: 130, Output: 9},
				{Name: "gamma", Label: "summarize", Phase: "Summarize", Mode: "text", Input: 140, Output: 11},
				{Name: "tooldelta", Label: "check", Phase: "Summarize", Mode: "bash", Input: 150, Output: 13},
			},
			Script: `export const meta = {
  name: 'mock-review',
  description: 'Mock two-phase workflow for e2e',
  phases: [{ title: 'Gather', detail: 'two parallel readers' }, { title: 'Summarize' }],
}
phase('Gather')
const got = await parallel([
  () => agent('[[AGENT:alpha]] Read part A and report.', { label: 'reader:alpha' }),
  () => agent('[[AGENT:beta]] Read part B and report.', { label: 'reader:beta' }),
])
phase('Summarize')
const s1 = await agent('[[AGENT:gamma]] Summarize: ' + got.join(' | '), { label: 'summarize' })
const s2 = await agent('[[AGENT:tooldelta]] Double-check the summary with a shell command.', { label: 'check', phase: 'Summarize' })
return { got, s1, s2 }
`,
		},
		"fail": {
			Name: "fail", Workflow: "mock-fail", Description: "Mock workflow where an agent errors and the script throws",
			Phases: []string{"Gather", "Summarize"},
			Agents: []mockAgent{
				{Name: "alpha", Label: "reader:alpha", Phase: "Gather", Mode: "text", Input: 120, Output: 7},
				{Name: "failbeta", Label: "reader:failbeta", Phase: "Gather", Mode: "fail"},
				{Name: "gamma", Label: "summarize", Phase: "Summarize", Mode: "text", Input: 140, Output: 11},
			},
			Script: `export const meta = {
  name: 'mock-fail',
  description: 'Mock workflow where an agent errors and the script throws',
  phases: [{ title: 'Gather' }, { title: 'Summarize' }],
}
phase('Gather')
const got = await parallel([
  () => agent('[[AGENT:alpha]] Read part A and report.', { label: 'reader:alpha' }),
  () => agent('[[AGENT:failbeta]] Read part B and report.', { label: 'reader:failbeta' }),
])
phase('Summarize')
const s1 = await agent('[[AGENT:gamma]] Summarize: ' + got.join(' | '), { label: 'summarize' })
if (got.some((g) => g === null)) throw new Error('mock failure: reader:failbeta returned null')
return { got, s1 }
`,
		},
		"interrupt": {
			Name: "interrupt", Workflow: "mock-slow", Description: "Mock workflow with a hanging agent, to be interrupted",
			Phases: []string{"Gather", "Summarize"},
			Agents: []mockAgent{
				{Name: "alpha", Label: "reader:alpha", Phase: "Gather", Mode: "text", Input: 120, Output: 7},
				{Name: "slowbeta", Label: "reader:slowbeta", Phase: "Gather", Mode: "hang"},
				{Name: "slowgamma", Label: "summarize", Phase: "Summarize", Mode: "text", Input: 140, Output: 11},
			},
			Script: `export const meta = {
  name: 'mock-slow',
  description: 'Mock workflow with a hanging agent, to be interrupted',
  phases: [{ title: 'Gather' }, { title: 'Summarize' }],
}
phase('Gather')
const got = await parallel([
  () => agent('[[AGENT:alpha]] Read part A and report.', { label: 'reader:alpha' }),
  () => agent('[[AGENT:slowbeta]] Read part B slowly.', { label: 'reader:slowbeta' }),
])
phase('Summarize')
const s1 = await agent('[[AGENT:slowgamma]] Summarize: ' + got.join(' | '), { label: 'summarize' })
return { got, s1 }
`,
		},
	}
	return sc
}

// mockMainUsage is the usage of every main-conversation and side response.
const mockMainInput, mockMainOutput = 100, 20

// mockRequest is one request the stand-in served, for the test to inspect.
type mockRequest struct {
	Path   string
	Kind   string // "main", "agent", "side", "other"
	Agent  string // agent name for Kind "agent"
	Reply  string // "tool_use:Workflow", "tool_use:Bash", "text", "error400", "hang"
	Status int
	Input  int
	Output int
	Model  string // the request's model (what the CLI prices the call at)
}

// mockAnthropic is the running stand-in.
type mockAnthropic struct {
	URL       string
	scenarios map[string]*mockScenario

	gate     chan struct{} // agents' responses wait for it (see releaseAgents)
	gateOnce sync.Once

	mu       sync.Mutex
	reqs     []mockRequest
	seq      int
	idSeq    map[string]int
	waiters  []chan struct{} // closed at every new request
	hangRel  chan struct{}   // closed on Close: releases hanging agents
	closeOne sync.Once
}

var (
	mockAgentRe    = regexp.MustCompile(`\[\[AGENT:([a-z0-9_-]+)\]\]`)
	mockScenarioRe = regexp.MustCompile(`\[\[SCENARIO:([a-z0-9_-]+)\]\]`)
)

// startMockAnthropic listens on 127.0.0.1:0 and serves until the test ends.
// With gated, the sub-agents' responses are held until releaseAgents (the
// driver releases them once the main turn's result is out, which makes the
// order of the CLI's stdout independent of scheduling); a held response
// goes out anyway after 60 s.
func startMockAnthropic(t *testing.T, gated bool) *mockAnthropic {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &mockAnthropic{URL: "http://" + ln.Addr().String(), scenarios: mockAnthropicScenarios(),
		hangRel: make(chan struct{}), gate: make(chan struct{}), idSeq: map[string]int{}}
	if !gated {
		m.releaseAgents()
	}
	srv := &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() {
		m.closeOne.Do(func() { close(m.hangRel) })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		srv.Close()
	})
	return m
}

// releaseAgents lets the held and all later agent responses go.
func (m *mockAnthropic) releaseAgents() { m.gateOnce.Do(func() { close(m.gate) }) }

// waitGate holds an agent's response until releaseAgents, the client going
// away (false) or 60 s.
func (m *mockAnthropic) waitGate(r *http.Request) bool {
	t := time.NewTimer(60 * time.Second)
	defer t.Stop()
	select {
	case <-m.gate:
	case <-t.C:
	case <-r.Context().Done():
		return false
	}
	return true
}

// idFor returns a deterministic id for the nth response of a kind (the
// same scenario gets the same message and tool ids in every run, whatever
// the order the concurrent agents' requests arrive in).
func (m *mockAnthropic) idFor(key string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.idSeq[key]++
	h := fnv.New64a()
	fmt.Fprintf(h, "%s#%d", key, m.idSeq[key])
	return fmt.Sprintf("%016x", h.Sum64())
}

// requests returns a copy of what was served so far.
func (m *mockAnthropic) requests() []mockRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]mockRequest(nil), m.reqs...)
}

func (m *mockAnthropic) record(r mockRequest) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reqs = append(m.reqs, r)
	for _, w := range m.waiters {
		close(w)
	}
	m.waiters = nil
}

// agentServed sums the tokens served to each agent (successful responses).
func (m *mockAnthropic) agentServed() map[string]mockRequest {
	out := map[string]mockRequest{}
	for _, r := range m.requests() {
		if r.Kind != "agent" {
			continue
		}
		s := out[r.Agent]
		s.Agent, s.Kind = r.Agent, r.Kind
		if r.Status == 200 && r.Reply != "hang" {
			s.Input += r.Input
			s.Output += r.Output
		}
		s.Reply = strings.TrimPrefix(s.Reply+","+r.Reply, ",")
		out[r.Agent] = s
	}
	return out
}

// The request body fields the stand-in looks at.
type mockMessagesBody struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

type mockBlock struct {
	Type      string          `json:"type"`
	Name      string          `json:"name"`
	Text      string          `json:"text"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

// blocks decodes a message content (a string or an array of blocks).
func mockBlocks(raw json.RawMessage) []mockBlock {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []mockBlock{{Type: "text", Text: s}}
	}
	var bs []mockBlock
	json.Unmarshal(raw, &bs)
	return bs
}

func mockText(bs []mockBlock) string {
	var parts []string
	for _, b := range bs {
		if b.Text != "" {
			parts = append(parts, b.Text)
		}
		if len(b.Content) > 0 {
			parts = append(parts, mockText(mockBlocks(b.Content)))
		}
	}
	return strings.Join(parts, "\n")
}

func (m *mockAnthropic) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v1/messages") {
		// HEAD / probes, count_tokens on other paths...: an empty success.
		m.record(mockRequest{Path: r.Method + " " + r.URL.Path, Kind: "other", Status: 200})
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
		return
	}
	if r.URL.Path == "/v1/messages/count_tokens" {
		m.record(mockRequest{Path: r.URL.Path, Kind: "other", Status: 200})
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"input_tokens":100}`))
		return
	}
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if d := os.Getenv("MOCK_DUMP"); d != "" {
		os.WriteFile(filepath.Join(d, fmt.Sprintf("req-%03d.json", m.nextID())), raw, 0o644)
	}
	var body mockMessagesBody
	if err := json.Unmarshal(raw, &body); err != nil || len(body.Messages) == 0 {
		m.record(mockRequest{Path: r.URL.Path, Kind: "other", Status: 400})
		mockError(w, 400, "mock: undecodable request")
		return
	}
	// The first user message carries the marker (Claude Code 2.1.328 puts a
	// <system-reminder> block before the prompt and may add role "system"
	// messages to the array).
	first, workflowCalled := "", false
	for _, msg := range body.Messages {
		if msg.Role == "user" && first == "" {
			first = mockText(mockBlocks(msg.Content))
		}
		if msg.Role == "assistant" {
			for _, b := range mockBlocks(msg.Content) {
				workflowCalled = workflowCalled || (b.Type == "tool_use" && b.Name == "Workflow")
			}
		}
	}
	last := body.Messages[len(body.Messages)-1]
	lastBlocks := mockBlocks(last.Content)
	model := body.Model
	if model == "" {
		model = "claude-sonnet-4-5"
	}

	if a := mockAgentRe.FindStringSubmatch(first); a != nil {
		m.serveAgent(w, r, body.Stream, model, a[1], lastBlocks)
		return
	}
	if s := mockScenarioRe.FindStringSubmatch(first); s != nil && m.scenarios[s[1]] != nil {
		sc := m.scenarios[s[1]]
		hasToolResult := false
		for _, b := range lastBlocks {
			hasToolResult = hasToolResult || b.Type == "tool_result"
		}
		switch {
		case !workflowCalled:
			m.record(mockRequest{Path: r.URL.Path, Kind: "main", Reply: "tool_use:Workflow", Status: 200, Input: mockMainInput, Output: mockMainOutput, Model: model})
			mockStream(w, body.Stream, model, m.idFor("main:"+sc.Name+":workflow"), []mockContent{{Tool: "Workflow", Input: map[string]any{"script": sc.Script}}}, "tool_use", mockMainInput, mockMainOutput)
		case hasToolResult:
			m.record(mockRequest{Path: r.URL.Path, Kind: "main", Reply: "text", Status: 200, Input: mockMainInput, Output: mockMainOutput, Model: model})
			mockStream(w, body.Stream, model, m.idFor("main:"+sc.Name+":launched"), []mockContent{{Text: "Workflow launched; waiting for its notification."}}, "end_turn", mockMainInput, mockMainOutput)
		default:
			m.record(mockRequest{Path: r.URL.Path, Kind: "main", Reply: "text", Status: 200, Input: mockMainInput, Output: mockMainOutput, Model: model})
			mockStream(w, body.Stream, model, m.idFor("main:"+sc.Name+":notified"), []mockContent{{Text: "Workflow notification received."}}, "end_turn", mockMainInput, mockMainOutput)
		}
		return
	}
	m.record(mockRequest{Path: r.URL.Path, Kind: "side", Reply: "text", Status: 200, Input: mockMainInput, Output: mockMainOutput, Model: model})
	mockStream(w, body.Stream, model, m.idFor("side"), []mockContent{{Text: "Mock side answer."}}, "end_turn", mockMainInput, mockMainOutput)
}

func (m *mockAnthropic) nextID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	return m.seq
}

func (m *mockAnthropic) findAgent(name string) *mockAgent {
	for _, sc := range m.scenarios {
		for i := range sc.Agents {
			if sc.Agents[i].Name == name {
				return &sc.Agents[i]
			}
		}
	}
	return nil
}

func (m *mockAnthropic) serveAgent(w http.ResponseWriter, r *http.Request, stream bool, model, name string, last []mockBlock) {
	a := m.findAgent(name)
	if a == nil {
		a = &mockAgent{Name: name, Mode: "text", Input: mockMainInput, Output: mockMainOutput}
	}
	req := mockRequest{Path: r.URL.Path, Kind: "agent", Agent: name, Status: 200, Input: a.Input, Output: a.Output, Model: model}
	switch a.Mode {
	case "fail":
		if !m.waitGate(r) {
			return
		}
		req.Reply, req.Status, req.Input, req.Output = "error400", 400, 0, 0
		m.record(req)
		mockError(w, 400, "mock: agent "+name+" is rejected")
	case "hang":
		// Hold the response (headers only) until the CLI aborts the request
		// (interrupt) or the test ends. Bounded: never longer than 2 min.
		req.Reply, req.Input, req.Output = "hang", 0, 0
		m.record(req)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		t := time.NewTimer(2 * time.Minute)
		defer t.Stop()
		select {
		case <-r.Context().Done():
		case <-m.hangRel:
		case <-t.C:
		}
	case "bash":
		toolResult := false
		for _, b := range last {
			toolResult = toolResult || b.Type == "tool_result"
		}
		if !m.waitGate(r) {
			return
		}
		if !toolResult {
			// A distinct input count on the tool call, so the test can tell
			// which of the agent's responses its tokens come from.
			req.Reply, req.Input = "tool_use:Bash", a.Input-50
			m.record(req)
			mockStream(w, stream, model, m.idFor("agent:"+name), []mockContent{{Tool: "Bash", Input: map[string]any{"command": "echo checked", "description": "Print a check mark"}}}, "tool_use", req.Input, a.Output)
			return
		}
		req.Reply = "text"
		m.record(req)
		mockStream(w, stream, model, m.idFor("agent:"+name), []mockContent{{Text: "result of " + name}}, "end_turn", a.Input, a.Output)
	default:
		if !m.waitGate(r) {
			return
		}
		req.Reply = "text"
		m.record(req)
		mockStream(w, stream, model, m.idFor("agent:"+name), []mockContent{{Text: "result of " + name}}, "end_turn", a.Input, a.Output)
	}
}

// mockContent is one content block of a response: text, or a tool call.
type mockContent struct {
	Text  string
	Tool  string
	Input map[string]any
}

func mockError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("request-id", "req_mock_error")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": msg}})
	w.Write(b)
}

// mockStream answers with a Messages API response: SSE events when the
// request asked for a stream, else one JSON message.
func mockStream(w http.ResponseWriter, stream bool, model string, id string, content []mockContent, stop string, in, out int) {
	msgID := "msg_mock_" + id
	w.Header().Set("request-id", "req_mock_"+id)
	blocks := make([]map[string]any, len(content))
	for i, c := range content {
		if c.Tool != "" {
			blocks[i] = map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_mock_%s_%d", id, i), "name": c.Tool, "input": c.Input}
		} else {
			blocks[i] = map[string]any{"type": "text", "text": c.Text}
		}
	}
	usage := map[string]any{"input_tokens": in, "output_tokens": out, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]any{"id": msgID, "type": "message", "role": "assistant", "model": model,
			"content": blocks, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		w.Write(b)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
	fl, _ := w.(http.Flusher)
	ev := func(name string, v map[string]any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		if fl != nil {
			fl.Flush()
		}
	}
	ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": msgID, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": in, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})
	for i, c := range content {
		if c.Tool != "" {
			ev("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": blocks[i]["id"], "name": c.Tool, "input": map[string]any{}}})
			js, _ := json.Marshal(c.Input)
			// Split the JSON in two deltas, as the real API streams it in pieces.
			h := len(js) / 2
			for _, part := range []string{string(js[:h]), string(js[h:])} {
				ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": part}})
			}
		} else {
			ev("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "text_delta", "text": c.Text}})
		}
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	ev("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": out}})
	ev("message_stop", map[string]any{"type": "message_stop"})
}

// sortedKeys is a small helper for stable failure messages.
func mockSortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
