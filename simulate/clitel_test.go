package simulate

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/cbc-otel/cbc-otel/simulate/clitel"
)

const (
	testTraceID = "0123456789abcdef0123456789abcdef"
	testParent  = "fedcba9876543210"
)

// receiver is an OTLP/HTTP receiver on 127.0.0.1 that keeps what it gets,
// in JSON (hex ids) or protobuf.
type receiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	spans    []*tracepb.Span
	logs     []*logspb.LogRecord
	resource []*commonpb.KeyValue
	types    map[string]int // Content-Type → requests
	auth     map[string]int // path and Authorization → requests
	errs     []string
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{types: map[string]int{}, auth: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	ct := req.Header.Get("Content-Type")
	var m proto.Message
	switch req.URL.Path {
	case "/v1/traces":
		m = &coltrace.ExportTraceServiceRequest{}
	case "/v1/logs":
		m = &collogs.ExportLogsServiceRequest{}
	default:
		http.NotFound(w, req)
		return
	}
	var err error
	if ct == "application/json" {
		err = unmarshalOTLPJSON(body, m)
	} else {
		err = proto.Unmarshal(body, m)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.types[ct]++
	r.auth[req.URL.Path+" "+req.Header.Get("Authorization")]++
	if err != nil {
		r.errs = append(r.errs, err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch m := m.(type) {
	case *coltrace.ExportTraceServiceRequest:
		for _, rs := range m.ResourceSpans {
			r.resource = rs.Resource.Attributes
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
	case *collogs.ExportLogsServiceRequest:
		for _, rl := range m.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				r.logs = append(r.logs, sl.LogRecords...)
			}
		}
	}
}

// unmarshalOTLPJSON reads OTLP/JSON: hex ids back to proto3 JSON's base64.
func unmarshalOTLPJSON(b []byte, m proto.Message) error {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return err
	}
	var walk func(any) error
	walk = func(v any) error {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "traceId" || k == "spanId" || k == "parentSpanId") {
					raw, err := hex.DecodeString(s)
					if err != nil {
						return err
					}
					v[k] = base64.StdEncoding.EncodeToString(raw)
				} else if err := walk(x); err != nil {
					return err
				}
			}
		case []any:
			for _, x := range v {
				if err := walk(x); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(doc); err != nil {
		return err
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return protojson.Unmarshal(b, m)
}

func attrs(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := map[string]*commonpb.AnyValue{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// telEnv switches every signal on towards r.
func telEnv(r *receiver, protocol string) map[string]string {
	env := map[string]string{clitel.EnvTraceparent: "00-" + testTraceID + "-" + testParent + "-01"}
	for _, kv := range clitel.Environ(r.srv.URL, protocol) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	// As run --cli-telemetry.join hands its receiver's token.
	env[clitel.EnvTracesHeaders] = "authorization=Bearer%20sim-token"
	env[clitel.EnvLogsHeaders] = "authorization=Bearer%20sim-token"
	return env
}

// streamAgent is what the stream said of an agent of a workflow run.
type streamAgent struct {
	id                 string
	state              string
	cached             bool
	startedAt, endedAt int64
	tokens, toolCalls  int64
}

// streamRuns reads the workflow runs of a Claude Code stream: tool_use_id
// → agents by index, in their last row.
func streamRuns(t *testing.T, out []byte) map[string]map[int]*streamAgent {
	t.Helper()
	runs := map[string]map[int]*streamAgent{}
	byTask := map[string]string{}
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var e struct {
			Subtype   string `json:"subtype"`
			TaskID    string `json:"task_id"`
			ToolUseID string `json:"tool_use_id"`
			TaskType  string `json:"task_type"`
			Progress  []struct {
				Type       string `json:"type"`
				AgentID    string `json:"agentId"`
				State      string `json:"state"`
				Index      int    `json:"index"`
				Cached     bool   `json:"cached"`
				StartedAt  int64  `json:"startedAt"`
				DurationMs int64  `json:"durationMs"`
				Tokens     int64  `json:"tokens"`
				ToolCalls  int64  `json:"toolCalls"`
			} `json:"workflow_progress"`
		}
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatal(err)
		}
		if e.Subtype == "task_started" && e.TaskType == "local_workflow" {
			byTask[e.TaskID] = e.ToolUseID
			runs[e.ToolUseID] = map[int]*streamAgent{}
		}
		run := runs[byTask[e.TaskID]]
		for _, p := range e.Progress {
			if p.Type != "workflow_agent" || run == nil {
				continue
			}
			run[p.Index] = &streamAgent{id: p.AgentID, state: p.State, cached: p.Cached, startedAt: p.StartedAt,
				endedAt: p.StartedAt + p.DurationMs, tokens: p.Tokens, toolCalls: p.ToolCalls}
			if p.DurationMs == 0 {
				run[p.Index].endedAt = 0
			}
		}
	}
	return runs
}

func telConfig(env map[string]string) Config {
	return Config{Dialect: DialectClaude, Seed: 7, Epoch: testEpoch, Getenv: envOf(env)}
}

var telTurns = []string{initLine, userLine("[[SCENARIO:completed]] one"), userLine("[[SCENARIO:failed]] two"),
	userLine("[[SCENARIO:cached]] three"), userLine("[[SCENARIO:mixed]] four")}

// TestCLITelemetry runs workflows with Claude Code's telemetry switches on
// and checks what an OTLP receiver gets against the stream: the Workflow
// tool span per run under TRACEPARENT, one llm_request per model call of
// every agent that ran, and api_request costs that are the simulator's
// own accounting.
func TestCLITelemetry(t *testing.T) {
	for _, protocol := range []string{clitel.ProtocolJSON, clitel.ProtocolProtobuf} {
		t.Run(protocol, func(t *testing.T) {
			r := newReceiver(t)
			var stderr bytes.Buffer
			cfg := telConfig(telEnv(r, protocol))
			cfg.Stderr = &stderr
			out, expect := runSim(t, cfg, telTurns...)
			if stderr.Len() > 0 || len(r.errs) > 0 {
				t.Fatalf("export errors: %s %v", stderr.String(), r.errs)
			}
			want := map[string]string{clitel.ProtocolJSON: "application/json", clitel.ProtocolProtobuf: "application/x-protobuf"}[protocol]
			if len(r.types) != 1 || r.types[want] == 0 {
				t.Errorf("content types %v, want only %s", r.types, want)
			}
			if len(r.auth) != 2 || r.auth["/v1/traces Bearer sim-token"] == 0 || r.auth["/v1/logs Bearer sim-token"] == 0 {
				t.Errorf("requests by path and Authorization %v, want every one with the token of its headers variable", r.auth)
			}
			checkTelemetry(t, r, out, expect, len(telTurns)-1)
		})
	}
}

func checkTelemetry(t *testing.T, r *receiver, out, expect []byte, turns int) {
	t.Helper()
	res := attrs(r.resource)
	if res["service.name"].GetStringValue() != "claude-code" || res["service.version"].GetStringValue() != ClaudeVersion {
		t.Errorf("resource %v", r.resource)
	}
	runs := streamRuns(t, out)
	byID := map[string]*tracepb.Span{}
	for _, s := range r.spans {
		if hex.EncodeToString(s.TraceId) != testTraceID {
			t.Errorf("span %s in trace %x, not TRACEPARENT's", s.Name, s.TraceId)
		}
		byID[string(s.SpanId)] = s
	}
	exec := map[string]string{} // tool.execution span id → tool_use_id
	interactions := 0
	for _, s := range r.spans {
		a := attrs(s.Attributes)
		switch s.Name {
		case "claude_code.interaction":
			interactions++
			if hex.EncodeToString(s.ParentSpanId) != testParent {
				t.Errorf("interaction's parent %x, want TRACEPARENT's span", s.ParentSpanId)
			}
		case "claude_code.tool.execution":
			tool := byID[string(s.ParentSpanId)]
			if tool == nil || attrs(tool.Attributes)["tool_name"].GetStringValue() != "Workflow" {
				t.Errorf("tool.execution not under a Workflow tool span")
				continue
			}
			id := a["tool_use_id"].GetStringValue()
			if attrs(tool.Attributes)["tool_use_id"].GetStringValue() != id || runs[id] == nil {
				t.Errorf("Workflow tool_use_id %q is no task_started.tool_use_id of the stream", id)
			}
			exec[string(s.SpanId)] = id
		}
	}
	if interactions != turns || len(exec) != len(runs) {
		t.Errorf("%d interactions, %d Workflow executions; want %d and %d", interactions, len(exec), turns, len(runs))
	}
	// llm_request spans by (run, agent_id), in end order.
	calls := map[[2]string][]*tracepb.Span{}
	mainSpans := 0
	for _, s := range r.spans {
		if s.Name != "claude_code.llm_request" {
			continue
		}
		a := attrs(s.Attributes)
		id, ok := a["agent_id"]
		if !ok {
			mainSpans++
			continue
		}
		if a["gen_ai.conversation.id"].GetStringValue() != id.GetStringValue() {
			t.Errorf("agent %s: gen_ai.conversation.id %v", id.GetStringValue(), a["gen_ai.conversation.id"])
		}
		run, ok := exec[string(s.ParentSpanId)]
		if !ok {
			t.Errorf("agent %s's llm_request is not under a Workflow tool.execution", id.GetStringValue())
		}
		k := [2]string{run, id.GetStringValue()}
		calls[k] = append(calls[k], s)
	}
	n := 0
	for run, agents := range runs {
		for _, ag := range agents {
			k := [2]string{run, ag.id}
			got := calls[k]
			delete(calls, k)
			if ag.cached || ag.startedAt == 0 {
				if len(got) > 0 {
					t.Errorf("run %s agent %s (cached or never started) has %d llm_request spans", run, ag.id, len(got))
				}
				continue
			}
			n++
			want := 1
			if ag.toolCalls > 0 {
				want = 2
			}
			if len(got) != want {
				t.Errorf("run %s agent %s: %d llm_request spans, want %d", run, ag.id, len(got), want)
				continue
			}
			first, last := int64(got[0].StartTimeUnixNano/1e6), int64(got[len(got)-1].EndTimeUnixNano/1e6)
			if first != ag.startedAt || last != ag.endedAt {
				t.Errorf("run %s agent %s: calls span %d..%d, the stream says %d..%d", run, ag.id, first, last, ag.startedAt, ag.endedAt)
			}
			if ag.state == "error" && got[len(got)-1].Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("run %s agent %s errored but its last call is not ERROR", run, ag.id)
			}
		}
	}
	if n == 0 || len(calls) != 0 {
		t.Errorf("%d agents ran; llm_request spans of no agent of the stream: %v", n, calls)
	}
	checkCosts(t, r, expect, mainSpans)
}

// checkCosts compares the api_request events with the simulator's ground
// truth, agent by agent, and the main conversation's with its spans.
func checkCosts(t *testing.T, r *receiver, expect []byte, mainSpans int) {
	t.Helper()
	type sum struct {
		usd    float64
		calls  int64
		tokens int64
	}
	perAgent := map[string]*sum{} // workflow.run_id + agent_id
	mainEvents := 0
	for _, l := range r.logs {
		a := attrs(l.Attributes)
		if a["event.name"].GetStringValue() != "api_request" {
			continue
		}
		if hex.EncodeToString(l.TraceId) != testTraceID {
			t.Errorf("api_request in trace %x", l.TraceId)
		}
		id := a["agent_id"].GetStringValue()
		if id == "" {
			mainEvents++
			if want := clitel.Cost(clitel.Tokens{a["input_tokens"].GetIntValue(), a["output_tokens"].GetIntValue()}); a["cost_usd"].GetDoubleValue() != want {
				t.Errorf("main api_request cost %v, want %v", a["cost_usd"], want)
			}
			continue
		}
		k := string(l.SpanId) + "/" + id
		if perAgent[k] == nil {
			perAgent[k] = &sum{}
		}
		perAgent[k].usd += a["cost_usd"].GetDoubleValue()
		perAgent[k].calls++
		for _, n := range []string{"input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens"} {
			perAgent[k].tokens += a[n].GetIntValue()
		}
	}
	if mainEvents == 0 || mainEvents != mainSpans {
		t.Errorf("%d main api_request events, %d main llm_request spans", mainEvents, mainSpans)
	}
	// The ground truth keys agents by run, the events by the run's
	// tool.execution span: each agent's total must be among the events'.
	var runs []ExpectedRun
	for _, line := range bytes.Split(bytes.TrimSpace(expect), []byte("\n")) {
		var e ExpectedRun
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatal(err)
		}
		if e.Kind == KindWorkflow {
			runs = append(runs, e)
		}
	}
	total, want := 0.0, 0.0
	for _, s := range perAgent {
		total += s.usd
	}
	for _, run := range runs {
		var agents float64
		for _, ag := range run.Agents {
			if ag.CostUSD != nil {
				agents += *ag.CostUSD
				found := false
				for k, s := range perAgent {
					if strings.HasSuffix(k, "/"+ag.AgentID) && math.Abs(s.usd-*ag.CostUSD) < 1e-12 && s.calls == ag.ModelCalls &&
						s.tokens == ag.TokensByType.Input+ag.TokensByType.Output+ag.TokensByType.CacheRead+ag.TokensByType.CacheCreation {
						found = true
					}
				}
				if !found {
					t.Errorf("run %s agent %s: no api_request events adding up to %v in %d calls", run.TaskID, ag.AgentID, *ag.CostUSD, ag.ModelCalls)
				}
				if ag.State == "done" && ag.Tokens != ag.TokensByType.Input+ag.TokensByType.Output+ag.TokensByType.CacheRead+ag.TokensByType.CacheCreation {
					t.Errorf("run %s agent %s: row tokens %d, calls' tokens %+v", run.TaskID, ag.AgentID, ag.Tokens, ag.TokensByType)
				}
			}
		}
		if run.CostUSD != nil {
			want += *run.CostUSD
			if math.Abs(*run.CostUSD-agents) > 1e-12 {
				t.Errorf("run %s: cost %v, its agents' %v", run.TaskID, *run.CostUSD, agents)
			}
		}
	}
	if want == 0 || math.Abs(total-want) > 1e-9 {
		t.Errorf("api_request events of agents cost %v, the simulator's accounting %v", total, want)
	}
}

