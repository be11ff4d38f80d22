package dashboards

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"
)

func readMixinConfig(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(MixinDir, MixinConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMixinUpToDate proves the committed mixin is what the generator
// renders from the committed mixin/config.yaml, with no stale file left
// in dashboards_out (run `go generate ./dashboards` after changing either).
func TestMixinUpToDate(t *testing.T) {
	files, err := MixinFiles(readMixinConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(MixinDir, filepath.FromSlash(name)))
		if err != nil {
			t.Errorf("%s: %v (run go generate ./dashboards)", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("mixin/%s is stale: run go generate ./dashboards", name)
		}
	}
	entries, err := os.ReadDir(filepath.Join(MixinDir, MixinDashboardsDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := files[MixinDashboardsDir+"/"+e.Name()]; !ok {
			t.Errorf("mixin/%s/%s is not generated: remove it", MixinDashboardsDir, e.Name())
		}
	}
}

// TestMixinConfigIsDefault proves the committed configuration spells out
// every default, so the mixin and rules/cbc-otel.rules.yml (which the Helm
// chart and the promtool tests load) hold the same rules.
func TestMixinConfigIsDefault(t *testing.T) {
	c, err := ParseMixinConfig(readMixinConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := mixinConfigDefault(); !reflect.DeepEqual(c, want) {
		t.Errorf("mixin/config.yaml is\n%+v\nwant every default:\n%+v", c, want)
	}
	got, err := Rules(c.Options().Rules)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Rules(RuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the mixin's rules differ from the default rules")
	}
}

// TestMixinConventions checks the committed mixin against the
// monitoring-mixins conventions: alerts.yaml only alerts, rules.yaml only
// recording rules, together every rule of the rule file; alert names
// CamelCase with the Cbc prefix; a severity of critical, warning or info;
// summary, description and a runbook_url whose anchor is a heading of the
// README.
func TestMixinConventions(t *testing.T) {
	c, err := ParseMixinConfig(readMixinConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) RuleFile {
		b, err := os.ReadFile(filepath.Join(MixinDir, name))
		if err != nil {
			t.Fatal(err)
		}
		var rf RuleFile
		if err := yaml.UnmarshalStrict(b, &rf); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return rf
	}
	alerts, records := read(MixinAlertsFile), read(MixinRulesFile)
	anchors := readmeAnchors(t)
	name := regexp.MustCompile(`^Cbc[A-Z][a-z0-9]*([A-Z][a-z0-9]*)+$`)
	nAlerts, nRecords := 0, 0
	for _, g := range alerts.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("alerts.yaml group %s holds the recording rule %s", g.Name, r.Record)
				continue
			}
			nAlerts++
			if !name.MatchString(r.Alert) {
				t.Errorf("alert %s: not CamelCase with the Cbc prefix", r.Alert)
			}
			switch r.Labels["severity"] {
			case SeverityCritical, SeverityWarning, SeverityInfo:
			default:
				t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s: no %s annotation", r.Alert, a)
				}
			}
			base, anchor, ok := strings.Cut(r.Annotations["runbook_url"], "#")
			if !ok || base != c.RunbookURL || !anchors[anchor] {
				t.Errorf("alert %s: runbook_url %q is not %s#<a heading of %s>", r.Alert, r.Annotations["runbook_url"], c.RunbookURL, ReadmeFile)
			}
		}
	}
	for _, g := range records.Groups {
		for _, r := range g.Rules {
			if r.Record == "" {
				t.Errorf("rules.yaml group %s holds the alert %s", g.Name, r.Alert)
			}
			nRecords++
		}
	}
	rf, err := Rules(RuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantAlerts, wantRecords := 0, 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				wantAlerts++
			} else {
				wantRecords++
			}
		}
	}
	if nAlerts != wantAlerts || nRecords != wantRecords {
		t.Errorf("mixin has %d alerts and %d recording rules, the rule file %d and %d", nAlerts, nRecords, wantAlerts, wantRecords)
	}
}

