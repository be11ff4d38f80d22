package dashboards

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v2"
)

// SLO identity. The sloth_* labels follow sloth's conventions so that
// sloth's and pyrra's Grafana dashboards, and anything else that knows
// those names, read our recording rules unchanged.
const (
	SLOService = "cbc-otel"
	SLOName    = "workflow-success"
	SLOID      = SLOService + "-" + SLOName
	// DefaultTarget is the default objective: 99% of terminal workflow
	// runs succeed over DefaultPeriod.
	DefaultTarget = 0.99
	// DefaultPeriod is the SLO period (the error budget's window).
	DefaultPeriod = 30 * 24 * time.Hour
	// DefaultJobRegex matches the scrape job of cbc-otel targets in the
	// exporter-down alert.
	DefaultJobRegex = ".*cbc-otel.*"
	// DefaultRunbookURL is where every alert's runbook_url points, plus a
	// section anchor: the dashboards README.
	DefaultRunbookURL = "https://github.com/cbc-otel/cbc-otel/blob/main/dashboards/README.md"
	// DefaultInterruptP95 is the interrupt → stop latency (p95) above which
	// CbcInterruptLatencyHigh fires.
	DefaultInterruptP95 = 5 * time.Second
)

// StoppedPolicy says how runs that ended with status "stopped" (a user
// cancelled them with an interrupt or stop_task) enter the SLI.
type StoppedPolicy string

// Stopped policies. The default excludes them: a cancel is the user's
// choice, neither a success nor a failure of the workflow machinery.
const (
	StoppedExcluded StoppedPolicy = "excluded" // in neither errors nor total (default)
	StoppedGood     StoppedPolicy = "good"     // a valid, successful event
	StoppedBad      StoppedPolicy = "bad"      // an error (e.g. users cancel runs that hang)
)

// DemoPolicy says whether the series of `cbc-otel demo` (every one carries
// demo="true") enter the rules.
type DemoPolicy string

// Demo policies. The default leaves them out: a demo scraped by a shared
// Prometheus must page nobody, and its failed and stopped runs are
// scripted, not news.
const (
	DemoExcluded DemoPolicy = "excluded" // every cbc_* selector has demo!="true" (default)
	DemoIncluded DemoPolicy = "included" // the demo's series count like any other
)

// demoMatcher is the matcher that leaves the demo's series out; the label
// is metrics.DemoLabel (the contract test checks it against the registry).
const demoMatcher = `demo!="true"`

// RuleOptions parameterizes the Prometheus rules. The zero value renders
// the committed default (rules/cbc-otel.rules.yml).
type RuleOptions struct {
	// Target is the objective in (0, 1); 0 means DefaultTarget.
	Target float64
	// Stopped is how stopped runs count; "" means StoppedExcluded.
	Stopped StoppedPolicy
	// Demo is whether the demo's series (demo="true") count; "" means
	// DemoExcluded.
	Demo DemoPolicy
	// GroupBy are labels the SLI is computed per (e.g. namespace); none
	// means one SLO over every workflow run Prometheus sees.
	GroupBy []string
	// JobRegex selects cbc-otel's scrape jobs for the exporter-down
	// alert; "" means DefaultJobRegex.
	JobRegex string
	// RunbookURL is the base of every runbook_url; "" means
	// DefaultRunbookURL.
	RunbookURL string
	// InterruptP95 is the threshold of CbcInterruptLatencyHigh; 0 means
	// DefaultInterruptP95.
	InterruptP95 time.Duration
	// BurnWindows are the burn-rate alert conditions; none means the
	// package's BurnWindows. Each has severity critical (the page alert)
	// or warning (the ticket alert).
	BurnWindows []BurnWindow
	// WindowScale multiplies every range and `for` duration; 0 means 1.
	// Tests render with 1/60 (1h → 1m) to see burn-rate alerts fire in
	// seconds. Rule names and sloth_window labels keep the nominal
	// windows, so a scaled rendering has the same series and alerts.
	WindowScale float64
	// Budgets are the cost budgets, each recorded by its own rules (the
	// budget alerts are there without any); none by default.
	Budgets []Budget
	// RunCostAnomaly parameterizes CbcWorkflowRunCostAnomaly; zero fields
	// take its defaults.
	RunCostAnomaly RunCostAnomaly
}

