package dashboards

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v2"
)

// Cost budgets (issue 31): each configured budget becomes five recording
// rules of the same labels (budget, source, window); the alerts on them are
// generic (one rule each, whatever the number of budgets), so they are in
// every rendering, and silent while no budget is configured.
//
// A budget's window is ROLLING: the spend of the last 1d, 30d, ... A
// calendar month has no PromQL form that survives counter resets and
// restarts (increase needs a fixed range; "since the 1st" would need a
// recorded counter snapshot at midnight, lost whenever Prometheus misses
// that evaluation), while a rolling window is what the SLO's 30 days and
// every burn-rate rule already use.
const (
	RecordCostBudgetAmount    = "budget:cbc_budget_amount:usd"
	RecordCostBudgetSpend     = "budget:cbc_budget_spend:usd"
	RecordCostBudgetRemaining = "budget:cbc_budget_remaining:usd"
	RecordCostBudgetForecast  = "budget:cbc_budget_forecast:usd"
	RecordCostBudgetBurnRate  = "budget:cbc_budget_burn_rate:ratio"

	AlertCostBudgetBurn     = "CbcCostBudgetBurn"
	AlertCostBudgetExceeded = "CbcCostBudgetExceeded"
	AlertRunCostAnomaly     = "CbcWorkflowRunCostAnomaly"

	ruleGroupBudgets     = "cbc-otel-budget-recordings"
	ruleGroupCostAlerts  = "cbc-otel-cost-alerts"
	sessionCostMetric    = "cbc_cost_usd_total"
	runCostMetric        = "cbc_workflow_run_cost_usd"
	minBudgetWindow      = time.Hour
	maxBudgetWindow      = 31 * 24 * time.Hour
	budgetExceededFor    = 5 * time.Minute
	budgetBurnFor        = 15 * time.Minute
	defaultAnomalyFactor = 3
)

// BudgetSource is the cost a budget counts.
type BudgetSource string

// Budget sources. They differ in coverage and in lag.
const (
	// BudgetSession is the sessions' cost from the CLI's result lines
	// (cbc_cost_usd_total): every session, sub-agents and workflows
	// included, no CLI telemetry needed; it grows once per turn, when the
	// turn's result line comes (a long turn's spend shows at its end).
	BudgetSession BudgetSource = "session"
	// BudgetWorkflow is the workflows' cost joined from the CLI's own
	// telemetry (cbc_workflow_cost_usd_total{workflow}): per workflow,
	// only with `run --cli-telemetry.join`; it grows per model call,
	// seconds after each.
	BudgetWorkflow BudgetSource = "workflow"
)

// Budget is one spending limit.
type Budget struct {
	// Name is the budget label of its series and alerts.
	Name string
	// Source is the cost counted: session or workflow.
	Source BudgetSource
	// Workflow is a regex of the workflows counted (source workflow
	// only); "" counts every workflow.
	Workflow string
	// Matchers are further PromQL label matchers of the cost series, e.g.
	// namespace="team-a".
	Matchers []string
	// Window is the rolling window the amount applies to (1h … 31d).
	Window time.Duration
	// AmountUSD is the budget.
	AmountUSD float64
	// Lookback is the window of the recent spend rate the forecast
	// extrapolates; 0 means Window/24 (1h for a day, 30h for 30 days).
	Lookback time.Duration
	// Horizon is how far ahead the forecast looks; 0 means Window/4 (6h
	// for a day, 7d12h for 30 days).
	Horizon time.Duration
}

// RunCostAnomaly parameterizes CbcWorkflowRunCostAnomaly.
type RunCostAnomaly struct {
	// Factor: the recent median over Factor × the baseline p95 fires;
	// 0 means 3.
	Factor float64
	// Recent is the window of the recent runs' median; 0 means 1h.
	Recent time.Duration
	// Baseline is the window of the workflow's own p95; 0 means 7d.
	Baseline time.Duration
	// MinRuns is how many runs the recent window needs; 0 means 3.
	MinRuns int
}