// TestMixinPromtool loads the committed mixin in promtool and runs every
// unit test of rules/tests against it (alerts.yaml and rules.yaml in
// place of the one rule file): the mixin's rules behave as the chart's.
func TestMixinPromtool(t *testing.T) {
	bin := requirePromtool(t)
	alerts, _ := filepath.Abs(filepath.Join(MixinDir, MixinAlertsFile))
	rules, _ := filepath.Abs(filepath.Join(MixinDir, MixinRulesFile))
	promtool(t, bin, "check", "rules", alerts, rules)
	tests, err := filepath.Glob("rules/tests/*.yml")
	if err != nil || len(tests) == 0 {
		t.Fatalf("no rule tests found: %v", err)
	}
	dir := t.TempDir()
	var args []string
	for _, f := range tests {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		const ruleFiles = "rule_files:\n  - ../cbc-otel.rules.yml\n"
		if !bytes.Contains(b, []byte(ruleFiles)) {
			t.Fatalf("%s does not load ../cbc-otel.rules.yml alone", f)
		}
		b = bytes.Replace(b, []byte(ruleFiles), []byte("rule_files:\n  - "+alerts+"\n  - "+rules+"\n"), 1)
		// The budget tests also load their fixture, relative to rules/tests.
		fixture, _ := filepath.Abs(filepath.Dir(filepath.FromSlash(BudgetFixtureRules)))
		b = bytes.ReplaceAll(b, []byte("\n  - "+filepath.Base(fixture)+"/"), []byte("\n  - "+fixture+"/"))
		p := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, p)
	}
	promtool(t, bin, append([]string{"test", "rules"}, args...)...)
}

