package dashboards

import (
	"fmt"
	"net/url"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Dashboard UIDs: stable, so links and provisioning survive regeneration.
const (
	OverviewUID = "cbc-workflows-overview"
	HealthUID   = "cbc-otel-exporter-health"
)

// Options parameterizes the dashboards.
type Options struct {
	// Tracing is the plugin id of the tracing datasource the exemplar
	// trace links open: "tempo" (default) or "jaeger".
	Tracing string
	// Rules are the rule options the SLO panels must agree with (the
	// target drawn as the threshold).
	Rules RuleOptions
}

func (o Options) withDefaults() (Options, error) {
	switch o.Tracing {
	case "":
		o.Tracing = "tempo"
	case "tempo", "jaeger":
	default:
		return o, fmt.Errorf("dashboards: tracing datasource %q is neither tempo nor jaeger", o.Tracing)
	}
	r, err := o.Rules.withDefaults()
	if err != nil {
		return o, err
	}
	o.Rules = r
	return o, nil
}

// panelKind is the Grafana visualization of a panel.
type panelKind int

const (
	kindTimeseries panelKind = iota
	kindStat
	kindHeatmap
	kindTable
	kindBars // a timeseries drawn as stacked bars (counts per interval)
)

// query is one PromQL target of a panel.
type query struct {
	Expr    string
	Legend  string
	Instant bool
	Heatmap bool // format heatmap: classic buckets, one series per le
}

// PanelSpec describes one panel: what the dashboard draws and what the
// README says about it. Keeping both in one place is what keeps the README
// honest.
type PanelSpec struct {
	Title       string
	Description string
	Unit        string
	// WhenRed says what to do when the panel looks bad (README).
	WhenRed string
	Queries []query

	kind          panelKind
	width         uint32
	height        uint32
	exemplars     bool // duration panels: exemplars on, trace data link
	min           *float64
	steps         []dashboard.Threshold
	mappings      []dashboard.ValueMapping
	thresholdLine bool
}

// RowSpec is a titled group of panels.
type RowSpec struct {
	Title  string
	Panels []PanelSpec
}

// DashboardSpec is a dashboard before it is built.
type DashboardSpec struct {
	UID, Title, Description string
	Tags                    []string
	Rows                    []RowSpec
	workflowVar             bool
}

// Label selectors of the template variables. namespace and pod use =~
// with ".*" as the All value, which also matches series that lack the
// label: the same dashboards work outside Kubernetes.
const (
	target   = `job=~"$job", namespace=~"$namespace", pod=~"$pod"`
	workflow = target + `, workflow=~"$workflow"`
)

func f64(v float64) *float64 { return &v }

// step is a threshold step; nil value is the base step.
func step(color string, v *float64) dashboard.Threshold {
	return dashboard.Threshold{Color: color, Value: v}
}

// quantiles returns p50/p95/p99 targets for a histogram, grouped by by.
// Each target reads the native histogram when Prometheus ingests it and
// falls back to the classic buckets otherwise, so the panels work with or
// without native-histogram scraping.
func quantiles(metric, sel, by, legendPrefix string) []query {
	return quantilesOver([]string{"0.5", "0.95", "0.99"}, "$__rate_interval", metric, sel, by, legendPrefix)
}

// quantilesOver is quantiles at the given levels over a rate window.
func quantilesOver(levels []string, window, metric, sel, by, legendPrefix string) []query {
	var qs []query
	for _, q := range levels {
		byNative, byClassic := "", "le"
		if by != "" {
			byNative, byClassic = by, by+", le"
		}
		native := fmt.Sprintf("histogram_quantile(%s, sum by (%s) (rate(%s{%s}[%s])))", q, byNative, metric, sel, window)
		classic := fmt.Sprintf("histogram_quantile(%s, sum by (%s) (rate(%s_bucket{%s}[%s])))", q, byClassic, metric, sel, window)
		if by == "" {
			native = fmt.Sprintf("histogram_quantile(%s, sum(rate(%s{%s}[%s])))", q, metric, sel, window)
		}
		name := map[string]string{"0.5": "p50", "0.95": "p95", "0.99": "p99"}[q]
		legend := name
		if legendPrefix != "" {
			legend = legendPrefix + " " + name
		}
		qs = append(qs, query{Expr: native + "\nor\n" + classic, Legend: legend})
	}
	return qs
}

// Overview returns the spec of "cbc workflows — overview".
func Overview(opts Options) (DashboardSpec, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return DashboardSpec{}, err
	}
	errs, total := o.Rules.statuses()
	budget := 1 - o.Rules.Target
	slo := "{" + sloSelectorLabels + "}"
	ratio := func(window string) string {
		return fmt.Sprintf("sum(increase(cbc_workflow_runs_total{%s, %s}[%s]))\n/\nsum(increase(cbc_workflow_runs_total{%s, %s}[%s]))",
			workflow, statusMatcher(errs), window, workflow, statusMatcher(total), window)
	}
	return DashboardSpec{
		UID:   OverviewUID,
		Title: "cbc workflows — overview",
		Description: "Dynamic Workflow runs of the CodeBuddy CLI and Claude Code, reconstructed by cbc-otel: " +
			"outcomes against the workflow-success SLO, durations, usage, cost and turns, sub-agents, interrupts. Generated by dashboards/gen.",
		Tags:        []string{"cbc-otel", "workflows", "slo"},
		workflowVar: true,
		Rows: []RowSpec{
			{Title: "SLO: workflow success", Panels: []PanelSpec{
				{
					Title: "Failed-run ratio vs SLO",
					Description: fmt.Sprintf("(failed + abandoned) / terminal runs over 5m and 1h, against the error budget "+
						"(1 − target = %s). Stopped runs (user cancels) are %s. Follows the workflow filter.", num(budget), o.Rules.Stopped),
					Unit:    "percentunit",
					WhenRed: "Above the dashed line the SLO is burning budget faster than it accrues. Break it down with the workflow variable and *Runs/min by status*; open a failed run's trace from *Workflow duration* exemplars; check *Protocol violations* and *Abandoned runs*.",
					Queries: []query{
						{Expr: ratio("5m"), Legend: "error ratio (5m)"},
						{Expr: ratio("1h"), Legend: "error ratio (1h)"},
						{Expr: RecordErrorBudget + slo, Legend: "error budget (1 − target)"},
					},
					kind: kindTimeseries, width: 12, height: 8, min: f64(0),
					steps: []dashboard.Threshold{step("green", nil), step("red", f64(budget))}, thresholdLine: true,
				},
				{
					Title:       "Error budget remaining (30d)",
					Description: "1 − (30-day error ratio / error budget), from the SLO recording rules (all workflows). Below 0 the SLO is violated for the period.",
					Unit:        "percentunit",
					WhenRed:     "The 30-day budget is spent: freeze risky changes to workflows and the CLI version, work the top failing workflows first (*Runs/min by status*).",
					Queries:     []query{{Expr: RecordBudgetRemaining + slo, Legend: "remaining", Instant: true}},
					kind:        kindStat, width: 4, height: 8,
					steps: []dashboard.Threshold{step("red", nil), step("orange", f64(0)), step("green", f64(0.25))},
				},
				{
					Title:       "Burn rate (1h)",
					Description: "1h error ratio / error budget (all workflows). 1 spends the budget exactly over 30 days; 14.4 together with the 5m window pages.",
					Unit:        "x",
					WhenRed:     "Above 6 with the short window agreeing, the page alert is (about to be) firing: see the SLO alerts' runbooks below.",
					Queries: []query{{Expr: RecordSLIError + "1h" + slo + "\n/ on(" + sloJoinLabels + ") group_left\n" + RecordErrorBudget + slo,
						Legend: "burn rate", Instant: true}},
					kind: kindStat, width: 4, height: 8,
					steps: []dashboard.Threshold{step("green", nil), step("orange", f64(1)), step("red", f64(6))},
				},
				{
					Title:       "SLO alerts firing",
					Description: "Burn-rate alerts of the workflow-success SLO currently firing.",
					Unit:        "none",
					WhenRed:     "Follow the runbook of the firing alert (README: SLO burn rate page / ticket).",
					Queries: []query{{Expr: `count(ALERTS{alertname=~"` + AlertSLOPage + `|` + AlertSLOTicket + `", alertstate="firing"}) or vector(0)`,
						Legend: "firing", Instant: true}},
					kind: kindStat, width: 4, height: 8,
					steps: []dashboard.Threshold{step("green", nil), step("red", f64(1))},
				},
			}},
			{Title: "Runs", Panels: []PanelSpec{
				{
					Title:       "Runs/min by status",
					Description: "Terminal runs per minute by status (completed, failed, stopped, abandoned), and runs started.",
					Unit:        "suffix: runs/min",
					WhenRed:     "A rising failed or abandoned band: filter by workflow to find which one; a started rate far above the terminal rates means runs pile up (see *Active runs*).",
					Queries: []query{
						{Expr: "sum by (status) (rate(cbc_workflow_runs_total{" + workflow + "}[$__rate_interval])) * 60", Legend: "{{status}}"},
						{Expr: "sum(rate(cbc_workflow_runs_started_total{" + workflow + "}[$__rate_interval])) * 60", Legend: "started"},
					},
					kind: kindTimeseries, width: 12, height: 8, min: f64(0),
				},
				{
					Title:       "Active runs",
					Description: "Runs started and not yet terminal, by workflow.",
					Unit:        "short",
					WhenRed:     "A line that only grows: runs never finish. Check the CLI processes; when the stream ends they are counted as abandoned.",
					Queries:     []query{{Expr: "sum by (workflow) (cbc_workflow_runs_active{" + workflow + "})", Legend: "{{workflow}}"}},
					kind:        kindTimeseries, width: 6, height: 8, min: f64(0),
				},
				{
					Title:       "Abandoned runs",
					Description: "Runs whose stream ended without a terminal notification (the CLI died or was killed), per interval.",
					Unit:        "short",
					WhenRed:     "See the runbook of CbcWorkflowRunsAbandoned: look for OOM kills, pod evictions and wrapper exits.",
					Queries:     []query{{Expr: `sum by (workflow) (increase(cbc_workflow_runs_total{` + workflow + `, status="abandoned"}[$__rate_interval]))`, Legend: "{{workflow}}"}},
					kind:        kindBars, width: 6, height: 8, min: f64(0),
				},
				{
					Title:       "Stalled runs and agents",
					Description: "Unfinished runs with no event for --stall-after (10 m by default), and live agents of unfinished runs without progress for as long, by workflow, and the silences that began per interval.",
					Unit:        "short",
					WhenRed:     "See the runbooks of CbcWorkflowStalled and CbcWorkflowAgentStalled: a run that says nothing, or an agent that does not move while its run goes on, is waiting on something (a hung tool, a model call, a lost CLI).",
					Queries: []query{
						{Expr: "sum by (workflow) (cbc_workflow_runs_stalled{" + workflow + "})", Legend: "{{workflow}} stalled"},
						{Expr: "sum by (workflow) (increase(cbc_workflow_stalls_total{" + workflow + "}[$__rate_interval]))", Legend: "{{workflow}} new stalls"},
						{Expr: "sum by (workflow) (cbc_workflow_agents_stalled{" + workflow + "})", Legend: "{{workflow}} agents stalled"},
						{Expr: "sum by (workflow) (increase(cbc_workflow_agent_stalls_total{" + workflow + "}[$__rate_interval]))", Legend: "{{workflow}} new agent stalls"},
					},
					kind: kindTimeseries, width: 24, height: 6, min: f64(0),
				},
			}},
			{Title: "Duration", Panels: []PanelSpec{
				{
					Title:       "Workflow duration p50/p95/p99",
					Description: "Run end − start by workflow, from the duration histogram (native when ingested, else classic buckets). Exemplars link to the run's trace.",
					Unit:        "s",
					WhenRed:     "A percentile jump: click an exemplar dot to open a slow run's trace and see which phase or agent took the time.",
					Queries:     quantiles("cbc_workflow_duration_seconds", workflow, "workflow", "{{workflow}}"),
					kind:        kindTimeseries, width: 12, height: 9, exemplars: true, min: f64(0),
				},
				{
					Title:       "Workflow duration distribution",
					Description: "Heatmap of run durations (classic buckets 1 s … 2 h). Exemplars link to the run's trace.",
					Unit:        "s",
					WhenRed:     "A second band of slow runs: open one through its exemplar; compare workflows with the workflow variable.",
					Queries:     []query{{Expr: "sum by (le) (increase(cbc_workflow_duration_seconds_bucket{" + workflow + "}[$__rate_interval]))", Legend: "{{le}}", Heatmap: true}},
					kind:        kindHeatmap, width: 12, height: 9, exemplars: true,
				},
			}},
			{Title: "Usage", Panels: []PanelSpec{
				{
					Title:       "Tokens/min by workflow",
					Description: "Final usage.total_tokens of terminal runs, per minute.",
					Unit:        "suffix: tokens/min",
					WhenRed:     "A workflow's tokens climb while its run rate does not: its agents loop or retry. Compare with *Sub-agent outcomes*.",
					Queries:     []query{{Expr: "sum by (workflow) (rate(cbc_workflow_tokens_total{" + workflow + "}[$__rate_interval])) * 60", Legend: "{{workflow}}"}},
					kind:        kindTimeseries, width: 12, height: 8, min: f64(0),
				},
				{
					Title:       "Tool uses/min by workflow",
					Description: "Final usage.tool_uses of terminal runs, per minute.",
					Unit:        "suffix: tool uses/min",
					WhenRed:     "As for tokens: tool uses growing faster than runs point at retry loops.",
					Queries:     []query{{Expr: "sum by (workflow) (rate(cbc_workflow_tool_uses_total{" + workflow + "}[$__rate_interval])) * 60", Legend: "{{workflow}}"}},
					kind:        kindTimeseries, width: 12, height: 8, min: f64(0),
				},
			}},
			{Title: "Cost and turns", Panels: costPanels()},
			{Title: "Budgets", Panels: budgetPanels(o.Rules)},
			{Title: "Sub-agents", Panels: []PanelSpec{
				{
					Title:       "Sub-agent outcomes",
					Description: "Sub-agents by final state per interval: done, error, cached, abandoned (still running when the run's grace window closed), not_started (queued, never started).",
					Unit:        "short",
					WhenRed:     "error: open a failed run's trace (agent spans carry the error); abandoned/not_started: runs were stopped or failed with agents in flight.",
					Queries:     []query{{Expr: "sum by (state) (increase(cbc_workflow_agents_total{" + workflow + "}[$__rate_interval]))", Legend: "{{state}}"}},
					kind:        kindBars, width: 12, height: 8, min: f64(0),
				},
				{
					Title:       "Agent duration p50/p95/p99",
					Description: "Sub-agent end − start by final state (native or classic histogram).",
					Unit:        "s",
					WhenRed:     "Slow agents make slow workflows: open a slow run's trace from *Workflow duration* and look at its agent spans.",
					Queries:     quantiles("cbc_workflow_agent_duration_seconds", workflow, "state", "{{state}}"),
					kind:        kindTimeseries, width: 12, height: 8, exemplars: true, min: f64(0),
				},
			}},
			{Title: "Interrupts, tasks and protocol", Panels: []PanelSpec{
				{
					Title:       "Interrupt → stop latency",
					Description: "Time from an interrupt (or stop_task) on stdin to the stopped notification of the run, p50/p95/p99.",
					Unit:        "s",
					WhenRed:     "See the runbook of CbcInterruptLatencyHigh.",
					Queries:     quantiles("cbc_interrupt_stop_seconds", target, "", ""),
					kind:        kindTimeseries, width: 8, height: 8, exemplars: true, min: f64(0),
				},
				{
					Title:       "Interrupts/min",
					Description: "Interrupt and stop_task requests seen on the CLI's stdin.",
					Unit:        "suffix: /min",
					WhenRed:     "Many cancels can mean users give up on slow or stuck workflows: compare with *Workflow duration*.",
					Queries:     []query{{Expr: "sum(rate(cbc_interrupts_total{" + target + "}[$__rate_interval])) * 60", Legend: "interrupts"}},
					kind:        kindTimeseries, width: 4, height: 8, min: f64(0),
				},
				{
					Title:       "Protocol violations",
					Description: "Protocol guarantees broken by the stream, by kind (duplicate_notification, unknown_task, missing_terminal_agent_state, ...).",
					Unit:        "short",
					WhenRed:     "See the runbook of CbcProtocolViolationsRising.",
					Queries:     []query{{Expr: "sum by (kind) (increase(cbc_protocol_violations_total{" + target + "}[$__rate_interval])) > 0", Legend: "{{kind}}"}},
					kind:        kindBars, width: 6, height: 8, min: f64(0),
				},
				{
					Title:       "Background tasks/min",
					Description: "Non-workflow background tasks (Bash, Agent, local_bash, ...) by type and terminal status.",
					Unit:        "suffix: tasks/min",
					WhenRed:     "failed tasks: these are not workflows and not in the SLO, but a spike often precedes failing workflows.",
					Queries:     []query{{Expr: "sum by (task_type, status) (rate(cbc_tasks_total{" + target + "}[$__rate_interval])) * 60", Legend: "{{task_type}} {{status}}"}},
					kind:        kindTimeseries, width: 6, height: 8, min: f64(0),
				},
			}},
		},
	}, nil
}

