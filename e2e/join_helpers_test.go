package e2e

// What the joined-telemetry tests share: the environment that switches
// Claude Code's own telemetry on, the stream facts the join keys on, the
// CLI's list prices, and what the stand-in served, summed the ways the
// CLI's api_request events and cbc-otel's cost metrics are.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"testing"
)

// joinModel is the model the joined tests have the CLI use (its default,
// claude-opus-5-5 in 2.1.328, has no price the corpus shows): every call,
// the sub-agents' included, is then priced at joinListPrices[joinModel].
const joinModel = "claude-sonnet-4-5"

// joinModelEnv pins the CLI's model.
var joinModelEnv = []string{"ANTHROPIC_MODEL=" + joinModel}

// joinToken is the receiver's secret joinCLIEnv hands the CLI, as run
// does (base64url, like the token run makes).
const joinToken = "e2e-token-0123456789abcdefABCDEF_-xyz"

// joinCLIEnv is what `run --cli-telemetry.join` gives the child (the
// specification of the feature): Claude Code's metrics, log events and
// (beta) traces, OTLP/HTTP protobuf to endpoint, exported every 500 ms,
// each request with the receiver's token (the per-signal headers
// variables, percent-encoded as run sets them).
func joinCLIEnv(endpoint string) []string {
	return []string{
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS=authorization=Bearer%20" + joinToken,
		"OTEL_EXPORTER_OTLP_LOGS_HEADERS=authorization=Bearer%20" + joinToken,
		"OTEL_EXPORTER_OTLP_METRICS_HEADERS=authorization=Bearer%20" + joinToken,
		"CLAUDE_CODE_ENABLE_TELEMETRY=1",
		"CLAUDE_CODE_ENHANCED_TELEMETRY_BETA=1",
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_LOGS_EXPORTER=otlp",
		"OTEL_METRICS_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_TRACES_EXPORT_INTERVAL=500",
		"OTEL_LOGS_EXPORT_INTERVAL=500",
		"OTEL_METRIC_EXPORT_INTERVAL=1000",
	}
}

// joinTraceparent returns a fresh sampled W3C traceparent and its trace
// and span ids.
func joinTraceparent(t *testing.T) (tp, traceID, spanID string) {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	traceID, spanID = hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
	return "00-" + traceID + "-" + spanID + "-01", traceID, spanID
}

// joinAgentRow is one workflow_agent row of the last snapshot.
type joinAgentRow struct {
	Label, AgentID, Phase, State string
	Index                        int64
}

// joinStream is what the join keys on, as the CLI's stdout says it.
type joinStream struct {
	SessionID, TaskID, RunID, ToolUseID, Workflow string
	Agents                                        map[string]joinAgentRow // by label
	Results                                       []map[string]any        // result lines, in order
}

func parseJoinStream(t *testing.T, stdout []byte) joinStream {
	t.Helper()
	s := joinStream{Agents: map[string]joinAgentRow{}}
	for _, l := range bytes.Split(stdout, []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(l, &m) != nil {
			continue
		}
		switch {
		case m["type"] == "result":
			s.Results = append(s.Results, m)
		case m["type"] == "system" && m["subtype"] == "task_started" && m["task_type"] == "local_workflow":
			s.SessionID, _ = m["session_id"].(string)
			s.TaskID, _ = m["task_id"].(string)
			s.RunID, _ = m["run_id"].(string)
			s.ToolUseID, _ = m["tool_use_id"].(string)
			s.Workflow, _ = m["workflow_name"].(string)
		case m["type"] == "system" && m["subtype"] == "task_progress":
			wp, _ := m["workflow_progress"].([]any)
			for _, x := range wp {
				e, _ := x.(map[string]any)
				if e["type"] != "workflow_agent" {
					continue
				}
				r := joinAgentRow{Index: sdkNum(e["index"])}
				r.Label, _ = e["label"].(string)
				r.AgentID, _ = e["agentId"].(string)
				r.Phase, _ = e["phaseTitle"].(string)
				r.State, _ = e["state"].(string)
				if old := s.Agents[r.Label]; r.AgentID == "" {
					r.AgentID = old.AgentID
				}
				s.Agents[r.Label] = r
			}
		}
	}
	if s.ToolUseID == "" || len(s.Agents) == 0 || len(s.Results) == 0 {
		t.Fatalf("stdout lacks the workflow's task_started (tool_use_id %q), agent rows (%d) or result lines (%d)", s.ToolUseID, len(s.Agents), len(s.Results))
	}
	return s
}

