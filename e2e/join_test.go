package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cbc-otel/cbc-otel/egress"
	"github.com/cbc-otel/cbc-otel/internal/realtool"
	"github.com/cbc-otel/cbc-otel/traces"
)

// TestJoinedTraceInJaeger proves `cbc-otel run --join-cli-telemetry` end to
// end: the real Claude Code, driven through the stand-in's "complete"
// workflow (2 phases, 4 agents, one of them calling Bash), runs under the
// wrapper, which receives the CLI's own OTLP telemetry and exports it with
// its spans to a real Jaeger v2 (once over OTLP gRPC with the user's
// TRACEPARENT, once over OTLP/HTTP with a parent span the wrapper mints).
// Read back through Jaeger's query API:
//
//   - one trace per CLI process: every span of service claude-code and of
//     service cbc-otel is in the TRACEPARENT's trace (the user's, or the
//     minted `run claude` root's), and Jaeger knows no other trace;
//   - invoke_workflow's parent is the CLI's Workflow claude_code.tool span
//     (tool_use_id == task_started.tool_use_id); workflow_phase under it,
//     invoke_agent under its phase;
//   - every CLI span of a workflow sub-agent (agent_id == the stream's
//     agentId) is a child of that agent's invoke_agent span (gen_ai.agent.id)
//     and links to its original parent, the Workflow claude_code.tool.execution
//     span; nested spans keep their parent; main-conversation spans are where
//     the CLI put them;
//   - invoke_agent carries the agent's tokens and list-price cost exactly as
//     the stand-in served them, invoke_workflow the run's sums;
//   - the wrapper's /metrics (scraped live, before the session ends) and its
//     --summary-file say the same costs: per workflow, per model and token
//     type, per scope (main | workflow), from the result lines, turns;
//   - a real Prometheus scraping the wrapper every second has the same
//     costs, read back through its query API before the session ends.
//
// The joined tree, as Jaeger returns it, is logged and written to a file.
func TestJoinedTraceInJaeger(t *testing.T) {
	cli := claudeBin(t)
	jbin := realtool.Built(t, "jaeger", "JAEGER_BIN", jaegerHint)
	promBin := requirePrometheus(t)
	bin := promBuildCLI(t)
	for _, c := range []struct {
		name, proto string
		userParent  bool // TRACEPARENT in the user's env, else minted by the wrapper
	}{
		{"traceparent-grpc", egress.ProtocolGRPC, true},
		{"minted-http", egress.ProtocolHTTP, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			joinedRunOnce(t, cli, bin, promBin, startJaeger(t, jbin), c.proto, c.userParent)
		})
	}
}