// Health returns the spec of "cbc-otel — exporter health".
func Health(opts Options) (DashboardSpec, error) {
	if _, err := opts.withDefaults(); err != nil {
		return DashboardSpec{}, err
	}
	upMappings := []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{
		Type: dashboard.MappingTypeValueToText,
		Options: map[string]dashboard.ValueMappingResult{
			"0": {Text: cog.ToPtr("DOWN"), Color: cog.ToPtr("red")},
			"1": {Text: cog.ToPtr("UP"), Color: cog.ToPtr("green")},
		},
	}}}
	return DashboardSpec{
		UID:         HealthUID,
		Title:       "cbc-otel — exporter health",
		Description: "Is cbc-otel itself healthy: scraped, ingesting, not dropping or rejecting, exporting traces. Generated by dashboards/gen.",
		Tags:        []string{"cbc-otel", "exporter"},
		Rows: []RowSpec{
			{Title: "Targets", Panels: []PanelSpec{
				{
					Title:       "Scrape up",
					Description: "Prometheus' up series of each cbc-otel target.",
					Unit:        "none",
					WhenRed:     "See the runbook of CbcOtelExporterDown.",
					Queries:     []query{{Expr: "up{" + target + "}", Legend: "{{instance}}", Instant: true}},
					kind:        kindStat, width: 8, height: 6, mappings: upMappings,
					steps: []dashboard.Threshold{step("red", nil), step("green", f64(1))},
				},
				{
					Title:       "Build info",
					Description: "Version and Go version of each running cbc-otel.",
					Unit:        "none",
					WhenRed:     "Mixed versions after a rollout that should be done: some pods did not restart.",
					Queries:     []query{{Expr: "max by (instance, version, goversion) (cbc_otel_build_info{" + target + "})", Legend: "{{version}}", Instant: true}},
					kind:        kindTable, width: 10, height: 6,
				},
				{
					Title:       "Label cap overflow",
					Description: "Runs (workflow), tasks (task_type) and model usages (model) whose label was folded into \"other\" because the cardinality cap was reached; runs whose workflow name --metrics.workflow-allow does not match (workflow not allowed); and finished runs forgotten by the bounded store that links a later nested run or resume to them (launchers forgotten).",
					Unit:        "short",
					WhenRed:     "More distinct workflow names than --metrics.max-workflows (models than --metrics.max-models): raise the cap if the names are legitimate, or fix whatever generates unique names, or list the real workflows in --metrics.workflow-allow. \"workflow not allowed\" is expected with an allow-list (the model's one-off names); check the list only if a real workflow shows as \"other\". \"launchers forgotten\": more than 1024 tasks ended between a launcher and a run naming it, which then has no parent_task link.",
					Queries: []query{
						{Expr: "sum(increase(cbc_otel_workflow_labels_overflow_total{" + target + "}[$__range]))", Legend: "workflow", Instant: true},
						{Expr: "sum(increase(cbc_otel_workflow_labels_disallowed_total{" + target + "}[$__range]))", Legend: "workflow not allowed", Instant: true},
						{Expr: "sum(increase(cbc_otel_task_type_labels_overflow_total{" + target + "}[$__range]))", Legend: "task_type", Instant: true},
						{Expr: "sum(increase(cbc_otel_model_labels_overflow_total{" + target + "}[$__range]))", Legend: "model", Instant: true},
						{Expr: "sum(increase(cbc_otel_launchers_evicted_total{" + target + "}[$__range]))", Legend: "launchers forgotten", Instant: true},
					},
					kind: kindStat, width: 6, height: 6,
					steps: []dashboard.Threshold{step("green", nil), step("orange", f64(1))},
				},
			}},
			{Title: "Ingest", Panels: []PanelSpec{
				{
					Title:       "Lines ingested/s",
					Description: "Lines framed from each tapped stream (stdout: the CLI's events; stdin: SDK requests).",
					Unit:        "suffix: lines/s",
					WhenRed:     "Zero while CLIs run: the wrapper is not in the path, or the sidecar follows the wrong files.",
					Queries:     []query{{Expr: "sum by (source) (rate(cbc_otel_lines_total{" + target + "}[$__rate_interval]))", Legend: "{{source}}"}},
					kind:        kindTimeseries, width: 8, height: 8, min: f64(0),
				},
				{
					Title:       "Bytes ingested/s",
					Description: "Bytes framed from each tapped stream.",
					Unit:        "Bps",
					WhenRed:     "Compare with *Tap dropped bytes*: a high byte rate is what makes the tap drop.",
					Queries:     []query{{Expr: "sum by (source) (rate(cbc_otel_bytes_total{" + target + "}[$__rate_interval]))", Legend: "{{source}}"}},
					kind:        kindTimeseries, width: 8, height: 8, min: f64(0),
				},
				{
					Title:       "Rejected lines by reason",
					Description: "Lines of interest that could not be decoded: invalid_json, too_long, bad_shape.",
					Unit:        "suffix: lines/s",
					WhenRed:     "See the runbook of CbcOtelLinesRejected.",
					Queries:     []query{{Expr: "sum by (reason) (rate(cbc_otel_lines_rejected_total{" + target + "}[$__rate_interval]))", Legend: "{{reason}}"}},
					kind:        kindTimeseries, width: 8, height: 8, min: f64(0),
				},
				{
					Title:       "Tap dropped bytes",
					Description: "Bytes the tap dropped because the telemetry pipeline lagged (the CLI is never slowed).",
					Unit:        "Bps",
					WhenRed:     "See the runbook of CbcOtelTapDropping.",
					Queries:     []query{{Expr: "sum by (instance, source) (rate(cbc_otel_tap_dropped_bytes_total{" + target + "}[$__rate_interval]))", Legend: "{{instance}} {{source}}"}},
					kind:        kindTimeseries, width: 12, height: 8, min: f64(0),
				},
			}},
			{Title: "Trace export", Panels: []PanelSpec{
				{
					Title:       "Dropped spans",
					Description: "Spans the traces exporter dropped (queue full or export failed for good).",
					Unit:        "suffix: spans/s",
					WhenRed:     "See the runbook of CbcOtelSpansDropped.",
					Queries:     []query{{Expr: "sum by (instance) (rate(cbc_otel_spans_dropped_total{" + target + "}[$__rate_interval]))", Legend: "{{instance}}"}},
					kind:        kindTimeseries, width: 6, height: 8, min: f64(0),
				},
				{
					Title:       "Export errors",
					Description: "Failed trace exports.",
					Unit:        "suffix: errors/s",
					WhenRed:     "See the runbook of CbcOtelTraceExportErrors.",
					Queries:     []query{{Expr: "sum by (instance) (rate(cbc_otel_export_errors_total{" + target + "}[$__rate_interval]))", Legend: "{{instance}}"}},
					kind:        kindTimeseries, width: 6, height: 8, min: f64(0),
				},
			}},
			{Title: "Process", Panels: []PanelSpec{
				{
					Title:       "Resident memory",
					Description: "RSS of each cbc-otel process. It stays bounded whatever the line length (DESIGN.md invariant 1).",
					Unit:        "bytes",
					WhenRed:     "Memory that only grows is a bug: note the version from *Build info* and the RSS curve and file an issue.",
					Queries:     []query{{Expr: "process_resident_memory_bytes{" + target + "}", Legend: "{{instance}}"}},
					kind:        kindTimeseries, width: 12, height: 8, min: f64(0),
				},
				{
					Title:       "CPU",
					Description: "CPU seconds per second of each cbc-otel process.",
					Unit:        "percentunit",
					WhenRed:     "A busy pipeline drops tap bytes: compare with *Tap dropped bytes* and *Bytes ingested/s*.",
					Queries:     []query{{Expr: "rate(process_cpu_seconds_total{" + target + "}[$__rate_interval])", Legend: "{{instance}}"}},
					kind:        kindTimeseries, width: 12, height: 8, min: f64(0),
				},
			}},
		},
	}, nil
}

