package dashboards

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v2"

	"github.com/cbc-otel/cbc-otel/internal/mdtable"
	"github.com/cbc-otel/cbc-otel/internal/realtool"
	"github.com/cbc-otel/cbc-otel/metrics"
)

// requirePromtool returns promtool's path. Without it the test skips
// locally and fails in CI (.ci/run installs Debian's prometheus package).
func requirePromtool(t *testing.T) string {
	t.Helper()
	return realtool.Find(t, "promtool", "", "apt-get install -y --no-install-recommends prometheus")
}

func promtool(t *testing.T, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

// TestGeneratedFilesUpToDate proves the committed renderings are what the
// code generates (run `go generate ./dashboards` after changing it).
func TestGeneratedFilesUpToDate(t *testing.T) {
	files, err := Files(Options{})
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(ReadmeFile)
	if err != nil {
		t.Fatal(err)
	}
	if files[ReadmeFile], err = UpdateReadme(readme, Options{}); err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.FromSlash(name))
		if err != nil {
			t.Errorf("%s: %v (run go generate ./dashboards)", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./dashboards", name)
		}
	}
}

// TestPromtoolCheckRules proves the committed rules, and renderings with
// other parameters (as the Helm chart or a test would make them), load in
// Prometheus 2.42.
func TestPromtoolCheckRules(t *testing.T) {
	bin := requirePromtool(t)
	promtool(t, bin, "check", "rules", RulesFile)
	dir := t.TempDir()
	for name, o := range map[string]RuleOptions{
		"target-99.5":      {Target: 0.995},
		"per-namespace":    {GroupBy: []string{"namespace", "job"}, Stopped: StoppedBad},
		"stopped-good":     {Stopped: StoppedGood, InterruptP95: 2500 * time.Millisecond},
		"scaled-for-tests": {WindowScale: 1.0 / 60},
	} {
		b, err := RenderRules(o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p := filepath.Join(dir, name+".yml")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		promtool(t, bin, "check", "rules", p)
	}
}

// TestPromtoolTestRules runs the unit tests in rules/tests: each alert
// fires when it should and stays silent when it should, including the
// short burst that must not page and the slow burn that opens a ticket.
func TestPromtoolTestRules(t *testing.T) {
	bin := requirePromtool(t)
	tests, err := filepath.Glob("rules/tests/*.yml")
	if err != nil || len(tests) == 0 {
		t.Fatalf("no rule tests found: %v", err)
	}
	promtool(t, bin, append([]string{"test", "rules"}, tests...)...)
}

// TestEveryAlertIsTested proves every alert of the rule file appears in
// an alert_rule_test, both firing (some exp_alerts) and silent (an empty
// exp_alerts).
func TestEveryAlertIsTested(t *testing.T) {
	rf, err := Rules(RuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type unit struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	files, _ := filepath.Glob("rules/tests/*.yml")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var u unit
		if err := yaml.Unmarshal(b, &u); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, tc := range u.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fires[a.Alertname] = true
				} else {
					silent[a.Alertname] = true
				}
			}
		}
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !fires[r.Alert] || !silent[r.Alert] {
				t.Errorf("alert %s: tested firing %v, tested silent %v; want both", r.Alert, fires[r.Alert], silent[r.Alert])
			}
		}
	}
}

// readmeAnchors returns the anchors of the README's headings, by GitHub's
// slug rule (docs' TestLinks reads links to them the same way).
func readmeAnchors(t *testing.T) map[string]bool {
	t.Helper()
	readme, err := os.ReadFile(ReadmeFile)
	if err != nil {
		t.Fatal(err)
	}
	return mdtable.Anchors(string(readme))
}

// TestRunbooksExist proves every alert has a summary, a description, a
// runbook_url whose anchor is a heading of the README, and a severity of
// critical, warning or info.
func TestRunbooksExist(t *testing.T) {
	anchors := readmeAnchors(t)
	rf, err := Rules(RuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s lacks a summary or description", r.Alert)
			}
			u := r.Annotations["runbook_url"]
			base, anchor, ok := strings.Cut(u, "#")
			if !ok || base != DefaultRunbookURL || !anchors[anchor] {
				t.Errorf("alert %s: runbook_url %q has no matching README heading", r.Alert, u)
			}
			switch r.Labels["severity"] {
			case SeverityCritical, SeverityWarning, SeverityInfo:
			default:
				t.Errorf("alert %s has severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
			}
		}
	}
	if n < 12 {
		t.Errorf("%d alerts, want at least 12", n)
	}
}

// TestRuleOptionsValidate proves bad parameters are refused rather than
// rendered into rules that would never fire.
func TestRuleOptionsValidate(t *testing.T) {
	for _, o := range []RuleOptions{
		{Target: 1}, {Target: -0.5}, {Target: 99}, {Stopped: "maybe"}, {Demo: "maybe"}, {GroupBy: []string{"bad-label"}}, {WindowScale: -1},
		{BurnWindows: []BurnWindow{{"page", 14.4, 5 * time.Minute, time.Hour}}},
		{BurnWindows: []BurnWindow{{SeverityCritical, 14.4, time.Hour, 5 * time.Minute}}},
		{BurnWindows: []BurnWindow{{SeverityWarning, 1, 6 * time.Hour, DefaultPeriod}}},
		{BurnWindows: []BurnWindow{{SeverityWarning, 0, 6 * time.Hour, 24 * time.Hour}}},
	} {
		if _, err := RenderRules(o); err == nil {
			t.Errorf("RenderRules(%+v) succeeded, want an error", o)
		}
	}
	b, err := RenderRules(RuleOptions{Target: 0.995})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("vector(0.995)")) || !bytes.Contains(b, []byte("(14.4 * (1 - 0.995))")) {
		t.Errorf("target 0.995 not rendered into the objective and thresholds")
	}
	scaled, err := RenderRules(RuleOptions{WindowScale: 1.0 / 60})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"[5s]", "[1m]", "[24m]", "[1h12m]", "[12h]", "record: slo:sli_error:ratio_rate1h"} {
		if !bytes.Contains(scaled, []byte(want)) {
			t.Errorf("scaled rendering lacks %q", want)
		}
	}
}

// TestRulesLeaveOutTheDemo proves every selector of a cbc_* series in the
// default rules has demo!="true" (the demo's series, metrics.DemoLabel),
// except absent(cbc_otel_build_info): a demo is a cbc-otel exporter that
// reports. With DemoIncluded none has it.
func TestRulesLeaveOutTheDemo(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	for _, demo := range []DemoPolicy{"", DemoIncluded} {
		o := budgetOptions(t) // the budgets' selectors too
		o.Demo = demo
		rf, err := Rules(o)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				expr, err := p.ParseExpr(r.Expr)
				if err != nil {
					t.Fatalf("%s%s: %v", r.Alert, r.Record, err)
				}
				parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
					vs, ok := node.(*parser.VectorSelector)
					if !ok || !strings.HasPrefix(vs.Name, "cbc_") || vs.Name == "cbc_otel_build_info" {
						return nil
					}
					n++
					left := slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool {
						return m.Name == metrics.DemoLabel && m.Type == labels.MatchNotEqual && m.Value == "true"
					})
					if left != (demo == "") {
						t.Errorf("demo %q: %s%s: selector %s", demo, r.Alert, r.Record, vs)
					}
					return nil
				})
			}
		}
		if n < 20 {
			t.Errorf("demo %q: %d cbc_* selectors, want every rule's", demo, n)
		}
	}
}
