package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRunCostPanelsAndExemplar: `demo --live --cli-telemetry.join` (the
// simulator plays the CLI and its own telemetry, the wrapper joins the
// cost) is scraped by a real Prometheus storing exemplars. Every overview
// panel query of the run-cost families gives a number, and an exemplar
// Prometheus stored on cbc_workflow_run_cost_usd names an invoke_workflow
// span of the traces file: same trace id and span id, and the span's
// cbc.usage.cost_usd is the exemplar's value. So the costliest run's
// trace is one click away.
func TestRunCostPanelsAndExemplar(t *testing.T) {
	promBin := requirePrometheus(t)
	bin := promBuildCLI(t)
	tracesFile := filepath.Join(t.TempDir(), "traces.jsonl")
	addr, demo, exited := startLiveDemo(t, bin, "--cli-telemetry.join", "--traces.file", tracesFile)
	prom := startPrometheusWithRules(t, promBin, addr, nil, "--enable-feature=exemplar-storage")

	costQueries := regexp.MustCompile(`cbc_workflow_(run_cost_usd|runs_cost_unknown_total)`)
	vars := strings.NewReplacer("$__rate_interval", "10s", "$__range", "1m", "$job", ".*", "$namespace", ".*", "$pod", ".*", "$workflow", ".*")
	var queries []string
	for _, e := range overviewExprs(t) {
		if costQueries.MatchString(e) {
			queries = append(queries, vars.Replace(e))
		}
	}
	// p50 and p95, the heatmap, runs of known and unknown cost; the
	// budgets row's anomaly panel: the last hour's p50 and the week's p95.
	if len(queries) != 7 {
		t.Fatalf("%d run-cost panel queries in the overview, want 7: %q", len(queries), queries)
	}
	for _, q := range queries {
		promPollNumber(t, prom, q)
	}
	known, err := prom.scalar(`sum(cbc_workflow_run_cost_usd_count)`)
	if err != nil || known < 1 {
		t.Errorf("runs of known cost in Prometheus: %v (%v), want some: the demo's runs are joined", known, err)
	}

	var ex promExemplar
	promPoll(t, 60*time.Second, "an exemplar of cbc_workflow_run_cost_usd in Prometheus", func() (bool, string) {
		exs, err := prom.exemplars(`cbc_workflow_run_cost_usd_bucket`)
		if err != nil || len(exs) == 0 {
			return false, fmt.Sprint(len(exs), err)
		}
		ex = exs[0]
		return true, ""
	})
	if ex.traceID == "" || ex.spanID == "" {
		t.Fatalf("exemplar without trace_id and span_id: %+v", ex)
	}
	stopLiveDemo(t, demo, exited) // the traces file is complete once it exited
	span, ok := workflowSpan(t, tracesFile, ex.traceID, ex.spanID)
	if !ok {
		t.Fatalf("no invoke_workflow span %s/%s in the traces file", ex.traceID, ex.spanID)
	}
	if math.Abs(span.cost-ex.value) > 1e-9 {
		t.Errorf("span %q costs %v (cbc.usage.cost_usd), the exemplar says %v", span.name, span.cost, ex.value)
	}
	t.Logf("exemplar %s/%s = $%v: span %q", ex.traceID, ex.spanID, ex.value, span.name)
}

// promExemplar is one exemplar Prometheus stored.
type promExemplar struct {
	traceID, spanID string
	value           float64
}

// exemplars returns the exemplars Prometheus stored for q over the last
// ten minutes.
func (p *prometheusServer) exemplars(q string) ([]promExemplar, error) {
	now := time.Now()
	var data []struct {
		Exemplars []struct {
			Labels map[string]string `json:"labels"`
			Value  string            `json:"value"`
		} `json:"exemplars"`
	}
	path := fmt.Sprintf("/api/v1/query_exemplars?query=%s&start=%d&end=%d", url.QueryEscape(q), now.Add(-10*time.Minute).Unix(), now.Add(time.Minute).Unix())
	if err := p.api(path, &data); err != nil {
		return nil, err
	}
	var out []promExemplar
	for _, s := range data {
		for _, e := range s.Exemplars {
			v, err := strconv.ParseFloat(e.Value, 64)
			if err != nil {
				return nil, err
			}
			out = append(out, promExemplar{traceID: e.Labels["trace_id"], spanID: e.Labels["span_id"], value: v})
		}
	}
	return out, nil
}

// tracedRun is a workflow span of a traces file.
type tracedRun struct {
	name string
	cost float64
}

// workflowSpan finds the invoke_workflow span traceID/spanID in an OTLP/JSON
// traces file (one ExportTraceServiceRequest per line).
func workflowSpan(t *testing.T, file, traceID, spanID string) (tracedRun, bool) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var req struct {
			ResourceSpans []struct {
				ScopeSpans []struct {
					Spans []struct {
						TraceID    string `json:"traceId"`
						SpanID     string `json:"spanId"`
						Name       string `json:"name"`
						Attributes []struct {
							Key   string `json:"key"`
							Value struct {
								Double *float64 `json:"doubleValue"`
							} `json:"value"`
						} `json:"attributes"`
					} `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			t.Fatalf("traces file: %v", err)
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					if s.TraceID != traceID || s.SpanID != spanID || !strings.HasPrefix(s.Name, "invoke_workflow ") {
						continue
					}
					run := tracedRun{name: s.Name, cost: math.NaN()}
					for _, a := range s.Attributes {
						if a.Key == "cbc.usage.cost_usd" && a.Value.Double != nil {
							run.cost = *a.Value.Double
						}
					}
					return run, true
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return tracedRun{}, false
}