// costPanels are the overview's row of cost, tokens and turns. Two
// sources meet here: the CLI's result lines (every session: cost and
// tokens by model, turns; sub-agents included, no workflow label) and the
// CLI's own telemetry, joined to the stream by `cbc-otel run
// --join-cli-telemetry` (cost and tokens per workflow, and the main
// conversation's share apart from the workflows').
func costPanels() []PanelSpec {
	const joined = " Needs the CLI's telemetry joined (`cbc-otel run --join-cli-telemetry`, chart value workload.wrapper.joinCliTelemetry); empty without it."
	return []PanelSpec{
		{
			Title:       "Cost in range",
			Description: "USD spent over the dashboard's time range: by every session (the CLI's result lines, sub-agents included; no workflow filter) and by workflows (the CLI's telemetry, only with `cbc-otel run --join-cli-telemetry`).",
			Unit:        "currencyUSD",
			WhenRed:     "More than expected: find the spender in *Cost/h by model* and *Cost/h by workflow*, then *Main conversation vs workflows*.",
			Queries: []query{
				{Expr: "sum(increase(cbc_cost_usd_total{" + target + "}[$__range]))", Legend: "sessions", Instant: true},
				{Expr: "sum(increase(cbc_workflow_cost_usd_total{" + workflow + "}[$__range]))", Legend: "workflows", Instant: true},
			},
			kind: kindStat, width: 4, height: 8,
		},
		{
			Title:       "Cost/h by workflow",
			Description: "USD per hour spent by each workflow's runs (all of them: failed and stopped runs cost too), from the CLI's telemetry." + joined,
			Unit:        "suffix: USD/h",
			WhenRed:     "One workflow's cost climbs while its runs/min does not: its agents loop or retry; compare *Cost per successful run* and *Sub-agent outcomes*.",
			Queries:     []query{{Expr: "sum by (workflow) (rate(" + workflowCostMetric + "{" + workflow + "}[$__rate_interval])) * 3600", Legend: "{{workflow}}"}},
			kind:        kindTimeseries, width: 10, height: 8, min: f64(0),
		},
		{
			Title:       "Cost/h by model",
			Description: "USD per hour of every session by model, from the growth of the CLI's cumulative result lines (total_cost_usd, modelUsage): the main conversation and its sub-agents. No workflow filter.",
			Unit:        "suffix: USD/h",
			WhenRed:     "An expensive model where a cheaper one was meant: check the CLI's model settings; a jump across models: more sessions or longer turns (*Turns/min by subtype*).",
			Queries:     []query{{Expr: "sum by (model) (rate(cbc_cost_usd_total{" + target + "}[$__rate_interval])) * 3600", Legend: "{{model}}"}},
			kind:        kindTimeseries, width: 10, height: 8, min: f64(0),
		},
		{
			Title: "Cost per run p50/p95 by workflow",
			Description: "What one run of each workflow costs, from the run-cost histogram (native when ingested, else the classic buckets $0.001 … $100) over the last hour's finalized runs: " +
				"every run whose cost is known, whatever its status. Exemplars are runs, each linking to its trace." + joined,
			Unit:    "currencyUSD",
			WhenRed: "A p95 far above the p50: a few runs cost many times the usual; click the highest exemplar to open that run's trace and see which agent or model spent it. Both rising: every run got dearer (more agents, longer prompts, another model).",
			Queries: quantilesOver([]string{"0.5", "0.95"}, "1h", "cbc_workflow_run_cost_usd", workflow, "workflow", "{{workflow}}"),
			kind:    kindTimeseries, width: 10, height: 8, exemplars: true, min: f64(0),
		},
		{
			Title: "Cost per run distribution (costliest runs)",
			Description: "Heatmap of what runs cost (classic buckets $0.001 … $100, log scale). Each exemplar is a run at its cost: the highest dots are the costliest runs, " +
				"one click from their trace." + joined,
			Unit:    "currencyUSD",
			WhenRed: "A band of runs well above the rest: open the top exemplar's trace; compare workflows with the workflow variable.",
			Queries: []query{{Expr: "sum by (le) (increase(cbc_workflow_run_cost_usd_bucket{" + workflow + "}[$__rate_interval]))", Legend: "{{le}}", Heatmap: true}},
			kind:    kindHeatmap, width: 10, height: 8, exemplars: true,
		},
		{
			Title: "Runs by cost known",
			Description: "Finalized workflow runs over the dashboard's time range whose cost is known (in the run-cost histogram) and those whose cost is not " +
				"(no model call of the CLI's telemetry joined to them, or only $0 ones): the unknown are not in the percentiles, so they are neither cheap nor free.",
			Unit:    "short",
			WhenRed: "Unknown runs while the telemetry is meant to be joined: check that the wrapper runs with --join-cli-telemetry and the CLI's telemetry reaches it (exporter health, cbc_otel_cli_* counters).",
			Queries: []query{
				{Expr: "sum(increase(cbc_workflow_run_cost_usd_count{" + workflow + "}[$__range]))", Legend: "cost known", Instant: true},
				{Expr: "sum(increase(cbc_workflow_runs_cost_unknown_total{" + workflow + "}[$__range]))", Legend: "cost unknown", Instant: true},
			},
			kind: kindStat, width: 4, height: 8,
		},
		{
			Title:       "Main conversation vs workflows",
			Description: "USD per hour of the CLI's model calls by scope: main (the main conversation), workflow (sub-agents of a workflow run), unmatched (sub-agents no workflow named: plain Agent tasks)." + joined,
			Unit:        "suffix: USD/h",
			WhenRed:     "unmatched growing: sub-agents outside workflows (or runs the stream never named) spend; main growing: the conversation itself, not the workflows, is the cost.",
			Queries:     []query{{Expr: "sum by (scope) (rate(cbc_cli_cost_usd_total{" + target + "}[$__rate_interval])) * 3600", Legend: "{{scope}}"}},
			kind:        kindTimeseries, width: 8, height: 8, min: f64(0),
		},
		{
			Title: "Cost per successful run (1h)",
			Description: "USD a workflow spent over the last hour per run that completed, from the recording rule " + RecordCostPerSuccessfulRun +
				". Failed, stopped and abandoned runs' cost is in the numerator: this is the cost of one success. No point while no run completed." + joined,
			Unit:    "currencyUSD",
			WhenRed: "Rising while *Cost/h by workflow* is flat: fewer runs succeed (see *Runs/min by status*); rising with it: each run got more expensive (more agents, longer prompts, another model).",
			Queries: []query{{Expr: RecordCostPerSuccessfulRun + `{workflow=~"$workflow"}`, Legend: "{{workflow}}"}},
			kind:    kindTimeseries, width: 8, height: 8, min: f64(0),
		},
		{
			Title:       "Tokens/min by type",
			Description: "Model tokens per minute of every session by type (input, output, cache_read, cache_creation), from the CLI's result lines. No workflow filter.",
			Unit:        "suffix: tokens/min",
			WhenRed:     "cache_read falling while input rises: the prompt cache stopped hitting (a changing system prompt or tool list), and cost rises with it.",
			Queries:     []query{{Expr: "sum by (type) (rate(cbc_model_tokens_total{" + target + "}[$__rate_interval])) * 60", Legend: "{{type}}"}},
			kind:        kindTimeseries, width: 8, height: 8, min: f64(0),
		},
		{
			Title:       "Workflow tokens/min by type",
			Description: "Model tokens per minute of each workflow's sub-agents by type, from the CLI's telemetry." + joined,
			Unit:        "suffix: tokens/min",
			WhenRed:     "As *Tokens/min by type*, per workflow: find the workflow whose cache stopped hitting or whose output grew.",
			Queries:     []query{{Expr: "sum by (workflow, type) (rate(cbc_workflow_model_tokens_total{" + workflow + "}[$__rate_interval])) * 60", Legend: "{{workflow}} {{type}}"}},
			kind:        kindTimeseries, width: 8, height: 8, min: f64(0),
		},
		{
			Title:       "Turns/min by subtype",
			Description: "Turns of every session per minute by the result line's subtype (success, error_max_turns, error_during_execution, ..., other).",
			Unit:        "suffix: turns/min",
			WhenRed:     "error_max_turns: turns hit the CLI's --max-turns (raise it or simplify the task); error_during_execution: the CLI or the model API failed (rate limits, credentials).",
			Queries:     []query{{Expr: "sum by (subtype) (rate(cbc_turns_total{" + target + "}[$__rate_interval])) * 60", Legend: "{{subtype}}"}},
			kind:        kindTimeseries, width: 8, height: 8, min: f64(0),
		},
		{
			Title:       "Turn duration p50/p95/p99",
			Description: "Duration of a session's turns as the result lines report it (native or classic histogram). Exemplars, where the exporter attaches them, link to the trace.",
			Unit:        "s",
			WhenRed:     "Long turns with flat token rates: the model API is slow or retrying; with rising tokens: the turns do more work.",
			Queries:     quantiles("cbc_turn_duration_seconds", target, "", ""),
			kind:        kindTimeseries, width: 8, height: 8, exemplars: true, min: f64(0),
		},
	}
}

