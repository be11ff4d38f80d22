// Package metrics turns ingest lifecycle events into Prometheus metrics: a
// registry, its label policy, and what a restart needs (per-stream run
// marks, and a Checkpoint of the totals and admitted labels).
//
// A Metrics is an ingest.Sink with its own *prometheus.Registry (never the
// default one: two pipelines in one process, or two tests, must not share
// state). The metric names below are a contract (DESIGN.md "Metrics"):
// dashboards, alert rules and tests use them.
//
//	name                                   type       labels            meaning
//	cbc_workflow_runs_started_total        counter    workflow          workflow runs announced (task_started, or adopted mid-stream)
//	cbc_workflow_runs_total                counter    workflow, status  runs that reached a terminal status, counted once per run (exemplar: trace_id, span_id)
//	cbc_workflow_runs_active               gauge      workflow          runs started and not yet terminal
//	cbc_workflow_runs_stalled              gauge      workflow          unfinished runs with no event for --tracker.stall-after
//	cbc_workflow_stalls_total              counter    workflow          silences of --tracker.stall-after, once each
//	cbc_workflow_agents_stalled            gauge      workflow          started, live agents of unfinished runs without progress for --tracker.stall-after
//	cbc_workflow_agent_stalls_total        counter    workflow          agents' silences of --tracker.stall-after, once each
//	cbc_workflow_duration_seconds          histogram  workflow, status  run end − start, observed at the terminal status (classic + native; exemplars)
//	cbc_workflow_agents_total              counter    workflow, state   sub-agents by final state, counted once per agent
//	cbc_workflow_agent_duration_seconds    histogram  workflow, state   sub-agent end − start, when both are known (classic + native)
//	cbc_workflow_tokens_total              counter    workflow          final usage.total_tokens of terminal runs
//	cbc_workflow_tool_uses_total           counter    workflow          final usage.tool_uses of terminal runs
//	cbc_tasks_total                        counter    task_type, status non-workflow background tasks by terminal status
//	cbc_interrupts_total                   counter    —                 interrupt and stop_task requests seen on stdin
//	cbc_interrupt_stop_seconds             histogram  —                 request → stopped notification latency
//	cbc_protocol_violations_total          counter    kind              protocol violations (closed set, pre-created)
//	cbc_cost_usd_total                     counter    model             USD of the sessions' turns (result lines: deltas of the cumulative modelUsage costUSD)
//	cbc_model_tokens_total                 counter    model, type       tokens of the sessions' turns (type: input, output, cache_read, cache_creation)
//	cbc_turns_total                        counter    subtype           turns ended (result lines) by subtype (closed set + "other", pre-created)
//	cbc_turn_duration_seconds              histogram  —                 result duration_ms, in seconds (classic + native)
//	cbc_workflow_cost_usd_total            counter    workflow          USD of workflow sub-agents' model calls (the CLI's own telemetry)
//	cbc_workflow_model_tokens_total        counter    workflow, model, type  tokens of workflow sub-agents' model calls
//	cbc_workflow_run_cost_usd              histogram  workflow          USD of each finalized run whose cost is known (joined telemetry), once per run (classic + native; exemplar: trace_id, span_id)
//	cbc_workflow_runs_cost_unknown_total   counter    workflow          finalized runs of unknown cost (no joined model call, or only $0 ones): not in the histogram
//	cbc_cli_cost_usd_total                 counter    scope             USD of the model calls the CLI's telemetry reported: main, workflow, unmatched
//	cbc_otel_lines_total                   counter    source            lines framed per tapped stream
//	cbc_otel_bytes_total                   counter    source            bytes framed per tapped stream
//	cbc_otel_lines_rejected_total          counter    reason            lines that could not be decoded (closed set, pre-created)
//	cbc_otel_tap_dropped_bytes_total       counter    source            bytes the tap dropped because the pipeline lagged
//	cbc_otel_spans_dropped_total           counter    —                 spans the traces exporter dropped
//	cbc_otel_export_errors_total           counter    —                 failed trace exports
//	cbc_otel_launchers_evicted_total       counter    —                 finalized runs forgotten by the store that links later nested runs and resumes
//	cbc_otel_workflow_labels_overflow_total   counter  —   runs whose workflow label was folded into "other" by the cap
//	cbc_otel_workflow_labels_disallowed_total counter  —   runs whose workflow label was folded into "other" by the allow-list
//	cbc_otel_task_type_labels_overflow_total  counter  —   tasks whose task_type label was folded into "other" by the cap
//	cbc_otel_model_labels_overflow_total      counter  —   model usages whose model label was folded into "other" by the cap
//	cbc_otel_build_info                    gauge      version, goversion always 1
//
// plus the standard go_* and process_* collectors.
//
// Status values: completed, failed, stopped, abandoned. Agent states: done,
// error, cached, abandoned, not_started.
//
// Buckets. Workflow runs last seconds to hours, so cbc_workflow_duration_seconds
// uses 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200 s
// (a 1-2-5 progression that switches to minute marks, which is what an SLO
// on "done within N minutes" wants). Sub-agents use the GenAI-style
// exponential 0.1·2^k s, k = 0…12 (0.1 … 409.6). Interrupt latency uses
// 0.05 … 60 s; turns 1 s … 1 h on the workflow progression. A run's cost
// uses $0.001 … $100 in 1-2-5 steps (16 bounds; see runCostBuckets). Every
// histogram is also a native histogram (bucket factor
// 1.1, at most 160 buckets, resolution reduced rather than reset when that
// is exceeded, so nothing ever goes down) for scrapers that negotiate it.
//
// Cardinality. The workflow label is the workflow_name ingest cleaned
// (safetext.Clean), cut to 128 bytes (safetext.Cut), "unknown" when empty, and at most
// Options.MaxWorkflows distinct values (default 200); later names become
// "other" and are counted. With Options.WorkflowAllow (CompileWorkflowAllow:
// a regexp or a file of them, matched against the whole label value) only
// the names it matches are label values, before the cap; the others
// become "other" and are counted apart. task_type is capped the same way (32 values),
// and model (Options.MaxModels, default 20).
// Identifiers (task, run, session, agent) are never labels.
// Options.ConstLabels go on every series: `cbc-otel demo` sets
// demo="true" (DemoLabel), which the shipped rules exclude.
//
// Serving, pushing, writing and the totals across restarts are package
// exposition's: it takes the Registry as a Gatherer. Checkpoint takes the
// totals as an interface (Totals), so this package does not import it.
package metrics

import ()
