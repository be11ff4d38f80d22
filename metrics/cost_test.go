package metrics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/exposition"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/tap"
)

func nearly(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

// TestCostFromRecordings replays every recording with result lines into
// one Metrics: the cost and tokens by model are the sums of each session's
// LAST cumulative values (read here with encoding/json), the turns are the
// result lines.
func TestCostFromRecordings(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "corpus", "*", "*.ndjson"))
	more, _ := filepath.Glob(filepath.Join("..", "testdata", "written-at", "*.ndjson"))
	stats := new(ingest.Stats)
	m := newTest(t, Options{Stats: stats})
	var wantCost float64
	wantTokens := map[string]float64{}
	results := 0
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lastOf := map[string]map[string]any{}
		for _, l := range bytes.Split(b, []byte("\n")) {
			var r map[string]any
			if json.Unmarshal(l, &r) != nil || r["type"] != "result" {
				continue
			}
			results++
			lastOf[r["session_id"].(string)] = r
		}
		for _, r := range lastOf {
			wantCost += r["total_cost_usd"].(float64)
			mu, _ := r["modelUsage"].(map[string]any)
			for name, v := range mu {
				fields := v.(map[string]any)
				for typ, field := range map[string]string{"input": "inputTokens", "output": "outputTokens",
					"cache_read": "cacheReadInputTokens", "cache_creation": "cacheCreationInputTokens"} {
					wantTokens["model="+name+",type="+typ] += fields[field].(float64)
				}
			}
		}
		p := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{m}, Stats: stats}})
		p.Write(tap.SourceStdout, b)
		p.Close()
	}
	cost := series(t, m.Registry(), "cbc_cost_usd_total")
	if len(cost) != 1 || !nearly(cost["model=claude-sonnet-4-5"], wantCost) || wantCost == 0 {
		t.Errorf("cbc_cost_usd_total %v, want claude-sonnet-4-5 %v", cost, wantCost)
	}
	tokens := series(t, m.Registry(), "cbc_model_tokens_total")
	for k, v := range wantTokens {
		if tokens[k] != v {
			t.Errorf("cbc_model_tokens_total{%s} = %v, want %v", k, tokens[k], v)
		}
	}
	if len(tokens) != len(wantTokens) {
		t.Errorf("token series %v, want %v", tokens, wantTokens)
	}
	if got := series(t, m.Registry(), "cbc_turns_total")["subtype=success"]; got != float64(results) || results < 10 {
		t.Errorf("cbc_turns_total{success} = %v, want %d", got, results)
	}
	if got := series(t, m.Registry(), "cbc_turn_duration_seconds")[""]; got != float64(results) {
		t.Errorf("cbc_turn_duration_seconds count %v, want %d", got, results)
	}
}

func turn(subtype string, ms int64, models ...cost.Model) ingest.Lifecycle {
	return ingest.Lifecycle{Kind: ingest.TurnEnded, Turn: &ingest.Turn{SessionID: "s", Subtype: subtype, DurationMs: ms, Delta: models}}
}

func usage(model string, usd float64, tok ...int64) cost.Model {
	u := cost.Model{Model: model, CostUSD: usd}
	copy(u.Tokens[:], tok)
	return u
}

