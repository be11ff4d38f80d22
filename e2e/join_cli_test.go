package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestClaudeOwnTelemetryUnderStandIn proves what `run --cli-telemetry.join`
// (and TestJoinedTraceInJaeger) rely on in the real Claude Code's OWN
// telemetry, with no cbc-otel involved: the real CLI, driven through the
// stand-in's "complete" workflow with the switches the feature sets
// (joinCLIEnv) and a TRACEPARENT, exports to an in-test OTLP/HTTP receiver,
// and
//
//   - every request carries the token of the OTLP headers variables
//     (Authorization: Bearer, as run's receiver requires);
//   - every span and log record has the TRACEPARENT's trace id, and each
//     claude_code.interaction has its span as parent;
//   - the Workflow claude_code.tool span (and its tool.execution child) carry
//     tool_use_id == the stream's task_started.tool_use_id;
//   - the agent_id values on llm_request/tool spans are exactly the stream's
//     workflow_agent agentIds, one llm_request per response the stand-in
//     served that agent, each child of the Workflow tool.execution span;
//     the nested spans under a sub-agent's tool span carry its id only as
//     gen_ai.conversation.id;
//   - the api_request events' tokens per agent_id (and without one: the main
//     conversation) equal what the stand-in served, their cost_usd is the
//     model's list price times those tokens, and the last result line's
//     total_cost_usd and modelUsage are the session's totals (agents
//     included).
//
// It runs without the feature: it is the ground the joined test stands on,
// and fails first if a new CLI version moves it.
func TestClaudeOwnTelemetryUnderStandIn(t *testing.T) {
	cli := claudeBin(t)
	api := startMockAnthropic(t, true)
	rcv := startOTLPReceiver(t)
	tp, traceID, parentID := joinTraceparent(t)
	run := runClaude(t, "", cli, api, claudeOpts{scenario: "complete", env: append(append(joinCLIEnv(rcv.URL), joinModelEnv...), "TRACEPARENT="+tp)})
	if run.exitCode != 0 {
		t.Fatalf("claude exited %d; stderr:\n%s", run.exitCode, run.stderr)
	}
	st := parseJoinStream(t, run.stdout)
	served := joinServed(t, api)
	names := joinNameByLabel(api.scenarios["complete"])

	// The CLI flushes at exit, so this holds at once; polled in case the
	// last batch is still being read.
	var spans []otlpSpan
	var logs []otlpLog
	var posts map[string]int
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		spans, logs, posts = rcv.snapshot()
		calls := 0
		for _, l := range logs {
			if l.Event == "api_request" {
				calls++
			}
		}
		if calls >= served.All.Calls || time.Now().After(deadline) {
			break
		}
		<-tick.C
	}
	t.Logf("received: %v POSTs; %d spans, %d log records; stand-in served %d billed responses (%d to agents)",
		posts, len(spans), len(logs), served.All.Calls, served.Workflow.Calls)
	if len(spans) == 0 {
		t.Fatalf("no span at all from the CLI (the enhanced-telemetry beta switch not honoured by this version?); POSTs %v", posts)
	}
	// Every request presents the token of its signal's headers variable,
	// percent-decoded: run's receiver lets in nothing else.
	for key, n := range rcv.authorizations() {
		if !strings.HasSuffix(key, " Bearer "+joinToken) {
			t.Errorf("%d POSTs to %q: not with the token of the headers variables", n, key)
		}
	}

	// One trace: the TRACEPARENT's.
	for _, s := range spans {
		if s.TraceID != traceID {
			t.Errorf("span %s %s: trace %s, want the TRACEPARENT's %s", s.Name, s.SpanID, s.TraceID, traceID)
		}
		if s.Service != "claude-code" {
			t.Errorf("span %s: service.name %q", s.Name, s.Service)
		}
	}
	for _, l := range logs {
		if l.TraceID != "" && l.TraceID != traceID {
			t.Errorf("log %s: trace %s, want %s", l.Event, l.TraceID, traceID)
		}
	}
	byID := map[string]otlpSpan{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	interactions := 0
	var wfTool, wfExec otlpSpan
	for _, s := range spans {
		switch {
		case s.Name == "claude_code.interaction":
			interactions++
			if s.Parent != parentID {
				t.Errorf("interaction %s: parent %q, want the TRACEPARENT's span %s", s.SpanID, s.Parent, parentID)
			}
		case s.Name == "claude_code.tool" && s.Attrs["tool_name"] == "Workflow":
			wfTool = s
		}
	}
	if wfTool.SpanID == "" || wfTool.Attrs["tool_use_id"] != st.ToolUseID {
		t.Fatalf("no claude_code.tool span with tool_name Workflow and tool_use_id %q (task_started's); got %+v", st.ToolUseID, wfTool)
	}
	for _, s := range spans {
		if s.Name == "claude_code.tool.execution" && s.Parent == wfTool.SpanID {
			wfExec = s
		}
	}
	if wfExec.SpanID == "" || wfExec.Attrs["tool_use_id"] != st.ToolUseID {
		t.Fatalf("no claude_code.tool.execution under the Workflow tool span with its tool_use_id: %+v", wfExec)
	}

	// Agent ids on spans = the stream's agentIds; one llm_request per
	// response served to that agent.
	labelOf := map[string]string{}
	for label, a := range st.Agents {
		labelOf[a.AgentID] = label
	}
	llmPerAgent := map[string]int{}
	mainLLM := 0
	for _, s := range spans {
		aid, _ := s.Attrs["agent_id"].(string)
		switch {
		case aid == "" && s.Name == "claude_code.llm_request":
			mainLLM++
		case aid == "":
		case labelOf[aid] == "":
			t.Errorf("span %s %s: agent_id %q is no workflow agentId of the stream %v", s.Name, s.SpanID, aid, st.Agents)
		default:
			if s.Parent != wfExec.SpanID {
				t.Errorf("span %s (agent %s): parent %s %q, want the Workflow tool.execution %s", s.Name, labelOf[aid], s.Parent, byID[s.Parent].Name, wfExec.SpanID)
			}
			if s.Name == "claude_code.llm_request" {
				llmPerAgent[aid]++
			}
			if s.Attrs["gen_ai.conversation.id"] != aid {
				t.Errorf("span %s: gen_ai.conversation.id %v, want the agent_id %s", s.Name, s.Attrs["gen_ai.conversation.id"], aid)
			}
			if s.Name == "claude_code.tool" {
				for _, c := range spans {
					if c.Parent != s.SpanID {
						continue
					}
					if _, has := c.Attrs["agent_id"]; has || c.Attrs["gen_ai.conversation.id"] != aid {
						t.Errorf("nested span %s under agent %s's tool: agent_id %v, gen_ai.conversation.id %v; want none and %s", c.Name, labelOf[aid], c.Attrs["agent_id"], c.Attrs["gen_ai.conversation.id"], aid)
					}
				}
			}
		}
	}
	for _, label := range joinSortedLabels(st.Agents) {
		a := st.Agents[label]
		want := 0
		if c := served.Agents[names[label]]; c != nil {
			want = c.Calls
		}
		if llmPerAgent[a.AgentID] != want {
			t.Errorf("agent %s (%s): %d llm_request spans, the stand-in served %d responses", label, a.AgentID, llmPerAgent[a.AgentID], want)
		}
	}
	if mainLLM != served.Main.Calls {
		t.Errorf("%d llm_request spans without agent_id, the stand-in served %d main/side responses", mainLLM, served.Main.Calls)
	}

	// api_request events: tokens and cost per agent and main.
	type acc struct {
		calls   int
		in, out int64
		usd     float64
		models  map[string]bool
		sources map[string]bool
	}
	per := map[string]*acc{} // agent_id, "" = main
	for _, l := range logs {
		if l.Event != "api_request" {
			continue
		}
		aid, _ := l.Attrs["agent_id"].(string)
		a := per[aid]
		if a == nil {
			a = &acc{models: map[string]bool{}, sources: map[string]bool{}}
			per[aid] = a
		}
		in, ok1 := joinAttrInt(l.Attrs["input_tokens"])
		out, ok2 := joinAttrInt(l.Attrs["output_tokens"])
		usd, ok3 := joinAttrFloat(l.Attrs["cost_usd"])
		if !ok1 || !ok2 || !ok3 {
			t.Errorf("api_request without numeric tokens/cost: %v", l.Attrs)
		}
		a.calls++
		a.in += in
		a.out += out
		a.usd += usd
		a.models[fmt.Sprint(l.Attrs["model"])] = true
		a.sources[fmt.Sprint(l.Attrs["query_source"])] = true
		if aid != "" && l.Attrs["workflow.run_id"] == nil {
			t.Errorf("a sub-agent's api_request without workflow.run_id: %v", l.Attrs)
		}
		if aid != "" && l.SpanID == "" {
			t.Errorf("a sub-agent's api_request without a span id")
		}
	}
	check := func(who string, got *acc, want joinCost) {
		if got == nil {
			got = &acc{}
		}
		t.Logf("%-22s api_request: %d calls, %d in, %d out, $%.6f (models %v, query_source %v); served: %d calls, %d in, %d out, list price $%.6f",
			who, got.calls, got.in, got.out, got.usd, mockSortedKeys(got.models), mockSortedKeys(got.sources), want.Calls, want.In, want.Out, want.USD)
		if got.calls != want.Calls || got.in != want.In || got.out != want.Out || !joinClose(got.usd, want.USD) {
			t.Errorf("%s: api_request sums differ from what the stand-in served", who)
		}
	}
	for _, label := range joinSortedLabels(st.Agents) {
		a := st.Agents[label]
		want := joinCost{}
		if c := served.Agents[names[label]]; c != nil {
			want = *c
		}
		check(fmt.Sprintf("%s (%s)", label, a.AgentID), per[a.AgentID], want)
	}
	check("main (no agent_id)", per[""], served.Main)
	for aid := range per {
		if aid != "" && labelOf[aid] == "" {
			t.Errorf("api_request events for agent_id %q, which the stream never named", aid)
		}
	}

	// The last result line: the session's cumulative cost, agents included.
	last := st.Results[len(st.Results)-1]
	if usd, _ := joinAttrFloat(last["total_cost_usd"]); !joinClose(usd, served.All.USD) {
		t.Errorf("last result total_cost_usd %v, want every served response at list price: %v", last["total_cost_usd"], served.All.USD)
	}
	mu, _ := last["modelUsage"].(map[string]any)
	for model, want := range served.All.Models {
		got, _ := mu[model].(map[string]any)
		in, _ := joinAttrInt(got["inputTokens"])
		out, _ := joinAttrInt(got["outputTokens"])
		usd, _ := joinAttrFloat(got["costUSD"])
		if in != want.In || out != want.Out || !joinClose(usd, want.USD) {
			t.Errorf("last result modelUsage[%s] = %v, want %d in, %d out, $%v", model, got, want.In, want.Out, want.USD)
		}
	}
	for i, r := range st.Results {
		t.Logf("result %d: subtype %v, total_cost_usd %v, modelUsage %v", i+1, r["subtype"], r["total_cost_usd"], r["modelUsage"])
	}

	// The tree, as received, for the record.
	tree := joinOTLPTree(spans)
	t.Logf("the CLI's own spans (TRACEPARENT span %s):\n%s", parentID, tree)
	if d := os.Getenv("CBC_E2E_KEEP"); d != "" {
		os.WriteFile(filepath.Join(d, "claude-own-telemetry-tree.txt"), []byte(tree), 0o644)
	}
}

