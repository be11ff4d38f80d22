package dashboards

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/metrics"
	"github.com/cbc-otel/cbc-otel/tap"
)

// targetLabels are attached by Prometheus (job, instance) or Kubernetes
// service discovery relabelling (namespace, pod), not by the exporter:
// every query may use them.
var targetLabels = []string{"job", "instance", "namespace", "pod"}

// synthetic are series Prometheus makes itself, with the labels a query
// may use on them.
var synthetic = map[string][]string{
	"up":     nil,
	"ALERTS": {"alertname", "alertstate", "severity"},
}

// family is what the registry exposes under one series name.
type family struct {
	labels map[string]map[string]bool // label name → values seen
}

// exporterFamilies builds the exporter's real registry, replays the
// simulator's recordings of every scenario in both dialects through the
// ingest pipeline (so that every labelled family has series) and returns
// the exposed series names: histograms as name (native), name_bucket (with
// le), name_sum and name_count.
func exporterFamilies(t *testing.T) (map[string]*family, map[string]string) {
	t.Helper()
	stats := new(ingest.Stats)
	// The demo's registry: every family also carries the label the rules
	// exclude the demo by.
	m, err := metrics.New(metrics.Options{Stats: stats, Version: "test", ConstLabels: map[string]string{metrics.DemoLabel: "true"}})
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("../testdata/simulate/*.ndjson")
	if err != nil || len(files) == 0 {
		t.Fatalf("no simulator recordings: %v", err)
	}
	for _, f := range files {
		if strings.Contains(f, ".expect.") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p := ingest.NewPipeline(ingest.PipelineOptions{
			Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{m}, Stats: stats, Grace: ingest.DefaultGrace},
		})
		p.Write(tap.SourceStdout, b)
		p.Close()
	}
	// An interrupt matched to its stop; the unlabelled histogram exists
	// either way, this gives it a sample.
	m.Observe(ingest.Lifecycle{Kind: ingest.InterruptRequested})
	m.Observe(ingest.Lifecycle{Kind: ingest.InterruptMatched, LatencyMs: 1200})
	observeCost(m)

	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*family{}
	types := map[string]string{}
	add := func(name string, lps []*dto.LabelPair, extra ...string) {
		f := out[name]
		if f == nil {
			f = &family{labels: map[string]map[string]bool{}}
			out[name] = f
		}
		for _, lp := range lps {
			if f.labels[lp.GetName()] == nil {
				f.labels[lp.GetName()] = map[string]bool{}
			}
			f.labels[lp.GetName()][lp.GetValue()] = true
		}
		for _, e := range extra {
			if f.labels[e] == nil {
				f.labels[e] = map[string]bool{}
			}
		}
	}
	for _, mf := range mfs {
		name := mf.GetName()
		types[name] = mf.GetType().String()
		for _, s := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				add(name, s.GetLabel())
				add(name+"_bucket", s.GetLabel(), "le")
				add(name+"_sum", s.GetLabel())
				add(name+"_count", s.GetLabel())
			case dto.MetricType_SUMMARY:
				add(name, s.GetLabel(), "quantile")
				add(name+"_sum", s.GetLabel())
				add(name+"_count", s.GetLabel())
			default:
				add(name, s.GetLabel())
			}
		}
		if len(mf.GetMetric()) == 0 {
			add(name, nil)
		}
	}
	return out, types
}

