package simulate

import (
	"encoding/json"
	"fmt"
)

// Kinds of ExpectedRun.
const (
	KindWorkflow = "workflow" // a local_workflow task
	KindTask     = "task"     // any other background task (Bash, Agent, local_bash, ...)
)

// ExpectedRun is the ground truth for one task run the simulator made: what
// a correct consumer must reconstruct from the stream alone. `--expect FILE`
// writes one per line, in task_started order, in exactly the shape
// `cbc-otel replay --summary.json` prints, so tests can compare the two line by line
// (keyed by task_id). Every value is derivable from the emitted stream by the
// rules documented on each field; the simulator computes them from the very
// rows it printed, not from its private schedule.
//
// A workflow marshals as
//
//	{"kind","task_id","run_id","session_id","workflow","status","start","end",
//	 "duration_ms","tokens","tool_uses","phases":[...],"agents":[...]}
//
// and any other task as {"kind","task_id","run_id","task_type","status"}
// (run_id with Claude Code only). All listed keys are always present (zero
// values included) so the shape is fixed; spawn_depth, launched_by and
// resumes follow when set, on both.
type ExpectedRun struct {
	// Kind is KindWorkflow or KindTask.
	Kind string `json:"kind"`
	// TaskID is the task_id of the task_* events.
	TaskID string `json:"task_id"`
	// TaskType is task_started.task_type; only for KindTask.
	TaskType string `json:"task_type,omitempty"`
	// RunID is the run_id of the task_* events (Claude Code); "" for cbc.
	RunID string `json:"run_id"`
	// SessionID is the session_id of the system/init that preceded the task.
	SessionID string `json:"session_id"`
	// Workflow is task_started.workflow_name verbatim (cbc may say
	// "path:<basename>").
	Workflow string `json:"workflow"`
	// Status is the task_notification status: completed, failed or stopped;
	// "abandoned" when the stream ended without a notification.
	Status string `json:"status"`
	// Start is the run's start in epoch ms: the smaller of end_time minus
	// the final usage's duration_ms and the earliest agent
	// queuedAt/startedAt, else 0.
	Start int64 `json:"start"`
	// End is the terminal task_updated patch.end_time in epoch ms, widened
	// to the latest agent time; 0 if there is no end_time.
	End int64 `json:"end"`
	// DurationMS is End-Start when both are known, else 0.
	DurationMS int64 `json:"duration_ms"`
	// CLIDurationMS is the final usage's duration_ms (the CLI's own clock,
	// from when the script starts), 0 if none.
	CLIDurationMS int64 `json:"cli_duration_ms,omitempty"`
	// Tokens is the final usage.total_tokens: the notification's usage if it
	// has one, else the last task_progress usage.
	Tokens int64 `json:"tokens"`
	// ToolUses is the final usage.tool_uses, chosen like Tokens.
	ToolUses int64 `json:"tool_uses"`
	// Phases lists the workflow_phase entries of the last snapshot, by index.
	Phases []ExpectedPhase `json:"phases"`
	// Agents lists every workflow_agent index ever seen, by index, in the
	// state of its last row (late cbc flips after the notification included).
	Agents []ExpectedAgent `json:"agents"`
	// SpawnDepth is a sub-agent's spawn_depth (Claude Code writes none on
	// a workflow); LaunchedBy the task that launched a nested run while it
	// ran (report.LaunchedBy's shape, agent index -1: no workflow agent
	// launches anything); Resumes the run id of the task's run a resumed
	// sub-agent continues.
	SpawnDepth int             `json:"spawn_depth,omitempty"`
	LaunchedBy *ExpectedLaunch `json:"launched_by,omitempty"`
	Resumes    string          `json:"resumes,omitempty"`
	// ExpectedCost sums the agents' (present only with the simulator's own
	// log events on: Config.Getenv).
	ExpectedCost
}

// ExpectedLaunch is what launched a nested run: agent Index of run
// (TaskID, RunID) of workflow Workflow, its agentId and label as its rows
// said; or, with Index -1, that run itself (a sub-agent task).
type ExpectedLaunch struct {
	TaskID   string `json:"task_id"`
	RunID    string `json:"run_id,omitempty"`
	Workflow string `json:"workflow,omitempty"`
	Index    int    `json:"agent_index"`
	AgentID  string `json:"agent_id,omitempty"`
	Label    string `json:"label,omitempty"`
}