// Specs returns both dashboard specs.
func Specs(opts Options) ([]DashboardSpec, error) {
	ov, err := Overview(opts)
	if err != nil {
		return nil, err
	}
	h, err := Health(opts)
	if err != nil {
		return nil, err
	}
	return []DashboardSpec{ov, h}, nil
}

// dsProm and dsTracing reference the datasource template variables.
var (
	dsProm    = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}
	dsTracing = "${tracing}"
)

// Build turns a spec into a Grafana dashboard (schemaVersion of the SDK,
// importable into Grafana 11 and 12).
//
// The dashboard is Grafana's classic JSON model, which the SDK marks
// deprecated in favour of dashboardv2: see doc.go for why it stays.
//
//lint:ignore SA1019 the classic model on purpose (doc.go)
func Build(spec DashboardSpec, opts Options) (d dashboard.Dashboard, err error) {
	o, err := opts.withDefaults()
	if err != nil {
		return d, err
	}
	//lint:ignore SA1019 the classic model on purpose (doc.go)
	b := dashboard.NewDashboardBuilder(spec.Title).
		Uid(spec.UID).
		Description(spec.Description).
		Tags(spec.Tags).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Refresh("30s").
		Time("now-6h", "now").
		Timezone(common.TimeZoneBrowser).
		Link(dashboard.NewDashboardLinkBuilder("cbc-otel dashboards").
			Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{"cbc-otel"}).
			AsDropdown(true).
			IncludeVars(true).
			KeepTime(true))
	for _, v := range variables(spec, o) {
		b = b.WithVariable(v)
	}
	id := uint32(1)
	for _, row := range spec.Rows {
		b = b.WithRow(dashboard.NewRowBuilder(row.Title).Id(id))
		id++
		for _, p := range row.Panels {
			pb, err := buildPanel(p, id, o)
			if err != nil {
				return d, fmt.Errorf("panel %q: %w", p.Title, err)
			}
			b = b.WithPanel(pb)
			id++
		}
	}
	return b.Build()
}