// observeCost sends the metrics the cost events of the CLI's telemetry and
// result lines, as the Tracker does (ingest/sink.go): a model call of each
// scope, the workflow one while its run is open (already added to the
// run's and the agent's Cost), the run's end with its Cost, and a turn.
// The simulator's recordings hold result lines but none of the CLI's
// telemetry, so without this the per-workflow cost families (the run's
// cost histogram among them) would have no series.
func observeCost(m *metrics.Metrics) {
	usage := cost.Model{Model: "claude-contract", CostUSD: 0.25, Tokens: cost.Tokens{100, 20, 300, 40}}
	run := &ingest.Run{TaskID: "t-contract", RunID: "r-contract", SessionID: "s-contract", Workflow: true, Name: "contract", Start: 1000}
	agent := &ingest.Agent{Index: 0, AgentID: "a-contract"}
	m.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: run})
	m.Observe(ingest.Lifecycle{Kind: ingest.AgentStarted, Run: run, Agent: agent})
	for _, sc := range ingest.CallScopes() {
		call := &ingest.ModelCall{SessionID: "s-contract", Cost: usage, DurationMs: 800, At: 2000, Scope: sc}
		l := ingest.Lifecycle{Kind: ingest.ModelCallSeen, Call: call}
		switch sc {
		case ingest.CallWorkflow:
			call.AgentID, call.Workflow, call.TaskID, call.RunID = agent.AgentID, run.Name, run.TaskID, run.RunID
			agent.Cost.Add(usage, 1)
			run.Cost.Add(usage, 1)
			l.Run, l.Agent = run, agent
		case ingest.CallUnmatched:
			call.AgentID = "a-unmatched"
		}
		m.Observe(l)
	}
	// A silence, then the end: the stall series exist only once a run
	// stalled (they are not pre-created).
	m.Observe(ingest.Lifecycle{Kind: ingest.RunStalled, Run: run})
	m.Observe(ingest.Lifecycle{Kind: ingest.RunResumed, Run: run})
	m.Observe(ingest.Lifecycle{Kind: ingest.AgentStalled, Run: run, Agent: agent})
	m.Observe(ingest.Lifecycle{Kind: ingest.AgentResumed, Run: run, Agent: agent})
	run.Status, run.End = ingest.StatusCompleted, 5000
	m.Observe(ingest.Lifecycle{Kind: ingest.RunFinished, Run: run})
	m.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: run})
	for _, sub := range []string{"success", "error_max_turns"} {
		m.Observe(ingest.Lifecycle{Kind: ingest.TurnEnded, Turn: &ingest.Turn{
			SessionID: "s-contract", Subtype: sub, IsError: sub != "success", DurationMs: 4000,
			Delta: []cost.Model{usage}, CostUSD: usage.CostUSD,
		}})
	}
}

// recordedFamilies are the series our own recording rules make, with the
// labels they carry.
func recordedFamilies(t *testing.T, o RuleOptions) map[string]*family {
	t.Helper()
	rf, err := Rules(o)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*family{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Record == "" {
				continue
			}
			f := out[r.Record]
			if f == nil {
				f = &family{labels: map[string]map[string]bool{}}
				out[r.Record] = f
			}
			for k, v := range r.Labels {
				if f.labels[k] == nil {
					f.labels[k] = map[string]bool{}
				}
				f.labels[k][v] = true
			}
			for _, l := range o.GroupBy {
				f.labels[l] = map[string]bool{}
			}
			expr, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("rule %s: %v", r.Record, err)
			}
			for _, l := range outputLabels(expr) {
				f.labels[l] = map[string]bool{}
			}
			// A join keeps the left side's sloth_window (sloth's shape).
			if strings.Contains(r.Expr, "group_left") || r.Record == RecordBudgetRemaining {
				f.labels["sloth_window"] = map[string]bool{}
			}
		}
	}
	return out
}

// outputLabels are the labels an expression's result keeps from its
// outermost `sum by (...)` (binary operators keep their left side's): the
// labels a recording rule's series carry besides its own.
func outputLabels(e parser.Expr) []string {
	switch n := e.(type) {
	case *parser.AggregateExpr:
		if !n.Without {
			return n.Grouping
		}
	case *parser.ParenExpr:
		return outputLabels(n.Expr)
	case *parser.BinaryExpr:
		if n.VectorMatching != nil && n.VectorMatching.On && n.VectorMatching.Card == parser.CardOneToOne {
			return n.VectorMatching.MatchingLabels
		}
		if n.LHS.Type() == parser.ValueTypeVector {
			return outputLabels(n.LHS)
		}
		return outputLabels(n.RHS)
	}
	return nil
}