var budgetName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// budgetsWithDefaults fills and validates the budgets and the anomaly
// parameters of o.
func (o RuleOptions) budgetsWithDefaults() (RuleOptions, error) {
	seen := map[string]bool{}
	bs := make([]Budget, len(o.Budgets))
	for i, b := range o.Budgets {
		if !budgetName.MatchString(b.Name) || seen[b.Name] {
			return o, fmt.Errorf("dashboards: budget name %q: want a unique [A-Za-z0-9_.-]+", b.Name)
		}
		seen[b.Name] = true
		switch b.Source {
		case BudgetSession:
			if b.Workflow != "" {
				return o, fmt.Errorf("dashboards: budget %s: session cost has no workflow label (use source workflow)", b.Name)
			}
		case BudgetWorkflow:
			if _, err := regexp.Compile("^(?:" + b.Workflow + ")$"); err != nil {
				return o, fmt.Errorf("dashboards: budget %s: workflow regex: %w", b.Name, err)
			}
		default:
			return o, fmt.Errorf("dashboards: budget %s: source %q (want %s or %s)", b.Name, b.Source, BudgetSession, BudgetWorkflow)
		}
		for _, m := range b.Matchers {
			ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector("{" + m + "}")
			if err != nil || len(ms) != 1 {
				return o, fmt.Errorf("dashboards: budget %s: matcher %q is not one PromQL label matcher (%v)", b.Name, m, err)
			}
		}
		// The selector as the rules will hold it parses (a regex's
		// backslashes and quotes are escaped, a matcher is one matcher).
		if _, err := parser.NewParser(parser.Options{}).ParseExpr(o.costSelector(b)); err != nil {
			return o, fmt.Errorf("dashboards: budget %s: selector: %w", b.Name, err)
		}
		if b.Window < minBudgetWindow || b.Window > maxBudgetWindow {
			return o, fmt.Errorf("dashboards: budget %s: window %s not in [%s, %s]", b.Name, promDuration(b.Window), promDuration(minBudgetWindow), promDuration(maxBudgetWindow))
		}
		if !(b.AmountUSD > 0) {
			return o, fmt.Errorf("dashboards: budget %s: amountUSD %v, want > 0", b.Name, b.AmountUSD)
		}
		if b.Lookback == 0 {
			b.Lookback = b.Window / 24
		}
		if b.Horizon == 0 {
			b.Horizon = b.Window / 4
		}
		if b.Lookback < time.Minute || b.Lookback > b.Window || b.Horizon < time.Minute || b.Horizon > b.Window {
			return o, fmt.Errorf("dashboards: budget %s: lookback %s and horizon %s must be in [1m, window]", b.Name, promDuration(b.Lookback), promDuration(b.Horizon))
		}
		bs[i] = b
	}
	o.Budgets = bs
	a := &o.RunCostAnomaly
	if a.Factor == 0 {
		a.Factor = defaultAnomalyFactor
	}
	if a.Recent == 0 {
		a.Recent = time.Hour
	}
	if a.Baseline == 0 {
		a.Baseline = 7 * 24 * time.Hour
	}
	if a.MinRuns == 0 {
		a.MinRuns = 3
	}
	if !(a.Factor > 1) || a.Recent <= 0 || a.Baseline <= a.Recent || a.MinRuns < 1 {
		return o, fmt.Errorf("dashboards: run cost anomaly %+v: want factor > 1, 0 < recent < baseline, minRuns ≥ 1", *a)
	}
	return o, nil
}

// costSelector is the selector of the cost series budget b counts.
func (o RuleOptions) costSelector(b Budget) string {
	metric := sessionCostMetric
	matchers := append([]string(nil), b.Matchers...)
	if b.Source == BudgetWorkflow {
		metric = workflowCostMetric
		if b.Workflow != "" {
			matchers = append(matchers, "workflow=~"+strconv.Quote(b.Workflow))
		}
	}
	return o.sel(metric, matchers...)
}