func variables(spec DashboardSpec, o Options) []cog.Builder[dashboard.VariableModel] {
	labelVar := func(name, label, q string) *dashboard.QueryVariableBuilder {
		return dashboard.NewQueryVariableBuilder(name).
			Label(label).
			Datasource(dsProm).
			Query(dashboard.StringOrMap{String: cog.ToPtr(q)}).
			Definition(q).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc).
			Multi(true).
			IncludeAll(true).
			AllValue(".*").
			Current(dashboard.VariableOption{
				Selected: cog.ToPtr(true),
				Text:     dashboard.StringOrArrayOfString{ArrayOfString: []string{"All"}},
				Value:    dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}},
			})
	}
	vs := []cog.Builder[dashboard.VariableModel]{
		dashboard.NewDatasourceVariableBuilder("datasource").
			Label("Prometheus").
			Type("prometheus").
			Current(dashboard.VariableOption{
				Text:  dashboard.StringOrArrayOfString{String: cog.ToPtr("default")},
				Value: dashboard.StringOrArrayOfString{String: cog.ToPtr("default")},
			}),
		dashboard.NewDatasourceVariableBuilder("tracing").
			Label("Traces (" + o.Tracing + ")").
			Description("Where exemplar trace links open: a " + o.Tracing + " datasource receiving cbc-otel's OTLP traces.").
			Type(o.Tracing),
		labelVar("job", "job", `label_values(cbc_otel_build_info, job)`),
		labelVar("namespace", "namespace", `label_values(cbc_otel_build_info{job=~"$job"}, namespace)`),
		labelVar("pod", "pod", `label_values(cbc_otel_build_info{job=~"$job", namespace=~"$namespace"}, pod)`),
	}
	if spec.workflowVar {
		vs = append(vs, labelVar("workflow", "workflow",
			`label_values(cbc_workflow_runs_total{`+target+`}, workflow)`))
	}
	return vs
}