// grafanaVars replaces the Grafana variables of a panel query with values
// PromQL parses; label-matcher values keep their $var (they are strings).
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m",
	"$__interval", "1m",
	"$__range", "6h",
)

// exprUse is what one expression uses.
type exprUse struct {
	where string
	expr  string
}

// allExprs returns every PromQL expression of the dashboards and rules.
func allExprs(t *testing.T) (panels, rules []exprUse) {
	t.Helper()
	specs, err := Specs(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		for _, r := range s.Rows {
			for _, p := range r.Panels {
				for _, q := range p.Queries {
					panels = append(panels, exprUse{s.UID + " / " + p.Title, q.Expr})
				}
			}
		}
	}
	rf, err := Rules(budgetOptions(t)) // the budgets' recording rules too
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			rules = append(rules, exprUse{"rule " + r.Record + r.Alert, r.Expr})
		}
	}
	return panels, rules
}

var simpleAlternation = regexp.MustCompile(`^[a-zA-Z0-9_]+(\|[a-zA-Z0-9_]+)*$`)

// TestContractMetricsAndLabels proves every metric name used by a panel
// or a rule is exposed by the exporter (or recorded by our rules, or made
// by Prometheus), every label a matcher, by/without or on/ignoring clause
// uses exists on the metrics under it, and every literal value a status,
// state, kind, reason or source matcher names is one the exporter uses.
// The reverse report logs exporter metrics no panel shows, and fails for a
// DESIGN.md metric that no panel shows.
func TestContractMetricsAndLabels(t *testing.T) {
	exp, types := exporterFamilies(t)
	rec := recordedFamilies(t, budgetOptions(t)) // the budget panels read its records
	lookup := func(name string) (*family, bool) {
		if f, ok := exp[name]; ok {
			return f, true
		}
		if f, ok := rec[name]; ok {
			return f, true
		}
		if ls, ok := synthetic[name]; ok {
			f := &family{labels: map[string]map[string]bool{}}
			for _, l := range ls {
				f.labels[l] = nil
			}
			return f, true
		}
		return nil, false
	}
	isTarget := func(l string) bool {
		for _, x := range targetLabels {
			if l == x {
				return true
			}
		}
		return false
	}
	p := parser.NewParser(parser.Options{})
	shown := map[string]bool{}
	panels, rules := allExprs(t)
	check := func(u exprUse, isPanel bool) {
		expr, err := p.ParseExpr(grafanaVars.Replace(u.expr))
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", u.where, u.expr, err)
			return
		}
		// selectorsUnder returns the families of the vector selectors in n.
		selectorsUnder := func(n parser.Node) []*family {
			var fs []*family
			parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					if f, ok := lookup(vs.Name); ok {
						fs = append(fs, f)
					}
				}
				return nil
			})
			return fs
		}
		labelKnown := func(fs []*family, l string) bool {
			if isTarget(l) || l == "le" && len(fs) > 0 {
				return true
			}
			for _, f := range fs {
				if _, ok := f.labels[l]; ok {
					return true
				}
			}
			return false
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			switch n := n.(type) {
			case *parser.VectorSelector:
				name := n.Name
				if name == "" {
					t.Errorf("%s: selector %s has no metric name", u.where, n)
					return nil
				}
				f, ok := lookup(name)
				if !ok {
					t.Errorf("%s: metric %s is not exposed by the exporter nor recorded by the rules", u.where, name)
					return nil
				}
				if isPanel {
					shown[baseName(name, types)] = true
				}
				for _, m := range n.LabelMatchers {
					if m.Name == model.MetricNameLabel || isTarget(m.Name) {
						continue
					}
					vals, ok := f.labels[m.Name]
					if !ok {
						t.Errorf("%s: %s has no label %q", u.where, name, m.Name)
						continue
					}
					if len(vals) == 0 || strings.Contains(m.Value, "$") {
						continue
					}
					var want []string
					switch {
					case m.Type == labels.MatchEqual && m.Value != "":
						want = []string{m.Value}
					case m.Type == labels.MatchRegexp && simpleAlternation.MatchString(m.Value):
						want = strings.Split(m.Value, "|")
					}
					for _, v := range want {
						if !vals[v] {
							t.Errorf("%s: %s{%s} never has value %q (seen: %v)", u.where, name, m.Name, v, keys(vals))
						}
					}
				}
			case *parser.AggregateExpr:
				fs := selectorsUnder(n.Expr)
				for _, l := range n.Grouping {
					if !labelKnown(fs, l) {
						t.Errorf("%s: %s by/without label %q exists on none of its metrics", u.where, n.Op, l)
					}
				}
			case *parser.BinaryExpr:
				if n.VectorMatching == nil {
					return nil
				}
				fs := append(selectorsUnder(n.LHS), selectorsUnder(n.RHS)...)
				for _, l := range append(append([]string(nil), n.VectorMatching.MatchingLabels...), n.VectorMatching.Include...) {
					if !labelKnown(fs, l) {
						t.Errorf("%s: on/ignoring/group label %q exists on none of its metrics", u.where, l)
					}
				}
			}
			return nil
		})
	}
	for _, u := range panels {
		check(u, true)
	}
	for _, u := range rules {
		check(u, false)
	}

	// Reverse report: what the exporter exposes that no panel shows.
	var unshown []string
	for name := range types {
		if !shown[name] {
			unshown = append(unshown, name)
		}
	}
	sort.Strings(unshown)
	t.Logf("exporter metrics no panel shows (%d): %s", len(unshown), strings.Join(unshown, " "))
	for _, name := range contractMetrics(t) {
		if _, ok := types[name]; !ok {
			t.Errorf("contract metric %s is not in the exporter's registry", name)
		}
		if !shown[name] {
			t.Errorf("contract metric %s is shown by no panel", name)
		}
	}
}