// joinOTLPTree renders received spans indented by parent (roots: spans whose
// parent was not received), children in start order.
func joinOTLPTree(spans []otlpSpan) string {
	byID := map[string]bool{}
	kids := map[string][]otlpSpan{}
	for _, s := range spans {
		byID[s.SpanID] = true
	}
	var roots []otlpSpan
	for _, s := range spans {
		if !byID[s.Parent] {
			roots = append(roots, s)
			continue
		}
		kids[s.Parent] = append(kids[s.Parent], s)
	}
	order := func(l []otlpSpan) {
		sort.SliceStable(l, func(i, j int) bool { return l[i].Start < l[j].Start })
	}
	var b strings.Builder
	var walk func(s otlpSpan, depth int)
	walk = func(s otlpSpan, depth int) {
		var keys []string
		for _, k := range []string{"tool_name", "tool_use_id", "agent_id", "gen_ai.conversation.id", "workflow.run_id", "model", "input_tokens", "output_tokens"} {
			if v, ok := s.Attrs[k]; ok {
				keys = append(keys, fmt.Sprintf("%s=%v", k, v))
			}
		}
		fmt.Fprintf(&b, "%s%s %s parent=%s %s\n", strings.Repeat("  ", depth), s.Name, s.SpanID, s.Parent, strings.Join(keys, " "))
		k := kids[s.SpanID]
		order(k)
		for _, c := range k {
			walk(c, depth+1)
		}
	}
	order(roots)
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}