// TestCLITelemetryOff checks that nothing is exported, and the stream is
// the same, unless the switches are all on; and that traces need the beta
// switch and a sampled parent while log events do not.
func TestCLITelemetryOff(t *testing.T) {
	r := newReceiver(t)
	base, _ := runSim(t, Config{Dialect: DialectClaude, Seed: 7, Epoch: testEpoch}, telTurns...)
	on := telEnv(r, clitel.ProtocolJSON)
	without := func(keys ...string) map[string]string {
		m := map[string]string{}
		for k, v := range on {
			m[k] = v
		}
		for _, k := range keys {
			delete(m, k)
		}
		return m
	}
	cases := []struct {
		name        string
		env         map[string]string
		spans, logs bool
	}{
		{"nil getenv", nil, false, false},
		{"telemetry off", without(clitel.EnvEnableTelemetry), false, false},
		{"no exporters", without(clitel.EnvTracesExporter, clitel.EnvLogsExporter), false, false},
		{"no beta", without(clitel.EnvEnhancedTelemetry, clitel.EnvLogsExporter), false, false},
		{"logs only", without(clitel.EnvEnhancedTelemetry), false, true},
		{"unsampled", func() map[string]string {
			m := without()
			m[clitel.EnvTraceparent] = "00-" + testTraceID + "-" + testParent + "-00"
			return m
		}(), false, true},
		{"all on", on, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r.mu.Lock()
			r.spans, r.logs = nil, nil
			r.mu.Unlock()
			cfg := telConfig(c.env)
			if c.env == nil {
				cfg.Getenv = nil
			}
			out, _ := runSim(t, cfg, telTurns...)
			if !bytes.Equal(out, base) {
				t.Error("the stream differs with telemetry on")
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if (len(r.spans) > 0) != c.spans || (len(r.logs) > 0) != c.logs {
				t.Errorf("got %d spans and %d log events; want spans %v, logs %v", len(r.spans), len(r.logs), c.spans, c.logs)
			}
		})
	}
}