// baseName maps a series name to its family (histogram suffixes).
func baseName(name string, types map[string]string) string {
	if _, ok := types[name]; ok {
		return name
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, suf); ok {
			if _, ok := types[b]; ok {
				return b
			}
		}
	}
	return name
}

func keys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

var metricToken = regexp.MustCompile("`(cbc_[a-z_]+)`")

// contractMetrics returns the metric names of the contract: the table of
// metrics/doc.go (in the repository) and, when shared/DESIGN.md is beside
// the repository, its "Metrics" section too.
func contractMetrics(t *testing.T) []string {
	t.Helper()
	set := map[string]bool{}
	for _, name := range docTableMetrics(t) {
		set[name] = true
	}
	design, err := os.ReadFile("../../shared/DESIGN.md")
	if err == nil {
		sec := design
		if i := bytes.Index(sec, []byte("## Metrics")); i >= 0 {
			sec = sec[i:]
			if j := bytes.Index(sec[3:], []byte("\n## ")); j >= 0 {
				sec = sec[:j+3]
			}
		}
		n := 0
		for _, m := range metricToken.FindAllSubmatch(sec, -1) {
			set[string(m[1])] = true
			n++
		}
		t.Logf("DESIGN.md: %d metric names", n)
	} else {
		t.Logf("shared/DESIGN.md not beside the repository (%v): checking metrics/doc.go's table only", err)
	}
	out := keys(set)
	return out
}

// docTableMetrics returns the metric names of metrics/doc.go's table.
func docTableMetrics(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../metrics/doc.go")
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^//\t(cbc_[a-z_]+)\s`).FindAllSubmatch(doc, -1) {
		set[string(m[1])] = true
	}
	if len(set) < 15 {
		t.Fatalf("found %d metrics in metrics/doc.go's table; did its format change?", len(set))
	}
	return keys(set)
}

// TestPanelQueriesAreJSONSafe is a guard for the committed JSON: the
// queries survive encoding unchanged.
func TestPanelQueriesAreJSONSafe(t *testing.T) {
	panels, _ := allExprs(t)
	for _, u := range panels {
		b, _ := json.Marshal(u.expr)
		var back string
		if err := json.Unmarshal(b, &back); err != nil || back != u.expr {
			t.Errorf("%s: query does not round-trip through JSON", u.where)
		}
	}
}