// TestCostModelCap: the model label admits MaxModels names; later ones are
// "other" and counted, and each admitted name has its series pre-created.
func TestCostModelCap(t *testing.T) {
	m := newTest(t, Options{MaxModels: 2})
	m.Observe(turn("success", 1500, usage("opus", 1, 10), usage("haiku", 0.5, 0, 5)))
	m.Observe(turn("success", 2500, usage("sonnet", 0.25, 1), usage("x\x1b[31m", 0.25, 1), usage("opus", 1, 10)))
	m.Observe(turn("error_max_turns", 0, usage("", 0.125, 0, 0, 3)))
	cost := series(t, m.Registry(), "cbc_cost_usd_total")
	want := map[string]float64{"model=opus": 2, "model=haiku": 0.5, "model=other": 0.5, "model=unknown": 0.125}
	if fmt.Sprint(cost) != fmt.Sprint(want) {
		t.Errorf("cost %v, want %v", cost, want)
	}
	if got := testutil.ToFloat64(m.cost.modelOverflow); got != 2 {
		t.Errorf("overflow %v, want 2", got)
	}
	tokens := series(t, m.Registry(), "cbc_model_tokens_total")
	if len(tokens) != 4*4 || tokens["model=opus,type=input"] != 20 || tokens["model=haiku,type=output"] != 5 ||
		tokens["model=other,type=input"] != 2 || tokens["model=unknown,type=cache_read"] != 3 || tokens["model=haiku,type=cache_creation"] != 0 {
		t.Errorf("tokens %v", tokens)
	}
	turns := series(t, m.Registry(), "cbc_turns_total")
	if turns["subtype=success"] != 2 || turns["subtype=error_max_turns"] != 1 || turns["subtype=other"] != 0 || len(turns) != 6 {
		t.Errorf("turns %v", turns)
	}
	if d := series(t, m.Registry(), "cbc_turn_duration_seconds"); d[""] != 2 || d["__sum"] != 4 {
		t.Errorf("durations %v (a turn without a duration is not observed)", d)
	}
}

func TestTurnSubtypeLabel(t *testing.T) {
	m := newTest(t, Options{})
	for _, s := range append(TurnSubtypes(), "error_new_kind", "Success", "", strings.Repeat("x", 1000)) {
		m.Observe(turn(s, 1000))
	}
	turns := series(t, m.Registry(), "cbc_turns_total")
	if turns["subtype=other"] != 4 || len(turns) != len(TurnSubtypes())+1 {
		t.Errorf("turns %v", turns)
	}
	for _, s := range TurnSubtypes() {
		if turns["subtype="+s] != 1 {
			t.Errorf("%s: %v", s, turns["subtype="+s])
		}
	}
}

// TestModelCalls: the CLI's own telemetry's calls count by scope, and a
// workflow's by workflow (its run's label when the run is known, else the
// name through the same cap) and model; amounts that are not positive
// finite numbers, and scopes outside the set, are ignored.
func TestModelCalls(t *testing.T) {
	m := newTest(t, Options{MaxWorkflows: 1, MaxModels: 1})
	call := func(scope ingest.CallScope, wf string, run *ingest.Run, u cost.Model) {
		m.Observe(ingest.Lifecycle{Kind: ingest.ModelCallSeen, Run: run,
			Call: &ingest.ModelCall{AgentID: "a", SessionID: "s", Cost: u, Scope: scope, Workflow: wf}})
	}
	run := &ingest.Run{Workflow: true, Name: "review"}
	m.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: run})
	call(ingest.CallMain, "", nil, usage("opus", 1, 100, 10))
	call(ingest.CallWorkflow, "review", run, usage("opus", 0.5, 50, 5, 7, 1))
	call(ingest.CallWorkflow, "review", nil, usage("haiku", 0.25, 1)) // a model over the cap
	call(ingest.CallWorkflow, "deploy", nil, usage("opus", 0.125, 2)) // a workflow over the cap
	call(ingest.CallUnmatched, "", nil, usage("opus", 2, 1))
	call(ingest.CallMain, "", nil, usage("opus", math.NaN(), -5))
	call(ingest.CallMain, "", nil, usage("opus", -1))
	call(ingest.CallMain, "", nil, usage("opus", math.Inf(1)))
	call(ingest.CallScope(9), "", nil, usage("opus", 1))
	cli := series(t, m.Registry(), "cbc_cli_cost_usd_total")
	if want := map[string]float64{"scope=main": 1, "scope=workflow": 0.875, "scope=unmatched": 2}; fmt.Sprint(cli) != fmt.Sprint(want) {
		t.Errorf("cli cost %v, want %v", cli, want)
	}
	wf := series(t, m.Registry(), "cbc_workflow_cost_usd_total")
	if want := map[string]float64{"workflow=review": 0.75, "workflow=other": 0.125}; fmt.Sprint(wf) != fmt.Sprint(want) {
		t.Errorf("workflow cost %v, want %v", wf, want)
	}
	tok := series(t, m.Registry(), "cbc_workflow_model_tokens_total")
	if tok["model=opus,type=input,workflow=review"] != 50 || tok["model=opus,type=cache_read,workflow=review"] != 7 ||
		tok["model=other,type=input,workflow=review"] != 1 || tok["model=opus,type=input,workflow=other"] != 2 {
		t.Errorf("workflow tokens %v", tok)
	}
	// Result-line families are untouched by calls, and the other way round.
	if c := series(t, m.Registry(), "cbc_cost_usd_total"); c["model=opus"] != 0 {
		t.Errorf("cbc_cost_usd_total %v", c)
	}
}