func joinedRunOnce(t *testing.T, cli, bin, promBin string, j *jaeger, proto string, userParent bool) {
	api := startMockAnthropic(t, true)
	endpoint := "http://" + j.otlpGRPC
	if proto == egress.ProtocolHTTP {
		endpoint = "http://" + j.otlpHTTP
	}
	dir := t.TempDir()
	summary := filepath.Join(dir, "summary.ndjson")
	addr := fmt.Sprintf("127.0.0.1:%d", realtool.FreePorts(t, 1)[0])
	env := append([]string(nil), joinModelEnv...)
	userTP, userTrace, userSpan := joinTraceparent(t)
	if userParent {
		env = append(env, "TRACEPARENT="+userTP)
	}
	// One Prometheus for this run, scraping the wrapper's address every
	// second (nothing listens there until the wrapper starts: up is 0
	// until then). Killed when the subtest ends.
	prom := startPrometheus(t, promBin, addr)
	began := time.Now()

	// Scraped while the wrapper is up: once the session is done (every
	// agent ended, both result lines out), /metrics must reach the costs
	// the stand-in served; the CLI's events come in every 500 ms.
	var live map[string]*dto.MetricFamily
	var liveErr, promErr string
	beforeClose := func() {
		want := joinServed(t, api)
		// Then Prometheus: its next scrapes carry what /metrics now says.
		defer func() { promErr = joinPromCheck(t, prom, api.scenarios["complete"].Workflow, want) }()
		deadline := time.Now().Add(30 * time.Second)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			fams, err := joinScrape(addr)
			if err == nil {
				live = fams
				wf, _ := joinSeries(fams, "cbc_workflow_cost_usd_total", map[string]string{"workflow": api.scenarios["complete"].Workflow})
				main, _ := joinSeries(fams, "cbc_cli_cost_usd_total", map[string]string{"scope": "main"})
				turns, _ := joinSeries(fams, "cbc_turns_total", map[string]string{"subtype": "success"})
				if joinClose(wf, want.Workflow.USD) && joinClose(main, want.Main.USD) && turns == 2 {
					liveErr = ""
					return
				}
				liveErr = fmt.Sprintf("workflow cost %v (want %v), main cost %v (want %v), success turns %v (want 2)", wf, want.Workflow.USD, main, want.Main.USD, turns)
			} else {
				liveErr = err.Error()
			}
			if time.Now().After(deadline) {
				liveErr = "not reached within 30 s: " + liveErr
				return
			}
			<-tick.C
		}
	}
	run := runClaude(t, bin, cli, api, claudeOpts{scenario: "complete", wrapped: true, env: env, beforeClose: beforeClose,
		runArgs: []string{"--join-cli-telemetry", "--otlp.endpoint", endpoint, "--otlp.protocol", proto,
			"--web.listen-address", addr, "--summary-file", summary}})
	if run.exitCode != 0 {
		t.Fatalf("cbc-otel run --join-cli-telemetry exited %d; stderr:\n%s", run.exitCode, run.stderr)
	}
	if run.stderr != "" {
		t.Logf("wrapper + CLI stderr:\n%s", run.stderr)
	}
	st := parseJoinStream(t, run.stdout)
	served := joinServed(t, api)
	scen := api.scenarios["complete"]
	checkJoinedTrace(t, j, began, userParent, userTrace, userSpan, st, served, scen)

	// The summary file: the run's cost.
	runs, _ := sdkSummaryRuns(t, summary)
	if len(runs) != 1 {
		t.Fatalf("summary has %d runs, want 1", len(runs))
	}
	if got, ok := joinRunCostUSD(runs[0]); !ok || !joinClose(got, served.Workflow.USD) {
		t.Errorf("summary run cost %v (present %v), want the agents' list-price sum %v", got, ok, served.Workflow.USD)
	}
	if got, ok := joinSessionCostUSD(t, summary); !ok || !joinClose(got, served.Main.USD) {
		t.Errorf("summary session (main conversation) cost %v (present %v), want %v", got, ok, served.Main.USD)
	}

	// /metrics as scraped live.
	if liveErr != "" {
		t.Errorf("the wrapper's /metrics: %s", liveErr)
	}
	joinCheckMetrics(t, live, st.Workflow, served)
	if promErr != "" {
		t.Errorf("Prometheus: %s", promErr)
	}
}

// joinPromCheck polls Prometheus's query API until the cost metrics it
// scraped from the wrapper equal what the stand-in served (want), or 30 s
// pass; it returns "" or what was last seen. It logs the values it got.
func joinPromCheck(t *testing.T, prom *prometheusServer, workflow string, want joinServedSums) string {
	t.Helper()
	one := func(v float64) map[string]float64 { return map[string]float64{"": v} }
	checks := []struct {
		q, by string // by: the label the result is keyed by ("" for one sample)
		want  map[string]float64
	}{
		{fmt.Sprintf(`sum(cbc_workflow_cost_usd_total{workflow=%q})`, workflow), "", one(want.Workflow.USD)},
		{`sum by (type)(cbc_workflow_model_tokens_total)`, "type", map[string]float64{
			"input": float64(want.Workflow.In), "output": float64(want.Workflow.Out)}},
		{`cbc_cli_cost_usd_total{scope="main"}`, "", one(want.Main.USD)},
		{`sum(cbc_cost_usd_total)`, "", one(want.All.USD)},
		{`cbc_turns_total{subtype="success"}`, "", one(2)},
	}
	// eval runs one check: its result keyed by the label, and "" when it
	// matches want, else what differs.
	eval := func(q, by string, want map[string]float64) (map[string]float64, string) {
		s, err := prom.query(q)
		if err != nil {
			return nil, err.Error()
		}
		got := map[string]float64{}
		for _, e := range s {
			got[e.Metric[by]] += e.Value
		}
		if by == "" && len(s) != 1 {
			return got, fmt.Sprintf("%d samples, want 1", len(s))
		}
		for k, w := range want {
			if v, ok := got[k]; !ok || !joinClose(v, w) {
				return got, fmt.Sprintf("%s=%v (present %v), want %v", k, v, ok, w)
			}
		}
		for k, v := range got {
			if _, ok := want[k]; !ok && v != 0 {
				return got, fmt.Sprintf("%s=%v, want 0 or absent", k, v)
			}
		}
		return got, ""
	}
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		var bad []string
		seen := make([]map[string]float64, len(checks))
		for i, c := range checks {
			got, diff := eval(c.q, c.by, c.want)
			seen[i] = got
			if diff != "" {
				bad = append(bad, fmt.Sprintf("%s: %s", c.q, diff))
			}
		}
		if len(bad) == 0 {
			var b strings.Builder
			for i, c := range checks {
				fmt.Fprintf(&b, "\n  %s = %v", c.q, seen[i])
			}
			t.Logf("Prometheus agrees with the stand-in %v after the session's last result:%s", time.Since(start).Round(time.Millisecond), b.String())
			return ""
		}
		if time.Now().After(deadline) {
			return "not reached within 30 s: " + strings.Join(bad, "; ")
		}
		<-tick.C
	}
}