// withDefaults fills the zero fields and validates the rest.
func (o RuleOptions) withDefaults() (RuleOptions, error) {
	if o.Target == 0 {
		o.Target = DefaultTarget
	}
	if !(o.Target > 0 && o.Target < 1) {
		return o, fmt.Errorf("dashboards: SLO target %v is not in (0, 1)", o.Target)
	}
	switch o.Stopped {
	case "":
		o.Stopped = StoppedExcluded
	case StoppedExcluded, StoppedGood, StoppedBad:
	default:
		return o, fmt.Errorf("dashboards: unknown stopped policy %q (want excluded, good or bad)", o.Stopped)
	}
	switch o.Demo {
	case "":
		o.Demo = DemoExcluded
	case DemoExcluded, DemoIncluded:
	default:
		return o, fmt.Errorf("dashboards: unknown demo policy %q (want excluded or included)", o.Demo)
	}
	for _, l := range o.GroupBy {
		if !model.LegacyValidation.IsValidLabelName(l) {
			return o, fmt.Errorf("dashboards: bad group-by label %q", l)
		}
	}
	if o.JobRegex == "" {
		o.JobRegex = DefaultJobRegex
	}
	if o.RunbookURL == "" {
		o.RunbookURL = DefaultRunbookURL
	}
	if o.InterruptP95 == 0 {
		o.InterruptP95 = DefaultInterruptP95
	}
	if len(o.BurnWindows) == 0 {
		o.BurnWindows = BurnWindows
	}
	for _, b := range o.BurnWindows {
		if b.Severity != SeverityCritical && b.Severity != SeverityWarning {
			return o, fmt.Errorf("dashboards: burn window severity %q (want %s or %s)", b.Severity, SeverityCritical, SeverityWarning)
		}
		if !(b.Factor > 0) || b.Short <= 0 || b.Long <= b.Short || b.Long >= DefaultPeriod {
			return o, fmt.Errorf("dashboards: bad burn window %+v (want factor > 0, 0 < short < long < %s)", b, promDuration(DefaultPeriod))
		}
	}
	if o.WindowScale == 0 {
		o.WindowScale = 1
	}
	if !(o.WindowScale > 0) || math.IsInf(o.WindowScale, 0) {
		return o, fmt.Errorf("dashboards: bad window scale %v", o.WindowScale)
	}
	return o.budgetsWithDefaults()
}

// ErrorBudget returns 1 − target as the rules write it.
func (o RuleOptions) errorBudget() string { return "(1 - " + num(o.Target) + ")" }

// num formats a float the shortest way that reads back the same.
func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// BurnWindow is one multiwindow multi-burn-rate alert condition: the
// error ratio must exceed Factor × the error budget over both windows.
// The long window says the budget is really burning; the short one says
// it still is, so the alert resets soon after the burn stops.
type BurnWindow struct {
	Severity    string
	Factor      float64
	Short, Long time.Duration
}

// Alert severities, as the monitoring-mixins conventions name them: every
// alert carries one of the three in its severity label. Sloth's page and
// ticket alerts are critical and warning (their sloth_severity label keeps
// sloth's page and ticket).
const (
	SeverityCritical = "critical"
	SeverityWarning  = "warning"
	SeverityInfo     = "info"
)

// slothSeverity maps a severity to sloth's name for it.
func slothSeverity(sev string) string {
	if sev == SeverityCritical {
		return "page"
	}
	return "ticket"
}

// BurnWindows are the SRE-workbook windows sloth and pyrra generate for a
// 30-day SLO: 2% of the budget in 1h or 5% in 6h pages (critical); 10% in
// 1d or 100% in 3d opens a ticket (warning).
var BurnWindows = []BurnWindow{
	{SeverityCritical, 14.4, 5 * time.Minute, time.Hour},
	{SeverityCritical, 6, 30 * time.Minute, 6 * time.Hour},
	{SeverityWarning, 3, 2 * time.Hour, 24 * time.Hour},
	{SeverityWarning, 1, 6 * time.Hour, 3 * 24 * time.Hour},
}

