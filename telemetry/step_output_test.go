package telemetry

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/report"
)

// stepOutputCount is how many outputs run writes: the README's table, whose
// names and order the binary's test holds (cmd/cbc-otel stepOutputNames).
const stepOutputCount = 11

// TestStepOutputs: the values as written: an unknown spend empty (never
// 0), a cost without its float noise and never in exponent form, only
// workflow runs counted, and cbc-runs-json bounded in runs and name length
// and marked untrusted.
func TestStepOutputs(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	wf := func(name string, st ingest.RunStatus) ingest.Run {
		return ingest.Run{Workflow: true, Name: name, Status: st}
	}
	many := make([]ingest.Run, maxRunsJSON+5)
	for i := range many {
		many[i] = wf("w", ingest.StatusCompleted)
	}
	for _, c := range []struct {
		name  string
		runs  []ingest.Run
		spend report.SpendTotals
		want  map[string]string
		json  int // runs in cbc-runs-json
	}{
		{name: "nothing known", want: map[string]string{"cbc-cost-usd": "", "cbc-tokens-input": "", "cbc-tokens-cache-creation": "", "cbc-runs-total": "0", "cbc-runs-json": "[]"}},
		{name: "float noise", spend: report.SpendTotals{CostUSD: f(0.015599999999999998)}, want: map[string]string{"cbc-cost-usd": "0.0156"}},
		{name: "tiny and huge, no exponent", spend: report.SpendTotals{CostUSD: f(1.5e-7)}, want: map[string]string{"cbc-cost-usd": "0.00000015"}},
		{name: "huge", spend: report.SpendTotals{CostUSD: f(12345678.5)}, want: map[string]string{"cbc-cost-usd": "12345678.5"}},
		{name: "a known 0", spend: report.SpendTotals{CostUSD: f(0), Tokens: &report.TokensByType{}},
			want: map[string]string{"cbc-cost-usd": "0", "cbc-tokens-input": "0", "cbc-tokens-cache-read": "0"}},
		{name: "tokens by type", spend: report.SpendTotals{Tokens: &report.TokensByType{Input: 1, Output: 2, CacheRead: 3, CacheCreation: 4}},
			want: map[string]string{"cbc-cost-usd": "", "cbc-tokens-input": "1", "cbc-tokens-output": "2", "cbc-tokens-cache-read": "3", "cbc-tokens-cache-creation": "4"}},
		{name: "runs by status, tasks left out",
			runs: []ingest.Run{wf("a", ingest.StatusCompleted), wf("b", ingest.StatusFailed), wf("c", ingest.StatusStopped), wf("d", ingest.StatusAbandoned), wf("e", ingest.StatusFailed), {Status: ingest.StatusCompleted}},
			want: map[string]string{"cbc-runs-completed": "1", "cbc-runs-failed": "2", "cbc-runs-stopped": "1", "cbc-runs-abandoned": "1", "cbc-runs-total": "5"}, json: 5},
		{name: "runs beyond the bound counted, not listed", runs: many, want: map[string]string{"cbc-runs-total": "105", "cbc-runs-completed": "105"}, json: maxRunsJSON},
	} {
		outs := stepOutputs(c.runs, c.spend)
		got := map[string]string{}
		for _, o := range outs {
			got[o.Name] = o.Value
			if o.Untrusted != (o.Name == outRunsJSON) {
				t.Errorf("%s: %s untrusted=%v", c.name, o.Name, o.Untrusted)
			}
		}
		if len(got) != stepOutputCount {
			t.Errorf("%s: %d outputs, want %d", c.name, len(got), stepOutputCount)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: %s=%q, want %q", c.name, k, got[k], v)
			}
		}
		var list []runOutput
		if err := json.Unmarshal([]byte(got[outRunsJSON]), &list); err != nil || len(list) != c.json {
			t.Errorf("%s: cbc-runs-json %v, %d runs, want %d", c.name, err, len(list), c.json)
		}
	}
	long := strings.Repeat("é", maxRunsJSONRunes+10)
	outs := stepOutputs([]ingest.Run{wf(long, ingest.StatusCompleted)}, report.SpendTotals{})
	var list []runOutput
	if err := json.Unmarshal([]byte(outs[len(outs)-1].Value), &list); err != nil || list[0].Workflow != long[:2*maxRunsJSONRunes] {
		t.Errorf("a long name: %v, %q", err, outs[len(outs)-1].Value)
	}
}