// checkJoinedTrace finds the joined trace in Jaeger (the user's trace id,
// or the one trace of service cbc-otel), logs and writes its tree, and
// checks it span by span against the stream and what the stand-in served.
func checkJoinedTrace(t *testing.T, j *jaeger, began time.Time, userParent bool, userTrace, userSpan string, st joinStream, served joinServedSums, scen *mockScenario) {
	t.Helper()
	names := joinNameByLabel(scen)
	bashAgents := 0
	for _, a := range scen.Agents {
		if a.Mode == "bash" {
			bashAgents++
		}
	}

	// The trace: the user's, or the one Jaeger holds for service cbc-otel.
	traceID := userTrace
	if !userParent {
		ids := joinJaegerTraceIDs(t, j, egress.DefaultServiceName, began)
		if len(ids) != 1 {
			t.Fatalf("Jaeger holds %d traces of service %s, want 1: %v", len(ids), egress.DefaultServiceName, ids)
		}
		traceID = ids[0]
	}
	// Everything expected: the CLI's interactions (one per result line),
	// one llm_request per billed response, the Workflow tool with its
	// blocked_on_user and execution, each Bash agent's tool with its two;
	// ours: the workflow, its phases and agents, the minted root.
	wantCLI := len(st.Results) + served.All.Calls + 3 + 3*bashAgents
	wantOurs := 1 + len(scen.Phases) + len(scen.Agents)
	if !userParent {
		wantOurs++
	}
	tr := j.waitTrace(t, traceID, wantCLI+wantOurs)
	tree := joinJaegerTree(tr)
	treeFile := filepath.Join(t.TempDir(), "joined-tree.txt")
	if err := os.WriteFile(treeFile, []byte(tree), 0o644); err != nil {
		t.Fatal(err)
	}
	if d := os.Getenv("CBC_E2E_KEEP"); d != "" {
		os.WriteFile(filepath.Join(d, "joined-tree-"+strings.ReplaceAll(t.Name(), "/", "-")+".txt"), []byte(tree), 0o644)
	}
	t.Logf("the joined trace %s as Jaeger returns it (also in %s):\n%s", traceID, treeFile, tree)

	// One trace per CLI process: nothing of either service elsewhere.
	for _, svc := range []string{"claude-code", egress.DefaultServiceName} {
		if ids := joinJaegerTraceIDs(t, j, svc, began); len(ids) != 1 || ids[0] != traceID {
			t.Errorf("Jaeger's traces of service %s: %v, want only %s", svc, ids, traceID)
		}
	}

	svc := func(s jaegerSpan) string { return tr.Processes[s.ProcessID].ServiceName }
	byID := map[string]jaegerSpan{}
	for _, s := range tr.Spans {
		byID[s.SpanID] = s
	}
	str := func(s jaegerSpan, k string) string { v, _ := s.tag(k); x, _ := v.(string); return x }
	var (
		interactions, mainLLM []jaegerSpan
		wfTool, wfExec, root  jaegerSpan
		workflows, phases     []jaegerSpan
		agents                = map[string]jaegerSpan{} // by gen_ai.agent.id
		agentSpans            []jaegerSpan              // CLI spans with agent_id
	)
	for _, s := range tr.Spans {
		if s.TraceID != traceID {
			t.Errorf("span %s %s: trace %s, want %s", s.OperationName, s.SpanID, s.TraceID, traceID)
		}
		cliSpan := strings.HasPrefix(s.OperationName, "claude_code.")
		if wantSvc := map[bool]string{true: "claude-code", false: egress.DefaultServiceName}[cliSpan]; svc(s) != wantSvc {
			t.Errorf("span %s %s: service %q, want %q", s.OperationName, s.SpanID, svc(s), wantSvc)
		}
		switch {
		case s.OperationName == "claude_code.interaction":
			interactions = append(interactions, s)
		case cliSpan && str(s, "agent_id") != "":
			agentSpans = append(agentSpans, s)
		case s.OperationName == "claude_code.llm_request":
			mainLLM = append(mainLLM, s)
		case s.OperationName == "claude_code.tool" && str(s, "tool_name") == "Workflow":
			wfTool = s
		case strings.HasPrefix(s.OperationName, traces.OpInvokeWorkflow):
			workflows = append(workflows, s)
		case strings.HasPrefix(s.OperationName, traces.SpanPhase):
			phases = append(phases, s)
		case strings.HasPrefix(s.OperationName, traces.OpInvokeAgent):
			agents[str(s, traces.AttrAgentID)] = s
		case strings.HasPrefix(s.OperationName, "run "):
			root = s
		}
	}
	for _, s := range tr.Spans {
		if s.OperationName == "claude_code.tool.execution" && wfTool.SpanID != "" && s.parent() == wfTool.SpanID {
			wfExec = s
		}
	}

	// The top: TRACEPARENT → interactions.
	parentID := userSpan
	if userParent {
		if root.SpanID != "" {
			t.Errorf("the user's TRACEPARENT was set, yet the wrapper minted %q", root.OperationName)
		}
	} else {
		if root.SpanID == "" || !strings.Contains(root.OperationName, "claude") || root.parent() != "" {
			t.Fatalf("no minted root span `run claude` without parent; have %q parent %q", root.OperationName, root.parent())
		}
		parentID = root.SpanID
	}
	if len(interactions) != len(st.Results) {
		t.Errorf("%d claude_code.interaction spans, want one per result line: %d", len(interactions), len(st.Results))
	}
	for _, s := range interactions {
		if s.parent() != parentID {
			t.Errorf("interaction %s: parent %q, want the TRACEPARENT's span %s", s.SpanID, s.parent(), parentID)
		}
	}
	if len(mainLLM) != served.Main.Calls {
		t.Errorf("%d main-conversation llm_request spans, the stand-in served %d", len(mainLLM), served.Main.Calls)
	}
	for _, s := range mainLLM {
		if byID[s.parent()].OperationName != "claude_code.interaction" {
			t.Errorf("main llm_request %s: parent %q, want an interaction", s.SpanID, byID[s.parent()].OperationName)
		}
	}

	// The Workflow tool span → invoke_workflow → phases → agents.
	if wfTool.SpanID == "" || str(wfTool, "tool_use_id") != st.ToolUseID {
		t.Fatalf("no claude_code.tool Workflow span with tool_use_id %q (task_started's)", st.ToolUseID)
	}
	if wfExec.SpanID == "" || str(wfExec, "tool_use_id") != st.ToolUseID {
		t.Fatalf("no claude_code.tool.execution under the Workflow tool span %s", wfTool.SpanID)
	}
	if len(workflows) != 1 {
		t.Fatalf("%d invoke_workflow spans, want 1", len(workflows))
	}
	wf := workflows[0]
	if wf.OperationName != traces.OpInvokeWorkflow+" "+st.Workflow || wf.parent() != wfTool.SpanID {
		t.Errorf("%q: parent %s %q, want %q under the Workflow tool span %s", wf.OperationName, wf.parent(), byID[wf.parent()].OperationName,
			traces.OpInvokeWorkflow+" "+st.Workflow, wfTool.SpanID)
	}
	if str(wf, traces.AttrTaskID) != st.TaskID || str(wf, traces.AttrRunID) != st.RunID {
		t.Errorf("invoke_workflow: task/run %s/%s, the stream's %s/%s", str(wf, traces.AttrTaskID), str(wf, traces.AttrRunID), st.TaskID, st.RunID)
	}
	phaseByTitle := map[string]jaegerSpan{}
	for _, p := range phases {
		phaseByTitle[str(p, traces.AttrPhaseTitle)] = p
		if p.OperationName != traces.SpanPhase+" "+str(p, traces.AttrPhaseTitle) {
			t.Errorf("phase span %q, %s %q", p.OperationName, traces.AttrPhaseTitle, str(p, traces.AttrPhaseTitle))
		}
		if p.parent() != wf.SpanID {
			t.Errorf("phase %q: parent %s, want invoke_workflow %s", str(p, traces.AttrPhaseTitle), p.parent(), wf.SpanID)
		}
	}
	if len(phases) != len(scen.Phases) {
		t.Errorf("%d workflow_phase spans, want %d", len(phases), len(scen.Phases))
	}
	labelOf := map[string]string{}
	for _, label := range joinSortedLabels(st.Agents) {
		row := st.Agents[label]
		labelOf[row.AgentID] = label
		a, ok := agents[row.AgentID]
		if !ok {
			t.Errorf("no invoke_agent span with %s %s (%s)", traces.AttrAgentID, row.AgentID, label)
			continue
		}
		if a.OperationName != traces.OpInvokeAgent+" "+label || str(a, traces.AttrAgentName) != label {
			t.Errorf("agent %s: span %q, %s %q", row.AgentID, a.OperationName, traces.AttrAgentName, str(a, traces.AttrAgentName))
		}
		if p := phaseByTitle[row.Phase]; p.SpanID == "" || a.parent() != p.SpanID {
			t.Errorf("invoke_agent %s: parent %s %q, want its phase %q", label, a.parent(), byID[a.parent()].OperationName, row.Phase)
		}
		want := joinCost{}
		if c := served.Agents[names[label]]; c != nil {
			want = *c
		}
		joinCheckSpanCost(t, "invoke_agent "+label, a, want)
	}
	if len(agents) != len(st.Agents) {
		t.Errorf("%d invoke_agent spans, the stream has %d agents", len(agents), len(st.Agents))
	}
	joinCheckSpanCost(t, wf.OperationName, wf, served.Workflow)

	// The sub-agents' CLI spans: re-parented under their invoke_agent, linked
	// to the Workflow tool.execution; their nested spans keep their parent.
	agentLLM := map[string]int{}
	for _, s := range agentSpans {
		aid := str(s, "agent_id")
		a, ok := agents[aid]
		if !ok {
			t.Errorf("CLI span %s %s: agent_id %q has no invoke_agent span (stream agents %v)", s.OperationName, s.SpanID, aid, labelOf)
			continue
		}
		if s.parent() != a.SpanID {
			t.Errorf("CLI span %s %s (agent %s): parent %s %q, want invoke_agent %s", s.OperationName, s.SpanID, labelOf[aid], s.parent(), byID[s.parent()].OperationName, a.SpanID)
		}
		if !joinLinksTo(s, wfExec.SpanID) {
			t.Errorf("CLI span %s %s (agent %s): no link to its original parent, the Workflow tool.execution %s; references %+v", s.OperationName, s.SpanID, labelOf[aid], wfExec.SpanID, s.References)
		}
		if s.OperationName == "claude_code.llm_request" {
			agentLLM[aid]++
		}
		if s.OperationName == "claude_code.tool" {
			nested := 0
			for _, c := range tr.Spans {
				if c.parent() == s.SpanID {
					nested++
					if !strings.HasPrefix(c.OperationName, "claude_code.tool.") || str(c, "gen_ai.conversation.id") != aid {
						t.Errorf("under agent %s's %s: %q (gen_ai.conversation.id %q)", labelOf[aid], str(s, "tool_name"), c.OperationName, str(c, "gen_ai.conversation.id"))
					}
				}
			}
			if nested != 2 {
				t.Errorf("agent %s's tool span %s has %d children, want blocked_on_user and execution, kept under it", labelOf[aid], s.SpanID, nested)
			}
		}
	}
	for _, label := range joinSortedLabels(st.Agents) {
		want := 0
		if c := served.Agents[names[label]]; c != nil {
			want = c.Calls
		}
		if got := agentLLM[st.Agents[label].AgentID]; got != want {
			t.Errorf("agent %s: %d llm_request spans under its invoke_agent, the stand-in served %d", label, got, want)
		}
	}
	for _, s := range tr.Spans {
		if s.OperationName == "claude_code.tool.blocked_on_user" || s.OperationName == "claude_code.tool.execution" {
			if p := byID[s.parent()]; p.OperationName != "claude_code.tool" {
				t.Errorf("%s %s: parent %q, want its claude_code.tool", s.OperationName, s.SpanID, p.OperationName)
			}
		}
	}
	if n := len(tr.Spans); n != wantCLI+wantOurs {
		t.Errorf("%d spans in the trace, want %d (%d of the CLI, %d of ours)", n, wantCLI+wantOurs, wantCLI, wantOurs)
	}

}