// budgetRecordings are the five series of each budget. Spend and forecast
// count from nothing (`or vector(0)`), so a budget no cost series matches
// yet still has its spend, remaining and forecast. Remaining and forecast
// read the spend recorded just before in the same group (Prometheus
// evaluates a group's rules in order, each seeing the previous ones'
// results), so the window's increase is computed once per evaluation.
func (o RuleOptions) budgetRecordings() RuleGroup {
	g := RuleGroup{Name: ruleGroupBudgets}
	for _, b := range o.Budgets {
		labels := map[string]string{"budget": b.Name, "source": string(b.Source), "window": promDuration(b.Window)}
		sel := o.costSelector(b)
		spend := RecordCostBudgetSpend + `{budget="` + b.Name + `"}`
		rate := fmt.Sprintf("(sum(rate(%s[%s])) or vector(0))", sel, o.scaled(b.Lookback))
		g.Rules = append(g.Rules,
			Rule{Record: RecordCostBudgetAmount, Expr: "vector(" + num(b.AmountUSD) + ")", Labels: labels},
			Rule{Record: RecordCostBudgetSpend, Expr: fmt.Sprintf("sum(increase(%s[%s])) or vector(0)", sel, o.scaled(b.Window)), Labels: labels},
			Rule{Record: RecordCostBudgetRemaining, Expr: num(b.AmountUSD) + " - " + spend, Labels: labels},
			// The recent rate × the horizon on top of today's spend. What
			// leaves the rolling window meanwhile is not subtracted: the
			// burn rate (below) is what tells a growing spend from a
			// steady one.
			Rule{Record: RecordCostBudgetForecast, Expr: spend + " + scalar" + rate + " * " + secs(o.scaledSeconds(b.Horizon)), Labels: labels},
			// The recent rate over the rate that spends exactly the amount
			// in one window: above 1, the spend keeps rising toward
			// rate × window > amount.
			Rule{Record: RecordCostBudgetBurnRate, Expr: rate + " * " + secs(o.scaledSeconds(b.Window)) + " / " + num(b.AmountUSD), Labels: labels},
		)
	}
	return g
}

// scaledSeconds is d × the window scale in whole seconds, as scaled
// rounds it.
func (o RuleOptions) scaledSeconds(d time.Duration) float64 {
	return math.Max(1, math.Round(d.Seconds()*o.WindowScale))
}

// secs formats seconds without an exponent (2592000, not 2.592e+06).
func secs(s float64) string { return strconv.FormatFloat(s, 'f', -1, 64) }

// costAlerts are the budget alerts (generic over every budget's series)
// and the run-cost anomaly.
func (o RuleOptions) costAlerts() RuleGroup {
	amountOf := `{{ with printf "` + RecordCostBudgetAmount + `{budget=%q}" $labels.budget | query }}{{ . | first | value | printf "%.2f" }}{{ end }}`
	a := o.RunCostAnomaly
	return RuleGroup{Name: ruleGroupCostAlerts, Rules: []Rule{
		{
			Alert: AlertCostBudgetBurn,
			// Forecast over the amount, the recent rate above the
			// budget's (burn rate > 1: not a steady spend that stays
			// under), and not yet exceeded (that is the critical alert).
			Expr: RecordCostBudgetForecast + " > " + RecordCostBudgetAmount + "\nand\n" + RecordCostBudgetBurnRate + " > 1\nunless\n" +
				RecordCostBudgetSpend + " > " + RecordCostBudgetAmount + "\n",
			For:    o.scaled(budgetBurnFor),
			Labels: map[string]string{"severity": SeverityWarning},
			Annotations: o.annotations("cost-budget-burn",
				`Budget {{ $labels.budget }} will be overspent at the current rate`,
				`At the recent spend rate, the {{ $labels.source }} cost of budget {{ $labels.budget }} over its rolling `+
					`{{ $labels.window }} is forecast to reach {{ $value | printf "%.2f" }} USD within the forecast horizon, `+
					`over its amount of `+amountOf+` USD (not spent yet). See the Budgets row of the overview dashboard.`),
		},
		{
			Alert:  AlertCostBudgetExceeded,
			Expr:   RecordCostBudgetSpend + " > " + RecordCostBudgetAmount + "\n",
			For:    o.scaled(budgetExceededFor),
			Labels: map[string]string{"severity": SeverityCritical},
			Annotations: o.annotations("cost-budget-exceeded",
				`Budget {{ $labels.budget }} is overspent`,
				`The {{ $labels.source }} cost of budget {{ $labels.budget }} over its rolling {{ $labels.window }} is `+
					`{{ $value | printf "%.2f" }} USD, over its amount of `+amountOf+` USD.`),
		},
		{
			Alert: AlertRunCostAnomaly,
			// No `for:` — the minimum number of recent runs is the
			// debounce, and the alert lasts while those runs are in the
			// recent window.
			Expr: "(\n" + o.runCostQuantile("0.5", a.Recent) + "\n)\n> " + num(a.Factor) + " * (\n" +
				o.runCostQuantile("0.95", a.Baseline) + "\n)\nand\n(\n" + o.runCount(a.Recent) + "\n) >= " + fmt.Sprint(a.MinRuns) + "\n",
			Labels: map[string]string{"severity": SeverityWarning},
			Annotations: o.annotations("workflow-run-cost-anomaly",
				"Runs of workflow {{ $labels.workflow }} cost several times their usual",
				fmt.Sprintf("The median cost of workflow {{ $labels.workflow }}'s runs over the last %s is {{ $value | printf \"%%.4f\" }} USD, "+
					"over %s× its own p95 over %s (at least %d runs in the window). Open the costliest run's trace from the "+
					"run-cost panels' exemplars.", promDuration(a.Recent), num(a.Factor), promDuration(a.Baseline), a.MinRuns)),
		},
	}}
}