// ExpectedCost is what the api_request events of the simulator's own
// telemetry add up to, in the shape of the report's cost fields (report
// package doc): present only when some api_request was exported, so the
// ground truth without telemetry stays what it was.
type ExpectedCost struct {
	// CostUSD sums cost_usd.
	CostUSD *float64 `json:"cost_usd,omitempty"`
	// TokensByType sums the calls' tokens by type.
	TokensByType *ExpectedTokens `json:"tokens_by_type,omitempty"`
	// ModelCalls counts the api_request events.
	ModelCalls int64 `json:"model_calls,omitempty"`
	// Models is the same per model (the simulator has one).
	Models []ExpectedModel `json:"models,omitempty"`
}

// ExpectedTokens counts tokens by type.
type ExpectedTokens struct {
	Input         int64 `json:"input"`
	Output        int64 `json:"output"`
	CacheRead     int64 `json:"cache_read"`
	CacheCreation int64 `json:"cache_creation"`
}

// ExpectedModel is one model's share of an ExpectedCost.
type ExpectedModel struct {
	Model        string         `json:"model"`
	CostUSD      float64        `json:"cost_usd"`
	TokensByType ExpectedTokens `json:"tokens_by_type"`
}

// expectedCost renders an accounting; the zero value (no call) stays empty.
func expectedCost(c callCost) ExpectedCost {
	if c.calls == 0 {
		return ExpectedCost{}
	}
	usd := c.usd
	tok := ExpectedTokens{Input: c.tok[0], Output: c.tok[1], CacheRead: c.tok[2], CacheCreation: c.tok[3]}
	return ExpectedCost{CostUSD: &usd, TokensByType: &tok, ModelCalls: c.calls,
		Models: []ExpectedModel{{Model: claudeModel, CostUSD: usd, TokensByType: tok}}}
}

// ExpectedPhase is one workflow phase of an ExpectedRun.
type ExpectedPhase struct {
	// Index is workflow_phase.index (1-based in both CLIs).
	Index int `json:"index"`
	// Title is workflow_phase.title.
	Title string `json:"title"`
	// Start is the minimum non-zero Start of the phase's agents, else 0.
	Start int64 `json:"start"`
	// End is the maximum non-zero End of the phase's agents, else 0.
	End int64 `json:"end"`
	// Kind is "child" for the row of a workflow() call (kind "child").
	Kind string `json:"kind,omitempty"`
}

// ExpectedAgent is one sub-agent of an ExpectedRun.
type ExpectedAgent struct {
	// Index is workflow_agent.index, the agent's identity within a run.
	Index int `json:"index"`
	// AgentID is the last non-empty agentId seen ("" if never assigned, as
	// for Claude Code agents that stayed queued).
	AgentID string `json:"agentId"`
	// Label is workflow_agent.label.
	Label string `json:"label"`
	// PhaseIndex is workflow_agent.phaseIndex (0 if absent).
	PhaseIndex int `json:"phaseIndex"`
	// State is the final state: done, error, cached (state "cached", or
	// "done" with cached:true), not_started (only ever seen queued: "start"
	// without startedAt) or abandoned (started but never terminal by the
	// end of the stream). "running" is read as "start".
	State string `json:"state"`
	// Cached is true for cached agents, whichever spelling.
	Cached bool `json:"cached"`
	// Start is startedAt in epoch ms, 0 if absent.
	Start int64 `json:"start"`
	// End is endedAt if present, else startedAt+durationMs if both are
	// present, else 0.
	End int64 `json:"end"`
	// EndInferred is set when End is the run's end because the stream
	// gave the agent none.
	EndInferred bool `json:"end_inferred,omitempty"`
	// Tokens is the last row's tokens, 0 if absent.
	Tokens int64 `json:"tokens"`
	// Error is the last row's error, "" if none.
	Error string `json:"error"`
	// ExpectedCost is what the agent's api_request events said (only with
	// the simulator's own log events on).
	ExpectedCost
}

