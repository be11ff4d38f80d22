package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/cbc-otel/cbc-otel/clitelemetry"
	"github.com/cbc-otel/cbc-otel/simulate/clitel"

	"github.com/cbc-otel/cbc-otel/internal/oteltest"
)

// fakeCLIEnv names the recording a test child replays as Claude Code with
// its telemetry on (see fakeCLI).
const fakeCLIEnv = "CBC_TEST_FAKE_CLI"

// recordedTrace and recordedParent are the TRACEPARENT the otel recordings
// were made under.
const (
	recordedTrace  = "0123456789abcdef0123456789abcdef"
	recordedParent = "fedcba9876543210"
)

// fakeCLI plays Claude Code 2.1.334 from a recording of its stdout and of
// what it exported (testdata/corpus/claude-code-2.1.334-otel): it posts
// the recorded spans to the endpoint its environment names, under the
// TRACEPARENT it was given, BEFORE it writes the stream (spans that come
// before the stream names their agents), then the stream, then the log
// events, as JSON like the CLI does with http/json.
func fakeCLI(dir string) int {
	tp := os.Getenv("TRACEPARENT")
	parts := strings.Split(tp, "-")
	if len(parts) != 4 {
		fmt.Fprintln(os.Stderr, "fake cli: no TRACEPARENT:", tp)
		return 1
	}
	// What the CLI's exporters send: the headers variable of the signal
	// (the receiver's token).
	send := func(signal, body string) (*http.Response, error) {
		sig := strings.ToUpper(signal)
		req, err := http.NewRequest(http.MethodPost, os.Getenv("OTEL_EXPORTER_OTLP_"+sig+"_ENDPOINT"), strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		h, err := clitel.ParseHeaders(os.Getenv("OTEL_EXPORTER_OTLP_" + sig + "_HEADERS"))
		if err != nil {
			return nil, err
		}
		for k, v := range h {
			req.Header.Set(k, v)
		}
		req.Header.Set("Content-Type", "application/json")
		return http.DefaultClient.Do(req)
	}
	post := func(signal string) error {
		b, err := os.ReadFile(filepath.Join(dir, signal+".jsonl"))
		if err != nil {
			return err
		}
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var rec struct {
				Body json.RawMessage `json:"body"`
			}
			if err := json.Unmarshal(line, &rec); err != nil {
				return err
			}
			body := strings.NewReplacer(recordedTrace, parts[1], recordedParent, parts[2]).Replace(string(rec.Body))
			resp, err := send(signal, body)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", signal, resp.Status)
			}
		}
		return nil
	}
	if os.Getenv(fakeCLIEnv+"_GARBAGE") != "" {
		// Hostile payloads first: whatever the receiver answers, the
		// child goes on as it would.
		for _, body := range []string{"{not json", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}`, strings.Repeat("x", 9<<20)} {
			if resp, err := send("traces", body); err == nil {
				resp.Body.Close()
			}
		}
	}
	if err := post("traces"); err != nil {
		fmt.Fprintln(os.Stderr, "fake cli:", err)
		return 1
	}
	stream, err := os.ReadFile(filepath.Join(dir, "stream.ndjson"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake cli:", err)
		return 1
	}
	os.Stdout.Write(stream)
	for _, signal := range []string{"logs", "metrics"} {
		if err := post(signal); err != nil {
			fmt.Fprintln(os.Stderr, "fake cli:", err)
			return 1
		}
	}
	if code := os.Getenv(fakeCLIEnv + "_EXIT"); code != "" {
		var n int
		fmt.Sscan(code, &n)
		return n
	}
	return 0
}

// jspan is an exported span, flattened for the assertions.
type jspan struct {
	name, id, parent, trace string
	attrs                   map[string]string
	links                   []string
}

func readTracesFile(t *testing.T, path string) []jspan {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []jspan
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		req, err := clitelemetry.DecodeTraces(sc.Bytes(), clitelemetry.JSON)
		if err != nil {
			t.Fatalf("traces file: %v", err)
		}
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					out = append(out, flatten(sp))
				}
			}
		}
	}
	return out
}

func flatten(sp *tracepb.Span) jspan {
	j := jspan{name: sp.GetName(), id: fmt.Sprintf("%x", sp.GetSpanId()), parent: fmt.Sprintf("%x", sp.GetParentSpanId()),
		trace: fmt.Sprintf("%x", sp.GetTraceId()), attrs: map[string]string{}}
	for _, kv := range sp.GetAttributes() {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			j.attrs[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			j.attrs[kv.GetKey()] = fmt.Sprint(v.IntValue)
		case *commonpb.AnyValue_DoubleValue:
			j.attrs[kv.GetKey()] = fmt.Sprint(v.DoubleValue)
		case *commonpb.AnyValue_BoolValue:
			j.attrs[kv.GetKey()] = fmt.Sprint(v.BoolValue)
		}
	}
	for _, l := range sp.GetLinks() {
		j.links = append(j.links, fmt.Sprintf("%x", l.GetSpanId()))
	}
	return j
}

// TestRunJoinsRecordedCLITelemetry drives the built binary around a child
// that replays what the real Claude Code 2.1.334 printed and exported in
// one run, and checks the joined trace in --traces.file: one trace under a
// minted parent; every sub-agent span under its agent's invoke_agent, with
// a link to its original parent; nested spans untouched; the workflow
// under the Workflow tool span; cost per agent on the spans.
func TestRunJoinsRecordedCLITelemetry(t *testing.T) {
	dir := t.TempDir()
	spans, summary := filepath.Join(dir, "spans.jsonl"), filepath.Join(dir, "runs.jsonl")
	rec, err := filepath.Abs("../../testdata/corpus/claude-code-2.1.334-otel/complete-traceparent")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(wrapperBin, "run", "--cli-telemetry.join", "--web.listen-address=", "--traces.file", spans,
		"--summary.file", summary, "--tracker.grace=2s", "--", testExe)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "TRACEPARENT=") }),
		fakeCLIEnv+"="+rec)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	want, _ := os.ReadFile(filepath.Join(rec, "stream.ndjson"))
	if !bytes.Equal(out, want) {
		t.Fatalf("stdout differs from the child's (%d vs %d bytes)", len(out), len(want))
	}
	got := readTracesFile(t, spans)
	byID := map[string]jspan{}
	agentSpan := map[string]jspan{} // agentId → our invoke_agent
	var root, workflow, launcher jspan
	for _, s := range got {
		byID[s.id] = s
		switch {
		case strings.HasPrefix(s.name, "run "):
			root = s
		case strings.HasPrefix(s.name, "invoke_workflow"):
			workflow = s
		case strings.HasPrefix(s.name, "invoke_agent"):
			agentSpan[s.attrs["gen_ai.agent.id"]] = s
		case s.name == "claude_code.tool" && s.attrs["tool_name"] == "Workflow":
			launcher = s
		}
	}
	if root.id == "" || root.parent != "" || workflow.id == "" || launcher.id == "" {
		t.Fatalf("missing root %q, workflow %q or launcher %q", root.name, workflow.name, launcher.name)
	}
	for _, s := range got {
		if s.trace != root.trace {
			t.Errorf("%s in trace %s, want the one trace %s", s.name, s.trace, root.trace)
		}
	}
	if workflow.parent != launcher.id {
		t.Errorf("invoke_workflow's parent %s, want the Workflow tool span %s", workflow.parent, launcher.id)
	}
	joined := 0
	for _, s := range got {
		id := s.attrs["agent_id"]
		switch {
		case id != "":
			a, ok := agentSpan[id]
			if !ok {
				t.Errorf("%s of agent %s: no invoke_agent with that gen_ai.agent.id", s.name, id)
				continue
			}
			if s.parent != a.id {
				t.Errorf("%s of agent %s: parent %s, want invoke_agent %s", s.name, id, s.parent, a.id)
			}
			if len(s.links) != 1 || byID[s.links[0]].name != "claude_code.tool.execution" {
				t.Errorf("%s of agent %s: links %v, want one to the Workflow tool.execution", s.name, id, s.links)
			}
			joined++
		case strings.HasPrefix(s.name, "claude_code.") && s.attrs["gen_ai.conversation.id"] != "" && byID[s.parent].attrs["agent_id"] != "":
			if len(s.links) != 0 {
				t.Errorf("nested %s was moved", s.name)
			}
		}
	}
	if joined != 6 {
		t.Errorf("%d sub-agent spans joined, want 6 (5 model calls, 1 Bash tool)", joined)
	}
	for id, a := range agentSpan {
		if a.attrs["cbc.usage.model_calls"] == "" || a.attrs["cbc.usage.cost_usd"] == "" {
			t.Errorf("agent %s: no cost on its span: %v", id, a.attrs)
		}
	}
	// The recording's api_request events: 5 by sub-agents, 100 input and
	// 20 output tokens each at $0.0006 (claude-sonnet-4-5 list price).
	for k, want := range map[string]string{"cbc.usage.model_calls": "5", "gen_ai.usage.input_tokens": "500",
		"gen_ai.usage.output_tokens": "100", "cbc.usage.cost_usd": "0.003"} {
		if got := workflow.attrs[k]; got != want {
			t.Errorf("workflow %s = %q, want %q", k, got, want)
		}
	}
}

// TestJoinCostMatchesSimulator runs the simulator as the CLI, with its
// telemetry on, under run --cli-telemetry.join, and compares the cost of
// every run and agent in --summary.file with the simulator's own
// accounting (--expect). The scenarios repeat the same workflow, so agents
// of different runs share their content-addressed ids, and the simulator
// exports its logs before its spans: only the Workflow call each event ran
// under tells the runs apart. The nested scenario's two workflow runs (the
// top-level one, its workflow() child's agents among its own, and a fork's)
// each cost their own agents' calls: none is rolled up into another.
func TestJoinCostMatchesSimulator(t *testing.T) {
	dir := t.TempDir()
	summary, expect, prom := filepath.Join(dir, "runs.jsonl"), filepath.Join(dir, "expect.jsonl"), filepath.Join(dir, "metrics.prom")
	var in strings.Builder
	in.WriteString(`{"type":"control_request","request_id":"init","request":{"subtype":"initialize"}}` + "\n")
	for _, sc := range []string{"completed", "cached", "completed", "failed", "mixed", "nested"} {
		fmt.Fprintf(&in, `{"type":"user","message":{"role":"user","content":"[[SCENARIO:%s]] go"},"parent_tool_use_id":null,"session_id":""}`+"\n", sc)
	}
	cmd := exec.Command(wrapperBin, "run", "--cli-telemetry.join", "--web.listen-address=", "--summary.file", summary, "--metrics.file", prom, "--",
		wrapperBin, "simulate", "--dialect", "claude", "--speed", "0", "--expect", expect)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "TRACEPARENT=") })
	cmd.Stdin = strings.NewReader(in.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	type agent struct {
		Index int      `json:"index"`
		Cost  *float64 `json:"cost_usd"`
	}
	type run struct {
		Kind     string   `json:"kind"`
		Task     string   `json:"task_id"`
		Workflow string   `json:"workflow"`
		Cost     *float64 `json:"cost_usd"`
		Agents   []agent  `json:"agents"`
	}
	read := func(path string) map[string]run {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]run{}
		for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var r run
			if err := json.Unmarshal(l, &r); err != nil {
				t.Fatal(err)
			}
			if r.Kind == "workflow" {
				out[r.Task] = r
			}
		}
		return out
	}
	val := func(p *float64) float64 {
		if p == nil {
			return 0
		}
		return *p
	}
	want, got := read(expect), read(summary)
	if len(want) != 7 || len(got) != len(want) { // nested: two runs, each its own cost
		t.Fatalf("%d runs expected, %d seen", len(want), len(got))
	}
	// Each run is one observation of cbc_workflow_run_cost_usd, its
	// workflow's sum the sum of its runs' costs; none is of unknown cost.
	wantSum, wantCount := map[string]float64{}, map[string]float64{}
	for task, w := range want {
		wantSum[got[task].Workflow] += val(w.Cost)
		wantCount[got[task].Workflow]++
	}
	b, err := os.ReadFile(prom)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, m := range fams["cbc_workflow_run_cost_usd"].GetMetric() {
		wf, h := m.GetLabel()[0].GetValue(), m.GetHistogram()
		seen++
		if d := h.GetSampleSum() - wantSum[wf]; d > 1e-12 || d < -1e-12 || float64(h.GetSampleCount()) != wantCount[wf] {
			t.Errorf("cbc_workflow_run_cost_usd{workflow=%q}: %d runs, $%v; the simulator spent $%v in %v", wf, h.GetSampleCount(), h.GetSampleSum(), wantSum[wf], wantCount[wf])
		}
	}
	if seen != len(wantCount) {
		t.Errorf("%d run-cost series, want one per workflow of %v", seen, wantCount)
	}
	for _, m := range fams["cbc_workflow_runs_cost_unknown_total"].GetMetric() {
		if m.GetCounter().GetValue() != 0 {
			t.Errorf("runs of unknown cost: %v", m)
		}
	}
	for task, w := range want {
		g := got[task]
		if d := val(g.Cost) - val(w.Cost); d > 1e-12 || d < -1e-12 || val(w.Cost) == 0 {
			t.Errorf("run %s: cost %v, the simulator spent %v", task, val(g.Cost), val(w.Cost))
		}
		for i, wa := range w.Agents {
			if i >= len(g.Agents) {
				t.Errorf("run %s: agent %d missing", task, wa.Index)
				continue
			}
			if d := val(g.Agents[i].Cost) - val(wa.Cost); d > 1e-12 || d < -1e-12 {
				t.Errorf("run %s agent %d: cost %v, the simulator spent %v", task, wa.Index, val(g.Agents[i].Cost), val(wa.Cost))
			}
		}
	}
}

// otlpSink is an OTLP/HTTP receiver on 127.0.0.1 that counts what arrives
// per path and resource service.name.
type otlpSink struct {
	mu  sync.Mutex
	got map[string]int // "path service.name" → items
}

func newOTLPSink(t *testing.T) (*otlpSink, string) {
	s := &otlpSink{got: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		defer s.mu.Unlock()
		switch r.URL.Path {
		case "/v1/traces":
			req, err := clitelemetry.DecodeTraces(body, clitelemetry.Protobuf)
			if err != nil {
				t.Errorf("traces: %v", err)
			}
			for _, rs := range req.GetResourceSpans() {
				s.got["/v1/traces "+serviceName(rs.GetResource().GetAttributes())] += clitelemetry.CountSpans([]*tracepb.ResourceSpans{rs})
			}
		case "/v1/logs":
			req, err := clitelemetry.DecodeLogs(body, clitelemetry.Protobuf)
			if err != nil {
				t.Errorf("logs: %v", err)
			}
			for _, rl := range req.GetResourceLogs() {
				for _, sl := range rl.GetScopeLogs() {
					s.got["/v1/logs "+serviceName(rl.GetResource().GetAttributes())] += len(sl.GetLogRecords())
				}
			}
		case "/v1/metrics":
			req, err := clitelemetry.DecodeMetrics(body, clitelemetry.Protobuf)
			if err != nil {
				t.Errorf("metrics: %v", err)
			}
			for _, rm := range req.GetResourceMetrics() {
				s.got["/v1/metrics "+serviceName(rm.GetResource().GetAttributes())]++
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func serviceName(kv []*commonpb.KeyValue) string {
	for _, a := range kv {
		if a.GetKey() == "service.name" {
			return a.GetValue().GetStringValue()
		}
	}
	return ""
}

// TestJoinForwardsAndNeverChangesTheChild: with an OTLP endpoint, what the
// CLI exported (its spans, log records and metrics, under its own
// resource) reaches the endpoint beside our spans; hostile payloads on the
// receiver change nothing for the child, whose stdout and exit status pass
// through as they are.
func TestJoinForwardsAndNeverChangesTheChild(t *testing.T) {
	sink, url := newOTLPSink(t)
	rec, err := filepath.Abs("../../testdata/corpus/claude-code-2.1.334-otel/complete-traceparent")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(wrapperBin, "run", "--cli-telemetry.join", "--web.listen-address=", "--otlp.endpoint", url,
		"--otlp.protocol", "http/protobuf", "--tracker.grace=1s", "--", testExe)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "TRACEPARENT=") || strings.HasPrefix(kv, "OTEL_") }),
		fakeCLIEnv+"="+rec, fakeCLIEnv+"_GARBAGE=1", fakeCLIEnv+"_EXIT=7")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("run exited %v, want the child's 7\n%s", err, stderr.String())
	}
	want, _ := os.ReadFile(filepath.Join(rec, "stream.ndjson"))
	if !bytes.Equal(out, want) {
		t.Errorf("stdout differs from the child's (%d vs %d bytes)", len(out), len(want))
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	// The recording: 16 spans, 26 log records of the CLI's, one metrics request.
	for key, n := range map[string]int{"/v1/traces claude-code": 16, "/v1/logs claude-code": 26, "/v1/metrics claude-code": 1} {
		if sink.got[key] != n {
			t.Errorf("%s: %d arrived, want %d (all: %v)", key, sink.got[key], n, sink.got)
		}
	}
	if sink.got["/v1/traces cbc-otel"] == 0 {
		t.Errorf("none of our spans arrived: %v", sink.got)
	}
}

// TestJoinReceiverRefusesOthers: while `run --cli-telemetry.join` runs its
// child, other local processes that find the receiver (its port is no
// secret) are refused: a span posted without a header, with another
// scheme, or with another token never reaches the traces file, nor the
// received-spans count; the token the child was handed gets in. Refusals
// are counted by reason, and the token appears nowhere on the wrapper's
// stderr, even at debug.
func TestJoinReceiverRefusesOthers(t *testing.T) {
	dir := t.TempDir()
	envFile, spans, prom := filepath.Join(dir, "env"), filepath.Join(dir, "spans.jsonl"), filepath.Join(dir, "m.prom")
	// The child tells the test where it exports and with what, then waits
	// for its stdin to close.
	script := `printf '%s\n%s\n%s\n' "$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" "$OTEL_EXPORTER_OTLP_TRACES_HEADERS" "$TRACEPARENT" >"$1.tmp" && mv "$1.tmp" "$1"; exec cat`
	cmd := exec.Command(wrapperBin, "run", "--cli-telemetry.join", "--log.level=debug", "--traces.file", spans, "--metrics.file", prom,
		"--tracker.grace=100ms", "--", "sh", "-c", script, "sh", envFile)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "TRACEPARENT=") || strings.HasPrefix(kv, "OTEL_") })
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(oteltest.SyncBuffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var lines []string
	poll(t, 20*time.Second, "the child's environment", func() (bool, string) {
		b, err := os.ReadFile(envFile)
		lines = strings.Split(strings.TrimSpace(string(b)), "\n")
		return err == nil && len(lines) == 3, stderr.String()
	})
	endpoint, headers, parent := lines[0], lines[1], strings.Split(lines[2], "-")
	token, ok := strings.CutPrefix(headers, "authorization=Bearer%20")
	if !ok || len(token) < 40 || !strings.HasPrefix(endpoint, "http://127.0.0.1:") || len(parent) != 4 {
		t.Fatalf("the child got endpoint %q, headers %q, TRACEPARENT %q", endpoint, headers, lines[2])
	}
	for i, tc := range []struct{ name, auth string }{
		{"intruder-without-header", ""},
		{"intruder-basic", "Basic dXNlcjpwYXNz"},
		{"intruder-token-in-another-scheme", "Token " + token},
		{"intruder-another-token", "Bearer " + strings.Repeat("A", len(token))},
		{"from-the-child", "Bearer " + token},
	} {
		body := fmt.Sprintf(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":%q,"spanId":"%016x","parentSpanId":%q,"name":%q,"startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]}`,
			parent[1], i+1, parent[2], tc.name)
		req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := http.StatusUnauthorized
		if tc.name == "from-the-child" {
			want = http.StatusOK
		}
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, want)
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr)
	}
	var names []string
	for _, s := range readTracesFile(t, spans) {
		names = append(names, s.name)
	}
	if !slices.Contains(names, "from-the-child") || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "intruder") }) {
		t.Errorf("spans in the traces file %v: want the child's, no intruder's", names)
	}
	f, err := os.Open(prom)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	for _, c := range []struct {
		family, label string
		want          map[string]float64
	}{
		{"cbc_otel_cli_requests_unauthorized_total", "reason", map[string]float64{"missing": 1, "malformed": 2, "wrong": 1}},
		{"cbc_otel_cli_spans_total", "outcome", map[string]float64{"received": 1, "reparented": 0, "unmatched": 0, "foreign": 0, "overflow": 0}},
	} {
		got, err := sumFamily(bytes.NewReader(b), c.family, c.label)
		if err != nil || !maps.Equal(got, c.want) {
			t.Errorf("%s by %s: %v (%v), want %v", c.family, c.label, got, err, c.want)
		}
	}
	if log := stderr.String(); strings.Contains(log, token) || strings.Count(log, "request refused") != 4 {
		t.Errorf("stderr shows the token (%v) or not the 4 refusals:\n%s", strings.Contains(log, token), log)
	}
}