// joinRunCostUSD is a --summary-file / --json run's cost (the field's name
// is not settled: change it here).
// joinSessionCostUSD reads the main conversation's cost from the summary
// file's session line.
func joinSessionCostUSD(t *testing.T, path string) (float64, bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(l, &m) == nil && m["kind"] == "session" {
			return joinRunCostUSD(m)
		}
	}
	return 0, false
}

func joinRunCostUSD(run map[string]any) (float64, bool) {
	v, ok := run["cost_usd"]
	if !ok {
		return 0, false
	}
	return joinAttrFloat(v)
}

// joinCheckSpanCost compares an invoke_* span's tokens and cost with what
// the stand-in served.
func joinCheckSpanCost(t *testing.T, what string, s jaegerSpan, want joinCost) {
	t.Helper()
	get := func(k string) (any, bool) { return s.tag(k) }
	in, _ := get("gen_ai.usage.input_tokens")
	out, _ := get("gen_ai.usage.output_tokens")
	usd, _ := get("cbc.usage.cost_usd")
	i, ok1 := joinAttrInt(in)
	o, ok2 := joinAttrInt(out)
	c, ok3 := joinAttrFloat(usd)
	if !ok1 || !ok2 || !ok3 || i != want.In || o != want.Out || !joinClose(c, want.USD) {
		t.Errorf("%s: gen_ai.usage.input_tokens %v, gen_ai.usage.output_tokens %v, cbc.usage.cost_usd %v; the stand-in served %d in, %d out, $%v at list price",
			what, in, out, usd, want.In, want.Out, want.USD)
	}
}