// MarshalJSON prints the kind-specific shape: tasks that are not workflows
// carry only kind, task_id, task_type and status.
func (r ExpectedRun) MarshalJSON() ([]byte, error) {
	if r.Kind == KindTask {
		o := obj{{"kind", r.Kind}, {"task_id", r.TaskID}}
		if r.RunID != "" {
			o = append(o, kv{"run_id", r.RunID})
		}
		return marshalOrdered(r.nesting(append(o, kv{"task_type", r.TaskType}, kv{"status", r.Status})))
	}
	phases, agents := r.Phases, r.Agents
	if phases == nil {
		phases = []ExpectedPhase{}
	}
	if agents == nil {
		agents = []ExpectedAgent{}
	}
	o := obj{
		{"kind", r.Kind}, {"task_id", r.TaskID}, {"run_id", r.RunID}, {"session_id", r.SessionID},
		{"workflow", r.Workflow}, {"status", r.Status}, {"start", r.Start}, {"end", r.End},
		{"duration_ms", r.DurationMS}}
	if r.CLIDurationMS != 0 {
		o = append(o, kv{"cli_duration_ms", r.CLIDurationMS})
	}
	o = append(o, obj{{"tokens", r.Tokens}, {"tool_uses", r.ToolUses}, {"phases", phases}, {"agents", agents}}...)
	o = r.nesting(o)
	if c := r.ExpectedCost; c.CostUSD != nil {
		o = append(o, obj{{"cost_usd", *c.CostUSD}, {"tokens_by_type", c.TokensByType}, {"model_calls", c.ModelCalls}, {"models", c.Models}}...)
	}
	return marshalOrdered(o)
}

// nesting appends spawn_depth, launched_by and resumes, when set.
func (r ExpectedRun) nesting(o obj) obj {
	if r.SpawnDepth != 0 {
		o = append(o, kv{"spawn_depth", r.SpawnDepth})
	}
	if r.LaunchedBy != nil {
		o = append(o, kv{"launched_by", r.LaunchedBy})
	}
	if r.Resumes != "" {
		o = append(o, kv{"resumes", r.Resumes})
	}
	return o
}

func marshalOrdered(o obj) ([]byte, error) {
	b, err := o.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("expected run: %w", err)
	}
	return b, nil
}

// compile-time check that ExpectedRun round-trips through encoding/json.
var _ json.Marshaler = ExpectedRun{}

// get returns the value of key in o.
func (o obj) get(key string) (any, bool) {
	for _, f := range o {
		if f.k == key {
			return f.v, true
		}
	}
	return nil, false
}

// int64Of reads an integer member, 0 if absent.
func (o obj) int64Of(key string) (int64, bool) {
	v, ok := o.get(key)
	if !ok {
		return 0, false
	}
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	}
	return 0, false
}

func (o obj) stringOf(key string) string {
	v, _ := o.get(key)
	str, _ := v.(string)
	return str
}

