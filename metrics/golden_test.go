package metrics

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cbc-otel/cbc-otel/exposition"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/golden"
	"github.com/cbc-otel/cbc-otel/safetext"
	"github.com/cbc-otel/cbc-otel/simulate"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// simEpoch is the simulator's virtual clock start used by the goldens.
const simEpoch = 1796205994000

// cbcFamilies keeps the cbc_* families whose values are a function of the
// input alone: build info (Go version) is left out.
func cbcFamilies(g prometheus.Gatherer) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := exposition.WithPrefix(g, "cbc_").Gather()
		out := mfs[:0]
		for _, mf := range mfs {
			if mf.GetName() != "cbc_otel_build_info" {
				out = append(out, mf)
			}
		}
		return out, err
	})
}

// newTest builds a Metrics without runtime collectors.
func newTest(t *testing.T, opts Options) *Metrics {
	t.Helper()
	opts.NoRuntimeCollectors = true
	if opts.Version == "" {
		opts.Version = "test"
	}
	m, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// replay runs a recording through a replay pipeline into a fresh Metrics.
func replay(t *testing.T, stream io.Reader) *Metrics {
	t.Helper()
	stats := new(ingest.Stats)
	m := newTest(t, Options{Stats: stats})
	p := ingest.NewPipeline(ingest.PipelineOptions{
		Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{m}, Stats: stats, Grace: ingest.DefaultGrace},
	})
	if err := ingest.Feed(context.Background(), p, tap.SourceStdout, stream); err != nil {
		t.Fatalf("Feed: %v", err)
	}
	p.Close()
	return m
}

// checkGolden compares the cbc_* exposition of m with testdata/name, or
// rewrites it under -update.
func checkGolden(t *testing.T, m *Metrics, name string) {
	t.Helper()
	// Not testutil.GatherAndFormat: without names it keeps nothing. The
	// file is what --metrics-file writes.
	path := filepath.Join(t.TempDir(), "metrics.prom")
	if err := exposition.WriteFile(path, cbcFamilies(m.Registry())); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, filepath.Join("testdata", name), b)
}

// expected is the ground truth of one stream: the corpus's hand-written
// X.expected.ndjson or the simulator's --expect output.
type expected struct {
	runs     map[[2]string]float64 // workflow, status
	agents   map[[2]string]float64 // workflow, state
	tokens   map[string]float64
	toolUses map[string]float64
	tasks    map[[2]string]float64 // task_type, status
	durCount map[[2]string]float64 // runs with a known duration, by workflow, status
	durSum   map[[2]string]float64
	stats    *expectedStats
}

type expectedStats struct {
	Lines      int64            `json:"lines"`
	Bytes      int64            `json:"bytes"`
	Rejected   map[string]int64 `json:"rejected"`
	Violations map[string]int64 `json:"violations"`
}