// joinPrice is a model's list price in USD per token, as Claude Code
// prices a call ("costBasis": "list" in modelUsage). Checked against the
// corpus (claude-code-2.1.334-otel): claude-sonnet-4-5, 100 input + 20
// output tokens cost 0.0006 (api_request.cost_usd), 200 + 40 cost 0.0012
// (result.total_cost_usd).
type joinPrice struct{ In, Out, CacheRead, CacheWrite float64 }

var joinListPrices = map[string]joinPrice{
	"claude-sonnet-4-5": {In: 3e-6, Out: 15e-6, CacheRead: 0.3e-6, CacheWrite: 3.75e-6},
}

// joinCost is what some of the stand-in's responses add up to.
type joinCost struct {
	Calls   int
	In, Out int64
	USD     float64
	Models  map[string]joinCost // per model (Models of a per-model entry is nil)
}

func (c *joinCost) add(t *testing.T, r mockRequest) {
	t.Helper()
	p, ok := joinListPrices[r.Model]
	if !ok {
		t.Fatalf("no list price for model %q (the stand-in served it): add it to joinListPrices", r.Model)
	}
	usd := float64(r.Input)*p.In + float64(r.Output)*p.Out
	c.Calls++
	c.In += int64(r.Input)
	c.Out += int64(r.Output)
	c.USD += usd
	if c.Models == nil {
		c.Models = map[string]joinCost{}
	}
	m := c.Models[r.Model]
	m.Calls++
	m.In += int64(r.Input)
	m.Out += int64(r.Output)
	m.USD += usd
	c.Models[r.Model] = m
}

// joinServed sums the stand-in's successful responses (the ones the CLI is
// billed for): per agent name, the workflow's agents together, the rest
// (main conversation and side requests), and all.
type joinServedSums struct {
	Agents         map[string]*joinCost
	Workflow, Main joinCost
	All            joinCost
}

func joinServed(t *testing.T, api *mockAnthropic) joinServedSums {
	t.Helper()
	s := joinServedSums{Agents: map[string]*joinCost{}}
	for _, r := range api.requests() {
		if r.Status != 200 || r.Reply == "hang" || (r.Kind != "agent" && r.Kind != "main" && r.Kind != "side") {
			continue
		}
		s.All.add(t, r)
		if r.Kind != "agent" {
			s.Main.add(t, r)
			continue
		}
		s.Workflow.add(t, r)
		if s.Agents[r.Agent] == nil {
			s.Agents[r.Agent] = &joinCost{}
		}
		s.Agents[r.Agent].add(t, r)
	}
	return s
}

// joinClose reports whether two USD amounts agree (they are sums of
// float64 products, in different orders).
func joinClose(a, b float64) bool { return math.Abs(a-b) <= 1e-9+1e-9*math.Abs(b) }

// joinNameByLabel maps the scenario's agent labels to the stand-in's agent
// names.
func joinNameByLabel(sc *mockScenario) map[string]string {
	out := map[string]string{}
	for _, a := range sc.Agents {
		out[a.Label] = a.Name
	}
	return out
}

// joinAttrInt reads an integer attribute however it was decoded (OTLP
// int, JSON number, or a string, as Claude Code's log events spell some).
func joinAttrInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case float64:
		return int64(x), x == math.Trunc(x)
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	case string:
		var n int64
		_, err := fmt.Sscan(x, &n)
		return n, err == nil
	}
	return 0, false
}

// joinAttrFloat reads a float attribute however it was decoded.
func joinAttrFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	case string:
		var f float64
		_, err := fmt.Sscan(x, &f)
		return f, err == nil
	}
	return 0, false
}

func joinSortedLabels(m map[string]joinAgentRow) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