// traceLink is the data link of duration panels: an exemplar's trace_id
// opened in Explore on the $tracing datasource. Grafana also shows a
// trace button on exemplars when the Prometheus datasource has an
// exemplar destination for trace_id (README, "Exemplars and traces");
// this link works without that datasource setting.
func traceLink(o Options) cog.Builder[dashboard.DashboardLink] {
	q := `{"refId":"A","datasource":{"type":"` + o.Tracing + `","uid":"` + dsTracing + `"},"query":"${__data.fields.trace_id}"`
	if o.Tracing == "tempo" {
		q += `,"queryType":"traceql"`
	}
	q += "}"
	panes := `{"trace":{"datasource":"` + dsTracing + `","queries":[` + q + `],"range":{"from":"${__from}","to":"${__to}"}}}`
	return dashboard.NewDashboardLinkBuilder("Open trace ${__data.fields.trace_id}").
		Type(dashboard.DashboardLinkTypeLink).
		Url("/explore?schemaVersion=1&orgId=${__org}&panes=" + url.QueryEscape(panes)).
		TargetBlank(true)
}

func promTarget(q query, refID string, exemplar bool) *prometheus.DataqueryBuilder {
	t := prometheus.NewDataqueryBuilder().
		RefId(refID).
		Datasource(dsProm).
		Expr(q.Expr).
		LegendFormat(q.Legend).
		EditorMode(prometheus.QueryEditorModeCode)
	switch {
	case q.Instant:
		t = t.Instant().Format(prometheus.PromQueryFormatTimeSeries)
	case q.Heatmap:
		t = t.Range().Format(prometheus.PromQueryFormatHeatmap)
	default:
		t = t.Range().Format(prometheus.PromQueryFormatTimeSeries)
	}
	if exemplar {
		t = t.Exemplar(true)
	}
	return t
}