// runCostQuantile is the q-quantile of the run-cost histogram over w, by
// workflow (and group-by labels).
func (o RuleOptions) runCostQuantile(q string, w time.Duration) string {
	return runCostQuantileExpr(q, o.scaled(w), o.byWith("workflow"), o.byWith("workflow", "le"), o.sel(runCostMetric), o.sel(runCostMetric+"_bucket"))
}

// runCostQuantileExpr reads the native histogram when Prometheus ingests
// it, else the classic buckets (the rule and the panel share it).
func runCostQuantileExpr(q, window, by, byLe, native, classic string) string {
	return "  histogram_quantile(" + q + ", sum" + by + " (rate(" + native + "[" + window + "])))\n  or\n" +
		"  histogram_quantile(" + q + ", sum" + byLe + " (rate(" + classic + "[" + window + "])))"
}

// runCount is the number of runs observed over w, by workflow.
func (o RuleOptions) runCount(w time.Duration) string {
	r := o.scaled(w)
	return "  sum" + o.byWith("workflow") + " (histogram_count(increase(" + o.sel(runCostMetric) + "[" + r + "])))\n  or\n" +
		"  sum" + o.byWith("workflow") + " (increase(" + o.sel(runCostMetric+"_count") + "[" + r + "]))"
}

// The budget tests' fixture, relative to the dashboards directory: a mixin
// configuration with budgets, and its budget recording rules alone, which
// the promtool tests load beside the rule file (go generate writes them).
const (
	BudgetFixtureConfig = "rules/tests/budgets/config.yaml"
	BudgetFixtureRules  = "rules/tests/budgets/rules.yml"
)

// RenderBudgetRules renders the budget recording rules alone of a mixin
// configuration (nothing else: loaded beside the default rule file, they
// complete it).
func RenderBudgetRules(config []byte) ([]byte, error) {
	c, err := ParseMixinConfig(config)
	if err != nil {
		return nil, err
	}
	o, err := c.Options().Rules.withDefaults()
	if err != nil {
		return nil, err
	}
	body, err := yaml.Marshal(RuleFile{Groups: []RuleGroup{o.budgetRecordings()}})
	if err != nil {
		return nil, err
	}
	return append([]byte("# Code generated by dashboards/gen from config.yaml; DO NOT EDIT.\n# The budget recording rules of config.yaml alone.\n"), body...), nil
}