// sliWindows are the windows the SLI is recorded over: every window of the
// burn windows (and sloth's 5m window, also the current burn rate).
func (o RuleOptions) sliWindows() []time.Duration {
	ws := []time.Duration{5 * time.Minute}
	for _, b := range o.BurnWindows {
		for _, w := range []time.Duration{b.Short, b.Long} {
			if !slices.Contains(ws, w) {
				ws = append(ws, w)
			}
		}
	}
	slices.Sort(ws)
	return ws
}

// promDuration formats d as Prometheus does (1h, 1d, 1h12m).
func promDuration(d time.Duration) string { return model.Duration(d).String() }

// scaled formats d × the window scale, rounded to whole seconds (no
// window shorter than 1s: Prometheus ranges below a scrape interval are
// empty anyway).
func (o RuleOptions) scaled(d time.Duration) string {
	s := time.Duration(math.Round(float64(d)*o.WindowScale/float64(time.Second))) * time.Second
	if s < time.Second {
		s = time.Second
	}
	return promDuration(s)
}

// Alert and record names. Tests and the README refer to them.
const (
	AlertSLOPage            = "CbcWorkflowSLOBurnRatePage"
	AlertSLOTicket          = "CbcWorkflowSLOBurnRateTicket"
	AlertExporterDown       = "CbcOtelExporterDown"
	AlertExporterAbsent     = "CbcOtelExporterAbsent"
	AlertProtocolViolations = "CbcProtocolViolationsRising"
	AlertAbandonedRuns      = "CbcWorkflowRunsAbandoned"
	AlertInterruptLatency   = "CbcInterruptLatencyHigh"
	AlertWorkflowStalled    = "CbcWorkflowStalled"
	AlertAgentStalled       = "CbcWorkflowAgentStalled"
	AlertExportErrors       = "CbcOtelTraceExportErrors"
	AlertSpansDropped       = "CbcOtelSpansDropped"
	AlertTapDropping        = "CbcOtelTapDropping"
	AlertLinesRejected      = "CbcOtelLinesRejected"

	RecordSLIError        = "slo:sli_error:ratio_rate" // + window, e.g. 5m
	RecordObjective       = "slo:objective:ratio"
	RecordErrorBudget     = "slo:error_budget:ratio"
	RecordTimePeriodDays  = "slo:time_period:days"
	RecordCurrentBurnRate = "slo:current_burn_rate:ratio"
	RecordPeriodBurnRate  = "slo:period_burn_rate:ratio"
	RecordBudgetRemaining = "slo:period_error_budget_remaining:ratio"
	RecordSLOInfo         = "sloth_slo_info"
	// RecordCostPerSuccessfulRun is the USD a workflow spends per run that
	// completed, over 1h: every run's cost (failed, stopped and abandoned
	// runs' too) over the completed runs alone, i.e. the cost of one
	// success. See costRecordings.
	RecordCostPerSuccessfulRun = "workflow:cbc_workflow_cost_usd_per_successful_run:ratio_rate1h"
	sloSelectorLabels          = `sloth_id="` + SLOID + `", sloth_service="` + SLOService + `", sloth_slo="` + SLOName + `"`
	sloJoinLabels              = "sloth_id, sloth_service, sloth_slo"
	workflowRunsMetric         = "cbc_workflow_runs_total"
	ruleGroupSLIRecordings     = "sloth-slo-sli-recordings-" + SLOID
	ruleGroupMeta              = "sloth-slo-meta-recordings-" + SLOID
	ruleGroupSLOAlerts         = "sloth-slo-alerts-" + SLOID
	ruleGroupExporter          = "cbc-otel-exporter"
	ruleGroupWorkflows         = "cbc-otel-workflows"
	ruleGroupCost              = "cbc-otel-cost-recordings"
	workflowCostMetric         = "cbc_workflow_cost_usd_total"
	// workflowStalledMetric is the gauge of open runs that have seen no
	// event for the exporter's --tracker.stall-after (default 10m); it drops back
	// when an event comes.
	workflowStalledMetric = "cbc_workflow_runs_stalled"
	// agentsStalledMetric is the gauge of live agents of open runs that
	// showed no progress for --tracker.stall-after; it drops back when they move
	// or end or their run ends.
	agentsStalledMetric = "cbc_workflow_agents_stalled"
)