// TestMixinOtherConfig renders a configuration that differs in every key
// and checks it reaches the rules and dashboards and loads in promtool.
func TestMixinOtherConfig(t *testing.T) {
	bin := requirePromtool(t)
	cfg := []byte(`
selector: my-job
sloTarget: 0.995
stopped: bad
demo: included
groupBy: [namespace, cluster]
burnWindows:
  - {severity: critical, factor: 10, short: 10m, long: 2h}
runbookURL: https://wiki.example/cbc
interruptP95: 2500ms
tracing: jaeger
`)
	files, err := MixinFiles(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(files[MixinConfigFile], cfg) {
		t.Errorf("the configuration is not written beside the mixin as given")
	}
	a, r := string(files[MixinAlertsFile]), string(files[MixinRulesFile])
	for _, want := range []string{
		`up{job=~"my-job"}`, `(10 * (1 - 0.995))`, "slo:sli_error:ratio_rate2h", "slo:sli_error:ratio_rate10m", "https://wiki.example/cbc#workflow-stalled",
		"sum by (namespace, cluster, workflow) (cbc_workflow_runs_stalled) > 0", ") > 2.5\n", AlertSLOPage,
	} {
		if !strings.Contains(a, want) {
			t.Errorf("alerts.yaml lacks %q", want)
		}
	}
	if strings.Contains(a, AlertSLOTicket) {
		t.Errorf("alerts.yaml has %s without a warning burn window", AlertSLOTicket)
	}
	if strings.Contains(a+r, demoMatcher) {
		t.Errorf("demo: included, but the rules still leave out %s", demoMatcher)
	}
	for _, want := range []string{"vector(0.995)", `status=~"failed|abandoned|stopped"`, "sum by (namespace, cluster)(rate(", "[2h]", "[10m]"} {
		if !strings.Contains(r, want) {
			t.Errorf("rules.yaml lacks %q", want)
		}
	}
	if strings.Contains(r, "ratio_rate1d") {
		t.Errorf("rules.yaml records the 1d window no burn window uses")
	}
	if !bytes.Contains(files[MixinDashboardsDir+"/"+mixinOverviewFile], []byte(`"jaeger"`)) {
		t.Errorf("the overview dashboard does not link traces to jaeger")
	}
	checkMixinRules(t, bin, files)
}

// TestMixinConfigErrors proves a bad configuration is refused, an unknown
// key included (a typo must not silently keep a default).
func TestMixinConfigErrors(t *testing.T) {
	for _, cfg := range []string{
		"sloTarget: 1\n",
		"slo_target: 0.995\n",
		"stopped: maybe\n",
		"groupBy: [bad-label]\n",
		"burnWindows: [{severity: page, factor: 14.4, short: 5m, long: 1h}]\n",
		"burnWindows: [{severity: warning, factor: 1, short: 6h, long: 30d}]\n",
		"interruptP95: soon\n",
		"tracing: zipkin\n",
	} {
		if _, err := MixinFiles([]byte(cfg)); err == nil {
			t.Errorf("MixinFiles(%q) succeeded, want an error", cfg)
		}
	}
}

// budgetFixture reads the budget tests' mixin configuration.
func budgetFixture(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(BudgetFixtureConfig))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// budgetOptions are the rule options of the budget tests' configuration:
// two budgets, one of each source.
func budgetOptions(t *testing.T) RuleOptions {
	t.Helper()
	c, err := ParseMixinConfig(budgetFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	o := c.Options().Rules
	if len(o.Budgets) != 2 || o.Budgets[0].Source == o.Budgets[1].Source {
		t.Fatalf("%s: want two budgets of different sources, have %+v", BudgetFixtureConfig, o.Budgets)
	}
	return o
}

// TestBudgetFixtureUpToDate proves the budget recording rules the promtool
// tests load are what the generator renders from their configuration.
func TestBudgetFixtureUpToDate(t *testing.T) {
	want, err := RenderBudgetRules(budgetFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.FromSlash(BudgetFixtureRules))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s is stale (%v): run go generate ./dashboards", BudgetFixtureRules, err)
	}
}

// TestMixinBudgets renders the mixin of a configuration with two budgets
// (one per source): rules.yaml records the five series of each, exactly
// the group the promtool tests load; alerts.yaml has the budget alerts (as
// without budgets); both load in promtool; the overview has the Budgets row.
func TestMixinBudgets(t *testing.T) {
	bin := requirePromtool(t)
	files, err := MixinFiles(budgetFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	var records, alerts RuleFile
	if err := yaml.UnmarshalStrict(files[MixinRulesFile], &records); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(files[MixinAlertsFile], &alerts); err != nil {
		t.Fatal(err)
	}
	var fixture RuleFile
	b, err := os.ReadFile(filepath.FromSlash(BudgetFixtureRules))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &fixture); err != nil {
		t.Fatal(err)
	}
	var group *RuleGroup
	for i, g := range records.Groups {
		if g.Name == ruleGroupBudgets {
			group = &records.Groups[i]
		}
	}
	if group == nil || !reflect.DeepEqual(*group, fixture.Groups[0]) {
		t.Fatalf("rules.yaml's %s group differs from %s", ruleGroupBudgets, BudgetFixtureRules)
	}
	per := map[string][]string{}
	for _, r := range group.Rules {
		per[r.Labels["budget"]] = append(per[r.Labels["budget"]], r.Record)
		if r.Labels["source"] == "" || r.Labels["window"] == "" {
			t.Errorf("%s of %s lacks source or window: %v", r.Record, r.Labels["budget"], r.Labels)
		}
	}
	want := []string{RecordCostBudgetAmount, RecordCostBudgetSpend, RecordCostBudgetRemaining, RecordCostBudgetForecast, RecordCostBudgetBurnRate}
	for _, name := range []string{"sessions-daily", "review-monthly"} {
		if !reflect.DeepEqual(per[name], want) {
			t.Errorf("budget %s records %v, want %v", name, per[name], want)
		}
	}
	var r string
	for _, rule := range group.Rules {
		r += rule.Expr + "\n"
	}
	for _, s := range []string{`increase(cbc_cost_usd_total{demo!="true"}[1d])`, `cbc_workflow_cost_usd_total{namespace="team-a", workflow=~"sim-review|sim-fanout", demo!="true"}[30d]`} {
		if !strings.Contains(r, s) {
			t.Errorf("the budget rules lack %q", s)
		}
	}
	names := map[string]bool{}
	for _, g := range alerts.Groups {
		for _, a := range g.Rules {
			names[a.Alert] = true
		}
	}
	for _, a := range []string{AlertCostBudgetBurn, AlertCostBudgetExceeded, AlertRunCostAnomaly} {
		if !names[a] {
			t.Errorf("alerts.yaml lacks %s", a)
		}
	}
	if !bytes.Contains(files[MixinDashboardsDir+"/"+mixinOverviewFile], []byte(RecordCostBudgetForecast)) {
		t.Errorf("the overview does not draw %s", RecordCostBudgetForecast)
	}
	checkMixinRules(t, bin, files)
	// Without budgets there is no budget group (an empty group is noise),
	// but the alerts are there, silent.
	def, err := MixinFiles(readMixinConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(def[MixinRulesFile], []byte(ruleGroupBudgets)) || !bytes.Contains(def[MixinAlertsFile], []byte(AlertCostBudgetExceeded)) {
		t.Errorf("default mixin: want no %s group and the budget alerts", ruleGroupBudgets)
	}
}

// TestBudgetConfigErrors proves a bad budget or anomaly setting is refused
// rather than rendered into rules that never fire or fail to load.
func TestBudgetConfigErrors(t *testing.T) {
	ok := "  - {name: b, source: session, window: 1d, amountUSD: 10}\n"
	if _, err := MixinFiles([]byte("budgets:\n" + ok)); err != nil {
		t.Fatalf("a valid budget is refused: %v", err)
	}
	// A regex with backslashes and quotes is escaped into the PromQL string.
	files, err := MixinFiles([]byte("budgets:\n  - {name: r, source: workflow, workflow: 'rev\\d+|say \"hi\"', window: 1h, amountUSD: 1}\n"))
	if err != nil {
		t.Fatalf("a regex with a backslash and quotes: %v", err)
	}
	if want := `workflow=~"rev\\d+|say \"hi\""`; !bytes.Contains(files[MixinRulesFile], []byte(want)) {
		t.Errorf("rules.yaml lacks %s:\n%s", want, files[MixinRulesFile])
	}
	for _, cfg := range []string{
		"budgets:\n" + ok + ok, // duplicate name
		"budgets:\n  - {name: 'a b', source: session, window: 1d, amountUSD: 10}\n",                            // name not a label value we allow
		"budgets:\n  - {name: '', source: session, window: 1d, amountUSD: 10}\n",                               // no name
		"budgets:\n  - {name: b, source: tokens, window: 1d, amountUSD: 10}\n",                                 // unknown source
		"budgets:\n  - {name: b, source: session, workflow: review, window: 1d, amountUSD: 10}\n",              // session has no workflow label
		"budgets:\n  - {name: b, source: workflow, workflow: 'rev(', window: 1d, amountUSD: 10}\n",             // bad regex
		"budgets:\n  - {name: b, source: session, matchers: ['namespace'], window: 1d, amountUSD: 10}\n",       // not a matcher
		"budgets:\n  - {name: b, source: session, matchers: ['a=\"1\",b=\"2\"'], window: 1d, amountUSD: 10}\n", // two matchers in one
		"budgets:\n  - {name: b, source: session, window: 30m, amountUSD: 10}\n",                               // window too short
		"budgets:\n  - {name: b, source: session, window: 60d, amountUSD: 10}\n",                               // window too long
		"budgets:\n  - {name: b, source: session, window: 1d, amountUSD: 0}\n",                                 // no amount
		"budgets:\n  - {name: b, source: session, window: 1d, amountUSD: -5}\n",                                // negative
		"budgets:\n  - {name: b, source: session, window: 1d, amountUSD: 10, horizon: 2d}\n",                   // horizon past the window
		"budgets:\n  - {name: b, source: session, window: 1d, amountUSD: 10, lookback: 30s}\n",                 // lookback under 1m
		"budgets:\n  - {name: b, source: session, window: 1d, amountUSD: 10, amount: 5}\n",                     // unknown key
		"runCostAnomaly: {factor: 1}\n",
		"runCostAnomaly: {recent: 7d, baseline: 1d}\n",
		"runCostAnomaly: {minRuns: -1}\n",
	} {
		if _, err := MixinFiles([]byte(cfg)); err == nil {
			t.Errorf("MixinFiles(%q) succeeded, want an error", cfg)
		}
	}
}

// checkMixinRules runs promtool check rules on a rendered mixin's alerts.yaml
// and rules.yaml.
func checkMixinRules(t *testing.T, bin string, files map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	for _, n := range []string{MixinAlertsFile, MixinRulesFile} {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, files[n], 0o600); err != nil {
			t.Fatal(err)
		}
		promtool(t, bin, "check", "rules", p)
	}
}