func readExpected(t *testing.T, r io.Reader) expected {
	t.Helper()
	e := expected{
		runs: map[[2]string]float64{}, agents: map[[2]string]float64{}, tokens: map[string]float64{},
		toolUses: map[string]float64{}, tasks: map[[2]string]float64{},
		durCount: map[[2]string]float64{}, durSum: map[[2]string]float64{},
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var line struct {
			Kind       string `json:"kind"`
			TaskType   string `json:"task_type"`
			Workflow   string `json:"workflow"`
			Status     string `json:"status"`
			DurationMS int64  `json:"duration_ms"`
			Start      int64  `json:"start"`
			End        int64  `json:"end"`
			Tokens     int64  `json:"tokens"`
			ToolUses   int64  `json:"tool_uses"`
			Agents     []struct {
				State string `json:"state"`
			} `json:"agents"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("expected line: %v", err)
		}
		switch line.Kind {
		case "workflow":
			wf := safetext.Clean(line.Workflow, maxLabelLen)
			e.runs[[2]string{wf, line.Status}]++
			e.tokens[wf] += float64(line.Tokens)
			e.toolUses[wf] += float64(line.ToolUses)
			for _, a := range line.Agents {
				e.agents[[2]string{wf, a.State}]++
			}
			if line.Start > 0 && line.End >= line.Start {
				e.durCount[[2]string{wf, line.Status}]++
				e.durSum[[2]string{wf, line.Status}] += float64(line.End-line.Start) / 1000
			}
		case "task":
			e.tasks[[2]string{line.TaskType, line.Status}]++
		case "stats":
			var st expectedStats
			if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
				t.Fatalf("stats line: %v", err)
			}
			e.stats = &st
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return e
}

// series reads every sample of one family as labels → value (histograms
// as their count, and their sum under the "__sum" key).
func series(t *testing.T, g prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			k := labelKey(m.GetLabel())
			switch {
			case m.Counter != nil:
				out[k] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[k] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[k] = float64(m.GetHistogram().GetSampleCount())
				out[k+"__sum"] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

func labelKey(ls []*dto.LabelPair) string {
	parts := make([]string, 0, len(ls))
	for _, l := range ls {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// checkGroundTruth compares the metrics with the stream's ground truth.
func checkGroundTruth(t *testing.T, m *Metrics, e expected) {
	t.Helper()
	g := m.Registry()
	runs := series(t, g, "cbc_workflow_runs_total")
	total := 0.0
	for k, want := range e.runs {
		if got := runs[fmt.Sprintf("status=%s,workflow=%s", k[1], k[0])]; got != want {
			t.Errorf("runs_total{workflow=%q,status=%q} = %v, want %v", k[0], k[1], got, want)
		}
		total += want
	}
	if got := sumValues(runs); got != total {
		t.Errorf("sum of runs_total = %v, want %v", got, total)
	}
	started := series(t, g, "cbc_workflow_runs_started_total")
	if got := sumValues(started); got != total {
		t.Errorf("sum of runs_started_total = %v, want %v", got, total)
	}
	if got := sumValues(series(t, g, "cbc_workflow_runs_active")); got != 0 {
		t.Errorf("runs_active = %v after the stream ended, want 0", got)
	}
	agents := series(t, g, "cbc_workflow_agents_total")
	atotal := 0.0
	for k, want := range e.agents {
		if got := agents[fmt.Sprintf("state=%s,workflow=%s", k[1], k[0])]; got != want {
			t.Errorf("agents_total{workflow=%q,state=%q} = %v, want %v", k[0], k[1], got, want)
		}
		atotal += want
	}
	if got := sumValues(agents); got != atotal {
		t.Errorf("sum of agents_total = %v, want %v", got, atotal)
	}
	tokens := series(t, g, "cbc_workflow_tokens_total")
	tools := series(t, g, "cbc_workflow_tool_uses_total")
	for wf, want := range e.tokens {
		if got := tokens["workflow="+wf]; got != want {
			t.Errorf("tokens_total{workflow=%q} = %v, want %v", wf, got, want)
		}
		if got, want := tools["workflow="+wf], e.toolUses[wf]; got != want {
			t.Errorf("tool_uses_total{workflow=%q} = %v, want %v", wf, got, want)
		}
	}
	dur := series(t, g, "cbc_workflow_duration_seconds")
	for k, want := range e.durCount {
		key := fmt.Sprintf("status=%s,workflow=%s", k[1], k[0])
		if got := dur[key]; got != want {
			t.Errorf("duration_seconds_count{workflow=%q,status=%q} = %v, want %v", k[0], k[1], got, want)
		}
		if got, want := dur[key+"__sum"], e.durSum[k]; abs(got-want) > 1e-9 {
			t.Errorf("duration_seconds_sum{workflow=%q,status=%q} = %v, want %v", k[0], k[1], got, want)
		}
	}
	tasks := series(t, g, "cbc_tasks_total")
	ttotal := 0.0
	for k, want := range e.tasks {
		if got := tasks[fmt.Sprintf("status=%s,task_type=%s", k[1], k[0])]; got != want {
			t.Errorf("tasks_total{task_type=%q,status=%q} = %v, want %v", k[0], k[1], got, want)
		}
		ttotal += want
	}
	if got := sumValues(tasks); got != ttotal {
		t.Errorf("sum of tasks_total = %v, want %v", got, ttotal)
	}
	if e.stats != nil {
		lines := series(t, g, "cbc_otel_lines_total")
		if got := lines["source=stdout"]; got != float64(e.stats.Lines) {
			t.Errorf("lines_total{source=stdout} = %v, want %v", got, e.stats.Lines)
		}
		if got := series(t, g, "cbc_otel_bytes_total")["source=stdout"]; got != float64(e.stats.Bytes) {
			t.Errorf("bytes_total{source=stdout} = %v, want %v", got, e.stats.Bytes)
		}
		rej := series(t, g, "cbc_otel_lines_rejected_total")
		for _, r := range streamjson.Reasons() {
			if got, want := rej["reason="+r.String()], float64(e.stats.Rejected[r.String()]); got != want {
				t.Errorf("lines_rejected_total{reason=%q} = %v, want %v", r, got, want)
			}
		}
		viol := series(t, g, "cbc_protocol_violations_total")
		for _, v := range ingest.Violations() {
			if got, want := viol["kind="+v.String()], float64(e.stats.Violations[v.String()]); got != want {
				t.Errorf("protocol_violations_total{kind=%q} = %v, want %v", v, got, want)
			}
		}
	}
}

func sumValues(m map[string]float64) float64 {
	s := 0.0
	for k, v := range m {
		if !strings.HasSuffix(k, "__sum") {
			s += v
		}
	}
	return s
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// TestGoldenCorpus replays every real recording and compares the cbc_*
// exposition with its golden file and with the corpus's hand-written
// expectations.
func TestGoldenCorpus(t *testing.T) {
	files, err := filepath.Glob("../testdata/corpus/*/*.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".expected.ndjson") || strings.HasSuffix(f, ".stdin.ndjson") {
			continue
		}
		n++
		dir := filepath.Base(filepath.Dir(f))
		name := strings.TrimSuffix(filepath.Base(f), ".ndjson")
		t.Run(dir+"/"+name, func(t *testing.T) {
			stream, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			m := replay(t, stream)
			checkGolden(t, m, "corpus-"+dir+"-"+name+".prom")
			if exp, err := os.Open(strings.TrimSuffix(f, ".ndjson") + ".expected.ndjson"); err == nil {
				defer exp.Close()
				checkGroundTruth(t, m, readExpected(t, exp))
			}
		})
	}
	if n == 0 {
		t.Fatal("no corpus recordings found")
	}
}

// simulateStream runs the simulator: initialize, then one user message per
// scenario. It returns stdout and the --expect ground truth.
func simulateStream(t *testing.T, dialect string, interruptAfter int, scenarios ...string) (stdout, expect []byte) {
	t.Helper()
	var in bytes.Buffer
	in.WriteString(`{"type":"control_request","request_id":"init","request":{"subtype":"initialize"}}` + "\n")
	for _, sc := range scenarios {
		fmt.Fprintf(&in, `{"type":"user","message":{"role":"user","content":"[[SCENARIO:%s]] go"}}`+"\n", sc)
	}
	var out, exp bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := simulate.Config{Dialect: dialect, Speed: 0, Epoch: simEpoch, Seed: 1, Agents: 12, Noise: 256,
		InterruptAfter: interruptAfter, Expect: &exp}
	if err := simulate.Run(ctx, cfg, &in, &out); err != nil {
		t.Fatalf("simulate: %v", err)
	}
	return out.Bytes(), exp.Bytes()
}

// TestGoldenSimulator runs every simulator scenario in both dialects
// through the pipeline and compares with goldens and with the simulator's
// own ground truth.
func TestGoldenSimulator(t *testing.T) {
	cases := []struct {
		scenario       string
		interruptAfter int
	}{
		{simulate.ScenarioCompleted, 0},
		{simulate.ScenarioFailed, 0},
		{simulate.ScenarioStopped, 2},
		{simulate.ScenarioCached, 0},
		{simulate.ScenarioManyAgents, 0},
		{simulate.ScenarioMixed, 0},
	}
	for _, c := range cases {
		for _, d := range []string{simulate.DialectCBC, simulate.DialectClaude} {
			t.Run(c.scenario+"-"+d, func(t *testing.T) {
				out, exp := simulateStream(t, d, c.interruptAfter, c.scenario)
				m := replay(t, bytes.NewReader(out))
				checkGolden(t, m, "sim-"+c.scenario+"-"+d+".prom")
				checkGroundTruth(t, m, readExpected(t, bytes.NewReader(exp)))
			})
		}
	}
	// All scenarios in one session: one workflow label, counts add up.
	for _, d := range []string{simulate.DialectCBC, simulate.DialectClaude} {
		t.Run("session-"+d, func(t *testing.T) {
			out, exp := simulateStream(t, d, 0, simulate.ScenarioCompleted, simulate.ScenarioFailed,
				simulate.ScenarioCached, simulate.ScenarioMixed, simulate.ScenarioManyAgents, simulate.ScenarioCompleted)
			m := replay(t, bytes.NewReader(out))
			checkGolden(t, m, "sim-session-"+d+".prom")
			checkGroundTruth(t, m, readExpected(t, bytes.NewReader(exp)))
		})
	}
}