// expectedRun derives the ground truth of a task from the rows and events
// the simulator printed, by the rules documented on ExpectedRun.
func (s *session) expectedRun(t *task) ExpectedRun {
	status := t.status
	if status == "" {
		status = "abandoned"
	}
	var launched *ExpectedLaunch
	if t.parent != nil {
		launched = &ExpectedLaunch{TaskID: t.parent.id, RunID: t.parent.runID, Index: -1}
	}
	if t.plan == nil {
		r := ExpectedRun{Kind: KindTask, TaskID: t.id, RunID: t.runID, TaskType: t.typ, Status: status, LaunchedBy: launched}
		if t.typ == "local_agent" {
			r.SpawnDepth = t.depth
		}
		if t.resumes != nil {
			r.Resumes = t.resumes.runID
		}
		return r
	}
	r := ExpectedRun{Kind: KindWorkflow, TaskID: t.id, RunID: t.runID, SessionID: s.sessionID,
		Workflow: t.name, Status: status, Phases: []ExpectedPhase{}, Agents: []ExpectedAgent{}, LaunchedBy: launched}
	final := t.notifUse
	if final == nil {
		final = t.lastUsage
	}
	if final != nil {
		r.Tokens, r.ToolUses, r.CLIDurationMS = final.tokens, final.tools, final.durMS
	}
	if t.status != "" {
		r.End = t.endTime
	}
	earliest := int64(0)
	var spent callCost
	for _, a := range t.agents {
		if !a.visible {
			continue
		}
		row := s.row(t, a)
		ea := ExpectedAgent{Index: a.index, AgentID: row.stringOf("agentId"), Label: row.stringOf("label"),
			Error: row.stringOf("error"), ExpectedCost: expectedCost(a.spent)}
		if a.spent.calls > 0 {
			spent.usd += a.spent.usd
			for i, v := range a.spent.tok {
				spent.tok[i] += v
			}
			spent.calls += a.spent.calls
		}
		pi, _ := row.int64Of("phaseIndex")
		ea.PhaseIndex = int(pi)
		ea.Tokens, _ = row.int64Of("tokens")
		started, hasStart := row.int64Of("startedAt")
		ea.Start = started
		if end, ok := row.int64Of("endedAt"); ok {
			ea.End = end
		} else if d, ok := row.int64Of("durationMs"); ok && hasStart {
			ea.End = started + d
		}
		c, _ := row.get("cached")
		state := row.stringOf("state")
		switch {
		case state == "cached" || c == true:
			ea.State, ea.Cached = "cached", true
		case state == "done" || state == "error":
			ea.State = state
		case !hasStart:
			ea.State = "not_started"
		default:
			ea.State = "abandoned"
		}
		for _, k := range []string{"queuedAt", "startedAt"} {
			if v, ok := row.int64Of(k); ok && v != 0 && (earliest == 0 || v < earliest) {
				earliest = v
			}
		}
		r.Agents = append(r.Agents, ea)
	}
	// The smaller of two lower bounds of the truth: the CLI's duration
	// counts from when the script starts, after the task did.
	r.Start = earliest
	if final != nil && r.End != 0 && (r.Start == 0 || r.End-final.durMS < r.Start) {
		r.Start = r.End - final.durMS
	}
	if r.End != 0 {
		// One clock: a run encloses its agents (late flips after a stop
		// end after the run's end_time).
		for _, a := range r.Agents {
			r.End = max(r.End, a.Start, a.End)
		}
	}
	if r.Start != 0 && r.End != 0 {
		r.DurationMS = r.End - r.Start
	}
	r.ExpectedCost = expectedCost(spent)
	settleAgents(&r, t, s)
	for i, title := range t.plan.phases {
		ph := ExpectedPhase{Index: i + 1, Title: title}
		if i+1 == t.plan.childPhase {
			if !t.childShown() {
				continue // never listed
			}
			ph.Kind = "child"
		}
		for _, a := range r.Agents {
			if a.PhaseIndex != i+1 {
				continue
			}
			if a.Start != 0 && (ph.Start == 0 || a.Start < ph.Start) {
				ph.Start = a.Start
			}
			if a.End > ph.End {
				ph.End = a.End
			}
		}
		if ph.Start == 0 && r.End != 0 {
			ph.Start, ph.End = r.End, r.End // no agent: zero length at the run's end
		}
		r.Phases = append(r.Phases, ph)
	}
	return r
}

// settleAgents gives every agent of a run that has both times its times on
// the run's clock: one that never ran (not_started, cached without times)
// is a zero-length interval at its queue time, else at the run's start
// (cached) or end (not_started); one that ran without an end ends with the
// run.
func settleAgents(r *ExpectedRun, t *task, s *session) {
	if r.Start == 0 || r.End == 0 {
		return
	}
	for i := range r.Agents {
		a := &r.Agents[i]
		never := a.State == "not_started" || (a.State == "cached" && a.Start == 0)
		if a.Start == 0 {
			queued := int64(0)
			for _, ag := range t.agents {
				if ag.index == a.Index {
					queued, _ = s.row(t, ag).int64Of("queuedAt")
				}
			}
			switch {
			case never && queued > 0:
				a.Start = queued
			case a.State == "not_started":
				a.Start = r.End
			default:
				a.Start = r.Start
			}
		}
		if a.End == 0 {
			if never {
				a.End = a.Start
			} else {
				a.End, a.EndInferred = r.End, true
			}
		}
	}
}
