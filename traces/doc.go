// Package traces turns the workflow runs that package ingest reconstructs
// into OpenTelemetry spans, on a TracerProvider it is given (package egress
// exports them: OTLP gRPC or HTTP, an OTLP/JSON file, or nowhere).
//
// # Span tree
//
// One trace per workflow run:
//
//	invoke_workflow {workflow_name}        INTERNAL, root (or child of TRACEPARENT)
//	├── workflow_phase {title}             INTERNAL, one per phase
//	│   └── invoke_agent {label}           INTERNAL, agents of that phase
//	└── invoke_agent {label}               agents without a phase
//
// A plain background task (task_type other than local_workflow: a
// sub-agent, a shell) is one span invoke_task {task_type} in a trace of its
// own, so that a workflow it launched can link to it.
//
// # Identifiers
//
// The trace id is the first 16 bytes of sha256("cbc-otel/trace\x00" +
// task_id + "\x00" + run_id); span ids are the first 8 bytes of
// sha256("cbc-otel/span\x00" + task_id + "\x00" + run_id + "\x00" + kind +
// "\x00" + index) with kind "workflow" (index 0; also a plain task's span),
// "phase" (phase index) or "agent" (agent index). Replays and restarts thus
// re-export the same ids. With a TRACEPARENT the trace id is the parent's.
//
// # Times
//
// Every timestamp comes from the stream: agents' startedAt/endedAt, the
// run's start and end as the Tracker derives them. What the stream lacks is
// filled in as follows: an agent without an end (flipped to error by a stop
// without endedAt) ends with the run; without a start it starts with the
// run; an agent that never ran (not_started, or cached without times) is a
// zero-length span at its queuedAt, else at the run's end (not_started) or
// start (cached). A phase spans the Tracker's phase times widened to its
// agents as exported; a phase no agent reached is zero-length at the run's
// end. Child spans may end after the root when the CLI reports agent ends
// after the run's notification (cbc's late error flips): times are not
// clamped, they are what the stream said.
//
// # Attributes
//
//	attribute                    spans              value
//	gen_ai.operation.name        workflow, agent    "invoke_workflow" / "invoke_agent"
//	gen_ai.workflow.name         workflow           workflow_name (sanitized by ingest)
//	gen_ai.agent.id              agent              agentId (when known; queued agents have none)
//	gen_ai.agent.name            agent              label
//	gen_ai.conversation.id       all                session_id
//	error.type                   any                "failed" (run), "error" (agent), "abandoned"
//	cbc.task.id                  all                task_id
//	cbc.run.id                   all                run_id (Claude Code only)
//	cbc.task.type                workflow, task     task_type
//	cbc.workflow.status          workflow           completed | failed | stopped | abandoned
//	cbc.workflow.abandoned       workflow           bool: the stream ended without the notification
//	cbc.workflow.agents          workflow           number of agents in the run
//	cbc.task.status              task               completed | failed | stopped | abandoned
//	cbc.stop.reason              workflow, task     task_notification reason (e.g. worker_restart); "budget": stopped by run --budget.max-cost-usd
//	cbc.interrupt.latency_ms     workflow           interrupt request → stopped notification
//	cbc.usage.total_tokens       workflow, agent, task  total tokens (run usage / agent tokens)
//	cbc.usage.tool_uses          workflow, agent, task  tool uses (run usage / agent toolCalls)
//	cbc.agent.index              agent              index of the agent within the run
//	cbc.agent.state              agent              done | error | cached | abandoned | not_started
//	cbc.agent.cached             agent              bool
//	cbc.phase.index              phase, agent       phase index
//	cbc.phase.title              phase              phase title
//	cbc.link.type                link               "parent_task"
//
// Opt-in only (Options.CapturePreviews, and only if ingest kept them), cut
// to 512 bytes and stripped of control characters:
//
//	cbc.agent.prompt_preview     agent              promptPreview
//	cbc.agent.result_preview     agent              resultPreview
//	cbc.summary                  workflow, task     task_notification summary
//
// The workflow's prompt (the script source) and the initialize account
// block are never exported: ingest does not even decode them.
//
// Token usage: the GenAI conventions define gen_ai.usage.input_tokens and
// output_tokens but no total (open-telemetry/semantic-conventions#1280 is
// still open), and the stream only carries totals, so the total goes to
// cbc.usage.total_tokens rather than a made-up gen_ai.* name.
//
// # Status
//
// A failed run: Error with task_updated's patch.error (or "workflow
// failed"). A stopped run: Unset, cbc.workflow.status=stopped. An abandoned
// run (stream ended without the notification): Error, error.type=abandoned.
// An agent in error: Error with its error text; an agent still running when
// the grace window closes: Error, cbc.agent.state=abandoned, ended at the
// run's end. not_started agents are kept as zero-length spans (Unset) so the
// trace shows the work that never ran. Status messages are sanitized and cut
// to 256 bytes.
//
// # Export
//
// Agent spans are ended when the agent ends; phase and workflow spans when
// the run is finalized (after the grace window). Where they go, and what
// is lost on the way, is package egress's.
package traces