// TestCostRestartIsExact: result lines of several sessions and more models
// than the cap, processed in one process and again with a restart after
// every line (the Tracker's snapshot with its session baselines, the
// checkpoint with its totals and admitted model labels): the cumulative
// families are identical. Without the baselines a restart would count a
// session's whole cost again; without the labels a model over the cap
// before the restart could be admitted after it.
func TestCostRestartIsExact(t *testing.T) {
	var ls [][]byte
	for i := 1; i <= 6; i++ {
		for _, s := range []string{"A", "B"} {
			models := fmt.Sprintf(`"m1":{"inputTokens":%d,"outputTokens":%d,"costUSD":%g}`, 100*i, 7*i, 0.01*float64(i))
			if i >= 2 && s == "B" {
				models += fmt.Sprintf(`,"m2":{"inputTokens":%d,"costUSD":%g}`, i, 0.001*float64(i))
			}
			if i >= 4 {
				models += fmt.Sprintf(`,"m3":{"cacheReadInputTokens":%d,"costUSD":%g}`, 1000*i, 0.002*float64(i))
			}
			ls = append(ls, fmt.Appendf(nil, `{"type":"result","subtype":"success","duration_ms":%d,"session_id":"%s","total_cost_usd":%g,"modelUsage":{%s}}`+"\n",
				900*i, s, 0.02*float64(i), models))
		}
	}
	opts := Options{MaxModels: 2}
	feed := func(m *Metrics, ls [][]byte) *ingest.Pipeline {
		p := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{m}}})
		for _, l := range ls {
			p.Write(tap.SourceStdout, l)
		}
		return p
	}
	whole := newTest(t, opts)
	feed(whole, ls).Close()
	// Float sums depend on the order of additions: values are compared
	// to 9 decimals.
	rounded := func(g prometheus.Gatherer) string {
		return regexp.MustCompile(`value:\s+[0-9.e+-]+`).ReplaceAllStringFunc(canonical(t, g), func(v string) string {
			f, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(v, "value:")), 64)
			return fmt.Sprintf("value: %.9f", f)
		})
	}
	want := rounded(whole.Registry())
	if c := series(t, whole.Registry(), "cbc_cost_usd_total"); !nearly(c["model=m1"], 0.12) || !nearly(c["model=other"], 0.024) {
		t.Fatalf("uninterrupted cost %v", c)
	}
	for cut := range len(ls) + 1 {
		m1 := newTest(t, opts)
		c1 := exposition.NewCumulative(m1.Registry(), "cbc_")
		snap := feed(m1, ls[:cut]).Tracker().Snapshot()
		saved, err := NewCheckpoint(m1, c1).SaveCheckpoint()
		if err != nil {
			t.Fatal(err)
		}
		m2 := newTest(t, opts)
		c2 := exposition.NewCumulative(m2.Registry(), "cbc_")
		q := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{m2}}})
		if err := q.Tracker().Restore(snap, snap.Now); err != nil {
			t.Fatal(err)
		}
		commit, err := NewCheckpoint(m2, c2).RestoreCheckpoint(saved)
		if err != nil {
			t.Fatal(err)
		}
		commit()
		for _, l := range ls[cut:] {
			q.Write(tap.SourceStdout, l)
		}
		q.Close()
		if got := rounded(c2); got != want {
			t.Fatalf("restart after line %d: cumulative families differ\n got:\n%s\nwant:\n%s", cut, got, want)
		}
	}
}