// SLOSelector is the label matcher list that selects this SLO's
// recording-rule series (dashboards use it).
func SLOSelector() string { return sloSelectorLabels }

// Statuses returns the run statuses that count as errors and as valid
// events under the policy.
func (o RuleOptions) statuses() (errs, total []string) {
	errs = []string{"failed", "abandoned"}
	total = []string{"completed", "failed", "abandoned"}
	switch o.Stopped {
	case StoppedGood:
		total = append(total, "stopped")
	case StoppedBad:
		errs = append(errs, "stopped")
		total = append(total, "stopped")
	}
	return errs, total
}

// RuleFile is the YAML shape of a Prometheus rule file.
type RuleFile struct {
	Groups []RuleGroup `yaml:"groups"`
}

// RuleGroup is one group of a rule file.
type RuleGroup struct {
	Name     string `yaml:"name"`
	Interval string `yaml:"interval,omitempty"`
	Rules    []Rule `yaml:"rules"`
}

// Rule is a recording or an alerting rule. Maps marshal with sorted keys,
// so the rendering is deterministic.
type Rule struct {
	Record      string            `yaml:"record,omitempty"`
	Alert       string            `yaml:"alert,omitempty"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

// Rules builds the rule groups for opts.
func Rules(opts RuleOptions) (RuleFile, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return RuleFile{}, err
	}
	rf := RuleFile{Groups: []RuleGroup{
		o.sliRecordings(),
		o.metaRecordings(),
		o.sloAlerts(),
		o.exporterAlerts(),
		o.workflowAlerts(),
		o.costRecordings(),
	}}
	if len(o.Budgets) > 0 {
		rf.Groups = append(rf.Groups, o.budgetRecordings())
	}
	rf.Groups = append(rf.Groups, o.costAlerts())
	return rf, nil
}

// RenderRules renders the rule file for opts as YAML, with a header that
// says how it was made.
func RenderRules(opts RuleOptions) ([]byte, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	rf, err := Rules(o)
	if err != nil {
		return nil, err
	}
	body, err := yaml.Marshal(rf)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Code generated by `go generate ./dashboards` (dashboards/gen); DO NOT EDIT.\n")
	fmt.Fprintf(&b, "# cbc-otel Prometheus rules: workflow-success SLO (target %s, stopped runs %s", num(o.Target), o.Stopped)
	if len(o.GroupBy) > 0 {
		fmt.Fprintf(&b, ", per %s", strings.Join(o.GroupBy, ", "))
	}
	b.WriteString("), operational alerts and the cost-per-successful-run recording.\n")
	if o.WindowScale != 1 {
		fmt.Fprintf(&b, "# TEST RENDERING: every window scaled by %s; not for production.\n", num(o.WindowScale))
	}
	b.WriteString("# Valid for Prometheus 2.42 and later. Runbooks: dashboards/README.md.\n")
	b.Write(body)
	return b.Bytes(), nil
}

func (o RuleOptions) by() string {
	if len(o.GroupBy) == 0 {
		return ""
	}
	return " by (" + strings.Join(o.GroupBy, ", ") + ")"
}

func statusMatcher(ss []string) string {
	return `status=~"` + strings.Join(ss, "|") + `"`
}

// sel is a selector of metric with matchers, plus the demo's exclusion
// under DemoExcluded: every rule on cbc_* series goes through it, so that
// no alert and no SLO sees the demo.
func (o RuleOptions) sel(metric string, matchers ...string) string {
	if o.Demo != DemoIncluded {
		matchers = append(matchers, demoMatcher)
	}
	if len(matchers) == 0 {
		return metric
	}
	return metric + "{" + strings.Join(matchers, ", ") + "}"
}

func sloLabels(extra map[string]string) map[string]string {
	l := map[string]string{"sloth_id": SLOID, "sloth_service": SLOService, "sloth_slo": SLOName}
	for k, v := range extra {
		l[k] = v
	}
	return l
}

// sliRecordings records the error ratio over every window. Each window is
// computed from the raw counters rather than sloth's "optimized" period
// ratio (sum_over_time of the 5m ratio): workflows are rare events, most
// 5-minute windows hold no terminal run, their ratio is NaN (0/0), and a
// single NaN would poison a sum_over_time for the whole period.
func (o RuleOptions) sliRecordings() RuleGroup {
	errs, total := o.statuses()
	g := RuleGroup{Name: ruleGroupSLIRecordings}
	ws := append(o.sliWindows(), DefaultPeriod)
	for _, w := range ws {
		nominal := promDuration(w)
		r := o.scaled(w)
		g.Rules = append(g.Rules, Rule{
			Record: RecordSLIError + nominal,
			Expr: fmt.Sprintf("(\n  sum%s(rate(%s[%s]))\n)\n/\n(\n  sum%s(rate(%s[%s]))\n)\n",
				o.by(), o.sel(workflowRunsMetric, statusMatcher(errs)), r,
				o.by(), o.sel(workflowRunsMetric, statusMatcher(total)), r),
			Labels: sloLabels(map[string]string{"sloth_window": nominal}),
		})
	}
	return g
}

func (o RuleOptions) metaRecordings() RuleGroup {
	sel := "{" + sloSelectorLabels + "}"
	join := " / on(" + sloJoinLabels + ") group_left\n" + RecordErrorBudget + sel + "\n"
	return RuleGroup{Name: ruleGroupMeta, Rules: []Rule{
		{Record: RecordObjective, Expr: "vector(" + num(o.Target) + ")", Labels: sloLabels(nil)},
		{Record: RecordErrorBudget, Expr: "vector" + o.errorBudget(), Labels: sloLabels(nil)},
		{Record: RecordTimePeriodDays, Expr: "vector(" + num(DefaultPeriod.Hours()/24) + ")", Labels: sloLabels(nil)},
		{Record: RecordCurrentBurnRate, Expr: RecordSLIError + "5m" + sel + join, Labels: sloLabels(nil)},
		{Record: RecordPeriodBurnRate, Expr: RecordSLIError + promDuration(DefaultPeriod) + sel + join, Labels: sloLabels(nil)},
		{Record: RecordBudgetRemaining, Expr: "1 - " + RecordPeriodBurnRate + sel, Labels: sloLabels(nil)},
		{Record: RecordSLOInfo, Expr: "vector(1)", Labels: sloLabels(map[string]string{
			"sloth_mode": "cbc-otel-generated", "sloth_objective": pct(o.Target), "sloth_spec": "prometheus/v1", "sloth_version": "v0.16.0",
		})},
	}}
}

// sloAlerts are the two multiwindow multi-burn-rate alerts. Each condition
// needs BOTH of its windows over the threshold: a short burst that the 5m
// window sees alone does not page, and once a burn stops the short window
// drops within minutes and the alert resolves.
func (o RuleOptions) sloAlerts() RuleGroup {
	g := RuleGroup{Name: ruleGroupSLOAlerts}
	sel := "{" + sloSelectorLabels + "}"
	for _, sev := range []string{SeverityCritical, SeverityWarning} {
		var conds []string
		var desc []string
		for _, b := range o.BurnWindows {
			if b.Severity != sev {
				continue
			}
			thr := "(" + num(b.Factor) + " * " + o.errorBudget() + ")"
			cond := func(w time.Duration) string {
				return "max(" + RecordSLIError + promDuration(w) + sel + " > " + thr + ") without (sloth_window)"
			}
			conds = append(conds, "(\n  "+cond(b.Short)+"\n  and\n  "+cond(b.Long)+"\n)")
			desc = append(desc, fmt.Sprintf("%s× over %s and %s", num(b.Factor), promDuration(b.Long), promDuration(b.Short)))
		}
		if len(conds) == 0 {
			continue // a configuration without windows of this severity
		}
		name, anchor := AlertSLOPage, "slo-burn-rate-page"
		summary := "cbc workflows are burning the error budget fast (page)"
		if sev == SeverityWarning {
			name, anchor = AlertSLOTicket, "slo-burn-rate-ticket"
			summary = "cbc workflows are burning the error budget steadily (ticket)"
		}
		g.Rules = append(g.Rules, Rule{
			Alert:  name,
			Expr:   strings.Join(conds, "\nor\n") + "\n",
			Labels: map[string]string{"severity": sev, "sloth_severity": slothSeverity(sev)},
			Annotations: map[string]string{
				"summary": summary,
				"description": fmt.Sprintf("The failed (+ abandoned) share of terminal workflow runs is burning the %s%% "+
					"30-day SLO's error budget at %s (burn rate = error ratio / %s). "+
					"See the SLO row of the \"cbc workflows — overview\" dashboard.",
					pct(o.Target), strings.Join(desc, ", or "), o.errorBudget()),
				"runbook_url": o.RunbookURL + "#" + anchor,
			},
		})
	}
	return g
}

// opLabels are the labels the operational alerts aggregate by: the
// target's identity wherever Prometheus or Kubernetes service discovery
// put it (a label that a target lacks just stays empty).
const opLabels = "job, instance, namespace, pod"

func (o RuleOptions) exporterAlerts() RuleGroup {
	return RuleGroup{Name: ruleGroupExporter, Rules: []Rule{
		{
			Alert: AlertExporterDown,
			Expr:  `up{job=~"` + o.JobRegex + `"} == 0`,
			For:   o.scaled(5 * time.Minute),
			Labels: map[string]string{
				"severity": SeverityWarning,
			},
			Annotations: o.annotations("exporter-down",
				"cbc-otel target {{ $labels.instance }} ({{ $labels.job }}) is down",
				"Prometheus has not scraped {{ $labels.instance }} of job {{ $labels.job }} for 5 minutes: "+
					"workflow metrics from it are missing and the SLO is blind to its runs."),
		},
		{
			Alert: AlertExporterAbsent,
			Expr:  `absent(cbc_otel_build_info)`,
			For:   o.scaled(15 * time.Minute),
			Labels: map[string]string{
				"severity": SeverityWarning,
			},
			Annotations: o.annotations("exporter-absent",
				"No cbc-otel exporter is reporting",
				"No cbc_otel_build_info series has been seen for 15 minutes: no cbc-otel target is scraped at all "+
					"(service discovery, scrape config or the deployment is broken), so every cbc_* alert is silent."),
		},
		{
			Alert: AlertExportErrors,
			Expr:  `sum by (` + opLabels + `) (increase(` + o.sel("cbc_otel_export_errors_total") + `[` + o.scaled(10*time.Minute) + `])) > 0`,
			For:   o.scaled(10 * time.Minute),
			Labels: map[string]string{
				"severity": SeverityWarning,
			},
			Annotations: o.annotations("trace-export-errors",
				"cbc-otel {{ $labels.instance }} keeps failing to export traces",
				"Trace exports keep failing (every 10-minute window for 10 minutes): "+
					"the OTLP endpoint is unreachable, rejecting, or too slow. Metrics are unaffected."),
		},
		{
			Alert: AlertSpansDropped,
			Expr:  `sum by (` + opLabels + `) (increase(` + o.sel("cbc_otel_spans_dropped_total") + `[` + o.scaled(10*time.Minute) + `])) > 0`,
			For:   o.scaled(10 * time.Minute),
			Labels: map[string]string{
				"severity": SeverityWarning,
			},
			Annotations: o.annotations("spans-dropped",
				"cbc-otel {{ $labels.instance }} is dropping spans",
				"Spans keep being dropped (every 10-minute window for 10 minutes): "+
					"traces of workflow runs are incomplete."),
		},
		{
			Alert: AlertTapDropping,
			Expr:  `sum by (` + opLabels + `, source) (rate(` + o.sel("cbc_otel_tap_dropped_bytes_total") + `[` + o.scaled(5*time.Minute) + `])) > 0`,
			For:   o.scaled(10 * time.Minute),
			Labels: map[string]string{
				"severity": SeverityWarning,
			},
			Annotations: o.annotations("tap-dropping",
				"cbc-otel {{ $labels.instance }} drops tapped {{ $labels.source }} bytes",
				"The telemetry pipeline cannot keep up with the CLI's {{ $labels.source }} and drops tapped bytes "+
					"(for 10 minutes). The CLI is not slowed, but runs seen through the gap may be miscounted."),
		},
		{
			Alert: AlertLinesRejected,
			Expr:  `sum by (` + opLabels + `, reason) (increase(` + o.sel("cbc_otel_lines_rejected_total") + `[` + o.scaled(10*time.Minute) + `])) > 0`,
			For:   o.scaled(20 * time.Minute),
			Labels: map[string]string{
				"severity": SeverityInfo,
			},
			Annotations: o.annotations("lines-rejected",
				"cbc-otel {{ $labels.instance }} keeps rejecting {{ $labels.reason }} lines",
				"Lines of interest were rejected as {{ $labels.reason }} in every 10-minute window for 20 minutes: "+
					"the CLI's stream format changed, or something else writes to its stdout."),
		},
	}}
}

func (o RuleOptions) workflowAlerts() RuleGroup {
	p95 := num(o.InterruptP95.Seconds())
	ir := o.scaled(15 * time.Minute)
	return RuleGroup{Name: ruleGroupWorkflows, Rules: []Rule{
		{
			Alert: AlertProtocolViolations,
			Expr:  `sum by (` + opLabels + `, kind) (increase(` + o.sel("cbc_protocol_violations_total") + `[` + o.scaled(10*time.Minute) + `])) > 0`,
			// A violation in every 10-minute window for 20 minutes: they
			// keep coming. One stray late event does not fire.
			For: o.scaled(20 * time.Minute),
			Labels: map[string]string{
				"severity": SeverityWarning,
			},
			Annotations: o.annotations("protocol-violations",
				"Protocol violations of kind {{ $labels.kind }} keep rising on {{ $labels.instance }}",
				"The CLI's task_* events break the protocol's guarantees ({{ $labels.kind }}) in every 10-minute window "+
					"for 20 minutes: a CLI upgrade changed the protocol, or the stream is corrupted. Run counts may be off."),
		},
		{
			Alert: AlertAbandonedRuns,
			Expr:  `sum by (` + opLabels + `, workflow) (increase(` + o.sel(workflowRunsMetric, `status="abandoned"`) + `[` + o.scaled(30*time.Minute) + `])) > 0`,
			Labels: map[string]string{
				"severity": SeverityWarning,
			},
			Annotations: o.annotations("abandoned-runs",
				"Workflow {{ $labels.workflow }} runs were abandoned on {{ $labels.instance }}",
				"Runs of workflow {{ $labels.workflow }} ended without a terminal notification in the "+
					"last 30 minutes: the CLI died, was killed, or its stream was cut. They count against the SLO."),
		},
		{
			Alert: AlertInterruptLatency,
			// Native histogram when Prometheus ingests it, else the classic
			// buckets: the same alert works with either scrape setting.
			Expr: "(\n  histogram_quantile(0.95, sum by (" + opLabels + ") (rate(" + o.sel("cbc_interrupt_stop_seconds") + "[" + ir + "])))\n" +
				"  or\n" +
				"  histogram_quantile(0.95, sum by (" + opLabels + ", le) (rate(" + o.sel("cbc_interrupt_stop_seconds_bucket") + "[" + ir + "])))\n" +
				") > " + p95 + "\n",
			For: o.scaled(15 * time.Minute),
			Labels: map[string]string{
				"severity": SeverityWarning,
			},
			Annotations: o.annotations("interrupt-latency",
				"Interrupts take too long to stop workflows on {{ $labels.instance }}",
				"The 95th percentile of interrupt → stopped latency is {{ $value | humanizeDuration }} (threshold "+p95+"s) "+
					"over 15 minutes: users wait for cancels, and agents keep spending tokens after they asked to stop."),
		},
		{
			Alert: AlertWorkflowStalled,
			// sum, not max: "> 0" fires alike, and the value is then the
			// number of stalled runs for the description. One alert per
			// workflow (and group-by labels), not per pod: a stall is a
			// workflow's problem, and a pod restart must not re-fire it.
			// The gauge already waited --tracker.stall-after without an event;
			// 5 more minutes let a slow tool call or model turn finish.
			Expr:   `sum` + o.byWith("workflow") + ` (` + o.sel(workflowStalledMetric) + `) > 0`,
			For:    o.scaled(5 * time.Minute),
			Labels: map[string]string{"severity": SeverityWarning},
			Annotations: o.annotations("workflow-stalled",
				"{{ $value }} run(s) of workflow {{ $labels.workflow }} stalled",
				"{{ $value }} open run(s) of workflow {{ $labels.workflow }} have seen no event for the exporter's "+
					"--tracker.stall-after (default 10m), for 5 more minutes: the CLI hangs (a tool call, the model API, a "+
					"permission prompt nobody answers) or its stream stopped without exiting. The run is not terminal "+
					"yet, so the SLO does not see it."),
		},
		{
			Alert: AlertAgentStalled,
			// As CbcWorkflowStalled: per workflow, its value the number of
			// stalled agents. It sees what the run's stall cannot: one
			// agent stuck while the others keep the run's stream moving.
			Expr:   `sum` + o.byWith("workflow") + ` (` + o.sel(agentsStalledMetric) + `) > 0`,
			For:    o.scaled(5 * time.Minute),
			Labels: map[string]string{"severity": SeverityWarning},
			Annotations: o.annotations("workflow-agent-stalled",
				"{{ $value }} agent(s) of workflow {{ $labels.workflow }} stalled",
				"{{ $value }} live agent(s) of open runs of workflow {{ $labels.workflow }} have shown no progress "+
					"(lastProgressAt, else their row in the snapshots) for the exporter's --tracker.stall-after (default 10m), "+
					"for 5 more minutes, while their run goes on: a tool call that hangs, a model call that never "+
					"returns, an agent waiting on something that will not come. It spends its run's time, and its "+
					"run cannot end before it does."),
		},
	}}
}

// byWith is " by (<group-by labels>, extra...)".
func (o RuleOptions) byWith(extra ...string) string {
	return " by (" + strings.Join(append(slices.Clone(o.GroupBy), extra...), ", ") + ")"
}

// costRecordings records what one successful run of a workflow costs.
//
// The numerator is the cost of EVERY run of the workflow in the window
// (cbc_workflow_cost_usd_total has no status label: failed, stopped and
// abandoned runs spent their tokens too), the denominator only the
// completed runs. The ratio is the cost of success: a workflow that fails
// half its runs costs twice as much per success as its runs cost on
// average. A window without a completed run has no sample (the
// denominator's `> 0` drops it) rather than +Inf. The cost counter exists
// only when the CLI's telemetry is joined (`cbc-otel run
// --cli-telemetry.join`, chart value workload.wrapper.joinCliTelemetry).
//
// The name keeps its nominal window and "workflow:" level with GroupBy
// too (the labels are then workflow and the GroupBy labels), as the SLO
// rules keep theirs, so dashboards read it unchanged.
func (o RuleOptions) costRecordings() RuleGroup {
	by := o.byWith("workflow")
	w := o.scaled(time.Hour)
	return RuleGroup{Name: ruleGroupCost, Rules: []Rule{{
		Record: RecordCostPerSuccessfulRun,
		Expr: fmt.Sprintf("sum%s (increase(%s[%s]))\n/\n(sum%s (increase(%s[%s])) > 0)\n",
			by, o.sel(workflowCostMetric), w, by, o.sel(workflowRunsMetric, `status="completed"`), w),
	}}}
}

func (o RuleOptions) annotations(anchor, summary, description string) map[string]string {
	return map[string]string{
		"summary":     summary,
		"description": description,
		"runbook_url": o.RunbookURL + "#" + anchor,
	}
}

// pct formats a ratio as a percentage without float noise (0.99 → 99).
func pct(f float64) string { return strconv.FormatFloat(math.Round(f*1e8)/1e6, 'f', -1, 64) }