// Span names (the part before the space) and operation names.
const (
	OpInvokeWorkflow = "invoke_workflow"
	OpInvokeAgent    = "invoke_agent"
	SpanPhase        = "workflow_phase"
	SpanTask         = "invoke_task"
)

// Attribute keys. The gen_ai.* and error.type keys follow the OpenTelemetry
// semantic conventions (GenAI: Development status); cbc.* is ours.
const (
	AttrOperationName     = "gen_ai.operation.name"
	AttrWorkflowName      = "gen_ai.workflow.name"
	AttrAgentID           = "gen_ai.agent.id"
	AttrAgentName         = "gen_ai.agent.name"
	AttrConversationID    = "gen_ai.conversation.id"
	AttrErrorType         = "error.type"
	AttrTaskID            = "cbc.task.id"
	AttrRunID             = "cbc.run.id"
	AttrTaskType          = "cbc.task.type"
	AttrSpawnDepth        = "cbc.spawn_depth" // a nested run's depth (task_started spawn_depth)
	AttrTaskStatus        = "cbc.task.status"
	AttrWorkflowStatus    = "cbc.workflow.status"
	AttrWorkflowAbandoned = "cbc.workflow.abandoned"
	AttrWorkflowAgents    = "cbc.workflow.agents"
	AttrStopReason        = "cbc.stop.reason"
	AttrInterruptLatency  = "cbc.interrupt.latency_ms"
	AttrUsageTotalTokens  = "cbc.usage.total_tokens"
	AttrUsageToolUses     = "cbc.usage.tool_uses"
	AttrAgentIndex        = "cbc.agent.index"
	AttrAgentState        = "cbc.agent.state"
	AttrAgentCached       = "cbc.agent.cached"
	// AttrAgentEndInferred marks an agent the stream gave no end (stopped,
	// abandoned): its span ends with the run.
	AttrAgentEndInferred = "cbc.agent.end_inferred"
	AttrPhaseIndex       = "cbc.phase.index"
	AttrPhaseTitle       = "cbc.phase.title"
	// AttrPhaseKind is "child" on the phase of a script's workflow() run
	// inside its parent (PROTOCOL.md "Nested runs"); absent otherwise.
	AttrPhaseKind     = "cbc.phase.kind"
	AttrLinkType      = "cbc.link.type"
	AttrPromptPreview = "cbc.agent.prompt_preview"
	AttrResultPreview = "cbc.agent.result_preview"
	AttrSummary       = "cbc.summary"

	// GenAI attributes from the CLI's own telemetry (run
	// --join-cli-telemetry), on agent and workflow spans.
	AttrProviderName      = "gen_ai.provider.name"
	AttrUsageInputTokens  = "gen_ai.usage.input_tokens"
	AttrUsageOutputTokens = "gen_ai.usage.output_tokens"
	AttrUsageCacheRead    = "gen_ai.usage.cache_read.input_tokens"
	AttrUsageCacheWrite   = "gen_ai.usage.cache_write.input_tokens"
	AttrUsageCostUSD      = "cbc.usage.cost_usd"
	AttrUsageModelCalls   = "cbc.usage.model_calls"
)

// gen_ai.provider.name values. Claude Code calls Anthropic's API;
// CodeBuddy is not in the conventions' list of providers, so it gets a
// name of its own, as they allow.
const (
	ProviderAnthropic = "anthropic"
	ProviderCodeBuddy = "codebuddy"
)

// error.type values: a closed set, so that they can be grouped by.
const (
	ErrorTypeFailed     = "failed"
	ErrorTypeAgentError = "error"
	ErrorTypeAbandoned  = "abandoned"
)

// LinkParentTask is the cbc.link.type of the link from a run to the root
// span of the task that launched it (parent_task_id).
const LinkParentTask = "parent_task"