// joinLinksTo reports whether s references span id other than as its
// parent (Jaeger turns OTLP links into FOLLOWS_FROM references).
func joinLinksTo(s jaegerSpan, id string) bool {
	parent := s.parent()
	for _, r := range s.References {
		if r.SpanID == id && (r.RefType != "CHILD_OF" || parent != id) {
			return true
		}
	}
	return false
}

// joinCheckMetrics compares the cost metrics with what the stand-in served.
func joinCheckMetrics(t *testing.T, fams map[string]*dto.MetricFamily, workflow string, served joinServedSums) {
	t.Helper()
	if fams == nil {
		t.Errorf("no scrape of the wrapper's /metrics succeeded")
		return
	}
	eq := func(name string, labels map[string]string, want float64) {
		t.Helper()
		got, ok := joinSeries(fams, name, labels)
		if want == 0 && !ok {
			return // a zero series may be absent
		}
		if !joinClose(got, want) {
			t.Errorf("%s%v = %v (present %v), want %v", name, labels, got, ok, want)
		}
	}
	eq("cbc_workflow_cost_usd_total", map[string]string{"workflow": workflow}, served.Workflow.USD)
	for m, c := range served.Workflow.Models {
		for typ, want := range map[string]int64{"input": c.In, "output": c.Out, "cache_read": 0, "cache_creation": 0} {
			eq("cbc_workflow_model_tokens_total", map[string]string{"workflow": workflow, "model": m, "type": typ}, float64(want))
		}
	}
	eq("cbc_cli_cost_usd_total", map[string]string{"scope": "workflow"}, served.Workflow.USD)
	eq("cbc_cli_cost_usd_total", map[string]string{"scope": "main"}, served.Main.USD)
	eq("cbc_cli_cost_usd_total", map[string]string{"scope": "unmatched"}, 0)
	// From the result lines: the session's cumulative cost, agents included.
	for m, c := range served.All.Models {
		eq("cbc_cost_usd_total", map[string]string{"model": m}, c.USD)
		for typ, want := range map[string]int64{"input": c.In, "output": c.Out, "cache_read": 0, "cache_creation": 0} {
			eq("cbc_model_tokens_total", map[string]string{"model": m, "type": typ}, float64(want))
		}
	}
	eq("cbc_turns_total", map[string]string{"subtype": "success"}, 2)
}