func thresholds(p PanelSpec) *dashboard.ThresholdsConfigBuilder {
	steps := p.steps
	if len(steps) == 0 {
		steps = []dashboard.Threshold{step("green", nil)}
	}
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(steps)
}

func buildPanel(p PanelSpec, id uint32, o Options) (cog.Builder[dashboard.Panel], error) {
	if p.Unit == "" || len(p.Queries) == 0 {
		return nil, fmt.Errorf("panel needs a unit and a query")
	}
	refs := "ABCDEFGHIJ"
	var links []cog.Builder[dashboard.DashboardLink]
	if p.exemplars {
		links = append(links, traceLink(o))
	}
	switch p.kind {
	case kindTimeseries, kindBars:
		b := timeseries.NewPanelBuilder().Id(id).Title(p.Title).Description(p.Description).
			Datasource(dsProm).Unit(p.Unit).Span(p.width).Height(p.height).
			Thresholds(thresholds(p)).
			Legend(common.NewVizLegendOptionsBuilder().
				DisplayMode(common.LegendDisplayModeTable).
				Placement(common.LegendPlacementBottom).
				ShowLegend(true).
				Calcs([]string{"mean", "max", "lastNotNull"})).
			Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
		if p.min != nil {
			b = b.Min(*p.min)
		}
		if p.kind == kindBars {
			b = b.DrawStyle(common.GraphDrawStyleBars).FillOpacity(80).
				Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))
		} else {
			b = b.DrawStyle(common.GraphDrawStyleLine).FillOpacity(10).ShowPoints(common.VisibilityModeNever)
		}
		if p.thresholdLine {
			b = b.ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed))
		}
		if len(links) > 0 {
			b = b.DataLinks(links)
		}
		for i, q := range p.Queries {
			b = b.WithTarget(promTarget(q, refs[i:i+1], p.exemplars))
		}
		return b, nil
	case kindHeatmap:
		b := heatmap.NewPanelBuilder().Id(id).Title(p.Title).Description(p.Description).
			Datasource(dsProm).Unit(p.Unit).Span(p.width).Height(p.height).
			Calculate(false).
			YAxis(heatmap.NewYAxisConfigBuilder().Unit(p.Unit)).
			RowsFrame(heatmap.NewRowsHeatmapOptionsBuilder().Layout(common.HeatmapCellLayoutLe)).
			Color(heatmap.NewHeatmapColorOptionsBuilder().
				Mode(heatmap.HeatmapColorModeScheme).
				Scheme("Oranges").
				Scale(heatmap.HeatmapColorScaleExponential).
				Exponent(0.5).
				Steps(64).
				Fill("dark-orange")).
			ShowValue(common.VisibilityModeNever).
			Tooltip(heatmap.NewHeatmapTooltipBuilder().Mode(common.TooltipDisplayModeSingle).YHistogram(true)).
			ExemplarsColor("rgba(255,0,255,0.7)").
			ShowLegend()
		if len(links) > 0 {
			b = b.DataLinks(links)
		}
		for i, q := range p.Queries {
			b = b.WithTarget(promTarget(q, refs[i:i+1], p.exemplars))
		}
		return b, nil
	case kindStat:
		b := stat.NewPanelBuilder().Id(id).Title(p.Title).Description(p.Description).
			Datasource(dsProm).Unit(p.Unit).Span(p.width).Height(p.height).
			Thresholds(thresholds(p)).
			ColorMode(common.BigValueColorModeBackground).
			GraphMode(common.BigValueGraphModeNone).
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false))
		if len(p.mappings) > 0 {
			b = b.Mappings(p.mappings)
		}
		for i, q := range p.Queries {
			b = b.WithTarget(promTarget(q, refs[i:i+1], false))
		}
		return b, nil
	case kindTable:
		b := table.NewPanelBuilder().Id(id).Title(p.Title).Description(p.Description).
			Datasource(dsProm).Unit(p.Unit).Span(p.width).Height(p.height).
			Thresholds(thresholds(p)).
			// The SDK's default footer has "reducer": null, which its own
			// strict decoder (and Grafana's schema) reject.
			Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{}).CountRows(false)).
			WithTransformation(dashboard.DataTransformerConfig{Id: "labelsToFields", Options: map[string]any{"mode": "columns"}})
		for i, q := range p.Queries {
			t := promTarget(q, refs[i:i+1], false).Format(prometheus.PromQueryFormatTable)
			b = b.WithTarget(t)
		}
		return b, nil
	}
	return nil, fmt.Errorf("unknown panel kind %d", p.kind)
}