// TestCLITelemetryShutdownBounded: a receiver that never answers delays
// the simulator's exit by the shutdown timeout at most, and the failure
// goes to Stderr, never to the stream.
func TestCLITelemetryShutdownBounded(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		select {
		case <-req.Context().Done(): // the simulator gave up and closed the connection
		case <-release:
		}
	}))
	t.Cleanup(hung.Close)
	t.Cleanup(func() { close(release) }) // runs first
	env := map[string]string{clitel.EnvShutdownTimeout: "200"}
	for _, kv := range clitel.Environ(hung.URL, clitel.ProtocolProtobuf) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	var stderr bytes.Buffer
	cfg := telConfig(env)
	cfg.Stderr = &stderr
	began := time.Now()
	out, _ := runSim(t, cfg, initLine, userLine("[[SCENARIO:completed]] one"))
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("Run took %v with a shutdown timeout of 200ms", d)
	}
	if !strings.Contains(stderr.String(), "simulate: telemetry:") {
		t.Errorf("no export error on Stderr: %q", stderr.String())
	}
	if bytes.Contains(out, []byte("telemetry")) {
		t.Error("telemetry on stdout")
	}
}

// TestCLITelemetryStopped: calls cut short by an interrupt leave no span
// and no api_request, as the CLI's do; the turn's own calls remain.
func TestCLITelemetryStopped(t *testing.T) {
	r := newReceiver(t)
	cfg := telConfig(telEnv(r, clitel.ProtocolProtobuf))
	cfg.InterruptAfter = 2 // both slow readers are in flight
	_, expect := runSim(t, cfg, initLine, userLine("[[SCENARIO:stopped]] one"))
	agentSpans, mainSpans := 0, 0
	for _, s := range r.spans {
		if s.Name == "claude_code.llm_request" {
			if _, ok := attrs(s.Attributes)["agent_id"]; ok {
				agentSpans++
			} else {
				mainSpans++
			}
		}
	}
	agentEvents := 0
	for _, l := range r.logs {
		if _, ok := attrs(l.Attributes)["agent_id"]; ok {
			agentEvents++
		}
	}
	if agentSpans != 0 || agentEvents != 0 || mainSpans == 0 {
		t.Errorf("%d agent spans, %d agent events, %d main spans; want 0, 0, some", agentSpans, agentEvents, mainSpans)
	}
	if bytes.Contains(expect, []byte("cost_usd")) {
		t.Errorf("ground truth has a cost without any call: %s", expect)
	}
}