// joinScrape GETs the wrapper's /metrics.
func joinScrape(addr string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// joinSeries sums the samples of family name whose labels include labels;
// ok is false when none matches.
func joinSeries(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (sum float64, ok bool) {
	mf := fams[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range labels {
			match = match && have[k] == v
		}
		if !match {
			continue
		}
		ok = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum, ok
}

// joinJaegerTraceIDs lists the ids of the traces Jaeger holds for service
// since began (none yet is not an error: an empty list).
func joinJaegerTraceIDs(t *testing.T, j *jaeger, service string, began time.Time) []string {
	t.Helper()
	q := url.Values{}
	q.Set("service", service)
	q.Set("start", fmt.Sprint(began.Add(-time.Minute).UnixMicro()))
	q.Set("end", fmt.Sprint(time.Now().Add(time.Minute).UnixMicro()))
	q.Set("limit", "100")
	u := fmt.Sprintf("http://%s/api/traces?%s", j.query, q.Encode())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		// Poll until the service is known and has a trace (the batch
		// processor stores within a few hundred ms).
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			var body struct {
				Data []struct {
					TraceID string `json:"traceID"`
				} `json:"data"`
			}
			derr := json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if derr == nil && resp.StatusCode == http.StatusOK && len(body.Data) > 0 {
				var ids []string
				seen := map[string]bool{}
				for _, d := range body.Data {
					if !seen[d.TraceID] {
						seen[d.TraceID] = true
						ids = append(ids, d.TraceID)
					}
				}
				sort.Strings(ids)
				return ids
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Errorf("Jaeger has no trace of service %s (last error %v)", service, err)
			return nil
		}
	}
}

// joinJaegerTree renders a Jaeger trace indented by parent (roots: spans
// whose parent is not in the trace), children in start order, with the
// attributes the join is about and the links (non-parent references).
func joinJaegerTree(tr jaegerTrace) string {
	in := map[string]bool{}
	kids := map[string][]jaegerSpan{}
	for _, s := range tr.Spans {
		in[s.SpanID] = true
	}
	var roots []jaegerSpan
	for _, s := range tr.Spans {
		if p := s.parent(); in[p] {
			kids[p] = append(kids[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	order := func(l []jaegerSpan) {
		sort.SliceStable(l, func(i, j int) bool { return l[i].StartTime < l[j].StartTime })
	}
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s\n", tr.TraceID)
	var walk func(s jaegerSpan, depth int)
	walk = func(s jaegerSpan, depth int) {
		var attrs []string
		for _, k := range []string{"tool_name", "tool_use_id", "agent_id", traces.AttrAgentID, traces.AttrPhaseTitle,
			"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "cbc.usage.cost_usd", "input_tokens", "output_tokens"} {
			if v, ok := s.tag(k); ok {
				attrs = append(attrs, fmt.Sprintf("%s=%v", k, v))
			}
		}
		for _, r := range s.References {
			if r.RefType != "CHILD_OF" || r.SpanID != s.parent() {
				attrs = append(attrs, fmt.Sprintf("link(%s)->%s", r.RefType, r.SpanID))
			}
		}
		line := fmt.Sprintf("%s%s [%s] %s", strings.Repeat("  ", depth), s.OperationName, tr.Processes[s.ProcessID].ServiceName, s.SpanID)
		if p := s.parent(); p != "" && !in[p] {
			line += " parent=" + p + " (not in trace)"
		}
		fmt.Fprintf(&b, "%s %s\n", line, strings.Join(attrs, " "))
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