// budgetPanels are the overview's row Budgets: every budget's spend,
// forecast and amount (the recording rules: empty until a budget is
// configured), and the two sides of CbcWorkflowRunCostAnomaly.
func budgetPanels(o RuleOptions) []PanelSpec {
	const none = " Empty until budgets are configured (mixin config `budgets`, dashboards/README.md#budgets)."
	a := o.RunCostAnomaly
	side := func(q string, w time.Duration) string {
		// The rule's expression, unindented as the other panels' queries.
		return strings.ReplaceAll(strings.TrimSpace(runCostQuantileExpr(q, promDuration(w), " by (workflow)", " by (workflow, le)",
			runCostMetric+"{"+workflow+"}", runCostMetric+"_bucket{"+workflow+"}")), "\n  ", "\n")
	}
	return []PanelSpec{
		{
			Title: "Spend vs budget",
			Description: "Each budget's spend over its rolling window, the forecast (spend + the recent rate × the horizon) and the amount, from the budget recording rules. " +
				"CbcCostBudgetBurn fires when the forecast passes the amount while the recent rate is above the budget's (burn rate > 1); CbcCostBudgetExceeded when the spend does." + none,
			Unit:    "currencyUSD",
			WhenRed: "A forecast above its amount: see the runbook of CbcCostBudgetBurn (find the spender in *Cost/h by workflow* or *Cost/h by model*); a spend above it: CbcCostBudgetExceeded.",
			Queries: []query{
				{Expr: RecordCostBudgetSpend, Legend: "{{budget}} spend ({{window}})"},
				{Expr: RecordCostBudgetForecast, Legend: "{{budget}} forecast"},
				{Expr: RecordCostBudgetAmount, Legend: "{{budget}} amount"},
			},
			kind: kindTimeseries, width: 12, height: 8, min: f64(0),
		},
		{
			Title:       "Budget remaining",
			Description: "Amount − spend of each budget over its rolling window; negative when overspent." + none,
			Unit:        "currencyUSD",
			WhenRed:     "Red: the budget is spent (CbcCostBudgetExceeded).",
			Queries:     []query{{Expr: RecordCostBudgetRemaining, Legend: "{{budget}}", Instant: true}},
			kind:        kindStat, width: 6, height: 8,
			steps: []dashboard.Threshold{step("red", nil), step("green", f64(0))},
		},
		{
			Title:       "Budget burn rate",
			Description: "Each budget's recent spend rate over the rate that spends exactly its amount per window: 1 spends the budget over the window, above 1 the spend keeps rising toward more." + none,
			Unit:        "x",
			WhenRed:     "Above 1 with the forecast over the amount: CbcCostBudgetBurn is (about to be) firing.",
			Queries:     []query{{Expr: RecordCostBudgetBurnRate, Legend: "{{budget}}", Instant: true}},
			kind:        kindStat, width: 6, height: 8,
			steps: []dashboard.Threshold{step("green", nil), step("orange", f64(1))},
		},
		{
			Title: fmt.Sprintf("Cost per run: last %s's p50 vs %s × the %s p95", promDuration(a.Recent), num(a.Factor), promDuration(a.Baseline)),
			Description: fmt.Sprintf("The two sides of CbcWorkflowRunCostAnomaly by workflow, from the run-cost histogram (native when ingested, else classic buckets): the median cost of the runs of the last %s, "+
				"and %s × the p95 of the workflow's own runs over %s. The alert fires where the first is above the second with at least %d runs in the %s. Exemplars link to the runs' traces.",
				promDuration(a.Recent), num(a.Factor), promDuration(a.Baseline), a.MinRuns, promDuration(a.Recent)),
			Unit:    "currencyUSD",
			WhenRed: "A p50 line above its workflow's threshold line: see the runbook of CbcWorkflowRunCostAnomaly; click the highest exemplar to open the costliest run's trace.",
			Queries: []query{
				{Expr: side("0.5", a.Recent), Legend: "{{workflow}} p50 (" + promDuration(a.Recent) + ")"},
				{Expr: num(a.Factor) + " * (\n" + side("0.95", a.Baseline) + "\n)", Legend: "{{workflow}} " + num(a.Factor) + " × p95 (" + promDuration(a.Baseline) + ")"},
			},
			kind: kindTimeseries, width: 24, height: 8, exemplars: true, min: f64(0),
		},
	}
}