// TestCLITelemetryCBC: the cbc dialect emits the same telemetry (a demo
// may join either), with its agentIds.
func TestCLITelemetryCBC(t *testing.T) {
	r := newReceiver(t)
	cfg := telConfig(telEnv(r, clitel.ProtocolJSON))
	cfg.Dialect = DialectCBC
	out, _ := runSim(t, cfg, initLine, userLine("[[SCENARIO:completed]] one"))
	n := 0
	for _, s := range r.spans {
		if id := attrs(s.Attributes)["agent_id"].GetStringValue(); id != "" {
			n++
			if !bytes.Contains(out, []byte(`"agentId":"`+id+`"`)) {
				t.Errorf("agent_id %s is no agentId of the stream", id)
			}
		}
	}
	if n != 5 { // four agents, one with a tool call
		t.Errorf("%d agent llm_request spans, want 5", n)
	}
}

// TestCLITelemetryNested: in the nested scenario every run's agents have
// their model calls under their own run's Workflow tool.execution
// (checkTelemetry), and every Workflow tool call, the fork's workflow's
// included, is recorded as the main conversation's: under the
// interaction, with no agent_id (no workflow agent launches anything,
// PROTOCOL.md "Nested runs").
func TestCLITelemetryNested(t *testing.T) {
	r := newReceiver(t)
	cfg := telConfig(telEnv(r, clitel.ProtocolJSON))
	out, expect := runSim(t, cfg, initLine, userLine("[[SCENARIO:nested]] one"))
	checkTelemetry(t, r, out, expect, 1)

	workflows := map[string]bool{} // tool_use_id of each workflow's task_started
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var e struct {
			Subtype   string `json:"subtype"`
			TaskType  string `json:"task_type"`
			ToolUseID string `json:"tool_use_id"`
		}
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatal(err)
		}
		if e.Subtype == "task_started" && e.TaskType == "local_workflow" {
			workflows[e.ToolUseID] = true
		}
	}
	byID := map[string]*tracepb.Span{}
	for _, s := range r.spans {
		byID[string(s.SpanId)] = s
	}
	seen := 0
	for _, s := range r.spans {
		a := attrs(s.Attributes)
		if s.Name != "claude_code.tool" || a["tool_name"].GetStringValue() != "Workflow" {
			continue
		}
		seen++
		if _, ok := a["agent_id"]; ok || byID[string(s.ParentSpanId)].GetName() != "claude_code.interaction" || !workflows[a["tool_use_id"].GetStringValue()] {
			t.Errorf("Workflow tool span %v: want one of the stream's workflows, under the interaction, no agent_id (parent %s)", a, byID[string(s.ParentSpanId)].GetName())
		}
	}
	if len(workflows) != 2 || seen != 2 {
		t.Errorf("%d workflows in the stream, %d Workflow tool spans; want 2 and 2", len(workflows), seen)
	}
}
