package ingest

import (
	"cmp"
	"slices"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// RunStatus is the state of a run (workflow or plain task).
type RunStatus uint8

// Run statuses. Running is the only non-terminal one.
const (
	StatusRunning RunStatus = iota
	StatusCompleted
	StatusFailed
	StatusStopped   // user cancel: interrupt, stop_task, killed, cancelled, aborted
	StatusAbandoned // the stream ended before the run's task_notification
)

var statusNames = [...]string{"running", "completed", "failed", "stopped", "abandoned"}

func (s RunStatus) String() string { return statusNames[s] }

// TerminalStatuses lists the terminal statuses, in label order.
func TerminalStatuses() []RunStatus {
	return []RunStatus{StatusCompleted, StatusFailed, StatusStopped, StatusAbandoned}
}

// MapStatus maps a task_notification (or task_updated) status spelling to a
// RunStatus. ok is false for a spelling the protocol does not define.
func MapStatus(s string) (st RunStatus, ok bool) {
	switch s {
	case "completed":
		return StatusCompleted, true
	case "failed":
		return StatusFailed, true
	case "stopped", "killed", "cancelled", "canceled", "aborted":
		return StatusStopped, true
	case "pending", "running", "paused", "remote_launched":
		// remote_launched: Claude Code handed a remote_agent task to a
		// remote environment; it still ends with its task_notification.
		return StatusRunning, true
	}
	return StatusFailed, false
}

// AgentState is the state of a sub-agent of a workflow run.
type AgentState uint8

// Agent states. Queued and Running are live; the rest are final. Abandoned
// (started, never ended) and NotStarted (queued, never started) are decided
// by the Tracker when the run is finalized.
const (
	AgentQueued AgentState = iota
	AgentRunning
	AgentDone
	AgentError
	AgentCached
	AgentAbandoned
	AgentNotStarted
)

var agentStateNames = [...]string{"queued", "running", "done", "error", "cached", "abandoned", "not_started"}

func (s AgentState) String() string { return agentStateNames[s] }

// Final reports whether s is a final state.
func (s AgentState) Final() bool { return s >= AgentDone }

// FinalAgentStates lists the final agent states, in label order.
func FinalAgentStates() []AgentState {
	return []AgentState{AgentDone, AgentError, AgentCached, AgentAbandoned, AgentNotStarted}
}

// parseAgentState maps an entry's spelling to a state: start and running
// (CodeBuddy's spelling) are live, queued while there is no startedAt; done
// with cached:true is cached.
func parseAgentState(e *streamjson.Entry) (AgentState, bool) {
	switch e.State {
	case "start", "running", "started", "progress", "in_progress", "":
		// progress: Claude Code 2.1.328 shows an agent inside a tool call so.
		if e.StartedAt > 0 {
			return AgentRunning, true
		}
		return AgentQueued, true
	case "done", "completed":
		if e.Cached {
			return AgentCached, true
		}
		return AgentDone, true
	case "error", "failed":
		return AgentError, true
	case "cached":
		return AgentCached, true
	}
	return AgentQueued, false
}

// Phase is a workflow phase. Start and End are derived from its agents.
type Phase struct {
	Index int    `json:",omitzero"`
	Title string `json:",omitzero"`
	// Child marks a script's workflow() run inside this run (a phase row
	// of kind "child"): its agents are this run's agents.
	Child bool  `json:",omitzero"`
	Start int64 `json:",omitzero"` // epoch ms, 0 if unknown
	End   int64 `json:",omitzero"`
}

// Agent is a sub-agent of a workflow run, identified within the run by Index
// (agentId may be missing while it is queued).
type Agent struct {
	Index      int        `json:",omitzero"`
	AgentID    string     `json:",omitzero"`
	Label      string     `json:",omitzero"`
	PhaseIndex int        `json:",omitzero"`
	PhaseTitle string     `json:",omitzero"`
	State      AgentState `json:",omitzero"`
	Cached     bool       `json:",omitzero"`
	QueuedAt   int64      `json:",omitzero"`
	// Start and End are the agent's times on the run's one clock, epoch ms.
	// While the run is open they are what the stream said (startedAt;
	// endedAt, else startedAt+durationMs), 0 when unknown. Once the run is
	// finalized both are set for every agent and lie within the run's
	// Start and End: an agent that never got an end (stopped, abandoned)
	// ends at the run's end with EndInferred set; one that never ran
	// (not_started, cached without times) is a zero-length interval.
	Start       int64  `json:",omitzero"`
	End         int64  `json:",omitzero"`
	EndInferred bool   `json:",omitzero"`
	DurationMs  int64  `json:",omitzero"`
	Tokens      int64  `json:",omitzero"`
	ToolCalls   int64  `json:",omitzero"`
	Error       string `json:",omitzero"`
	// Cost is what the agent's model calls cost, from the CLI's own
	// telemetry (run --cli-telemetry.join); zero without it.
	Cost cost.Sum `json:",omitzero"`
	// Opt-in content (DecodeOptions.KeepPreviews).
	ResultPreview string `json:",omitzero"`
	PromptPreview string `json:",omitzero"`

	// Stalled is set while the started, live agent of an unfinished run
	// has shown no progress for TrackerOptions.StallAfter; Stalls counts
	// its silences (see agentstall.go).
	Stalled bool `json:",omitzero"`
	Stalls  int  `json:",omitzero"`

	startSent bool // AgentStarted emitted
	endSent   bool // AgentEnded emitted
	// lastMove is the Tracker's clock at the agent's last progress;
	// lastProgressAt and spelling are what its row last said, to tell
	// progress from a repeat (with the fields above).
	lastMove       int64
	lastProgressAt int64
	spelling       uint16
}

// Run is one run of a task: a workflow (Workflow true) with its phases and
// agents, or a plain background task.
type Run struct {
	TaskID       string `json:",omitzero"`
	RunID        string `json:",omitzero"`
	SessionID    string `json:",omitzero"`
	ToolUseID    string `json:",omitzero"`
	ParentTaskID string `json:",omitzero"` // only when that task was seen in the stream
	// SpawnDepth is task_started's spawn_depth: 1 top level, N+1 when
	// launched from inside a depth-N run; 0 when the stream did not say
	// (a workflow's task_started never does).
	SpawnDepth int `json:",omitzero"`
	// Parent is the run (or, by parent_agent_id, the workflow agent) that
	// launched this run while it ran: the span's parent. ParentLink is the
	// parent task's run otherwise (it had ended, even finalized): a link.
	// Resumes is the same task's run this one resumes (a later run_id).
	// Parent has TaskID empty when not known; ParentLink and Resumes are
	// nil: held out of line, as few runs have either and a Run of 100,000
	// given up by a hostile stream must stay small (docs/reliability.md's
	// state attack measured +0.3-0.4 MiB of peak RSS with both inline).
	Parent              AgentRef  `json:",omitzero"`
	ParentLink, Resumes *AgentRef `json:",omitzero"`

	TaskType    string `json:",omitzero"`
	Workflow    bool   `json:",omitzero"`
	Name        string `json:",omitzero"` // workflow_name (sanitized)
	Description string `json:",omitzero"`

	Status      RunStatus `json:",omitzero"`
	PatchStatus string    `json:",omitzero"` // last task_updated status spelling
	Reason      string    `json:",omitzero"` // task_notification reason (e.g. worker_restart), or StopReasonBudget
	Error       string    `json:",omitzero"` // task_updated patch.error
	Summary     string    `json:",omitzero"` // opt-in

	FirstSeen int64 `json:",omitzero"` // the Tracker's clock at the run's first event, epoch ms
	// StartedAt is the time its task_started was written (written_at), 0
	// when the line did not say.
	StartedAt int64 `json:",omitzero"`
	// LastSeen is the latest time the run itself showed: its events'
	// written_at, end_time and its agents' times (never arrival). An
	// abandoned run ends there, else at the Tracker's clock.
	LastSeen int64 `json:",omitzero"`
	// Start and End are set when the terminal status is known and final
	// when the run is finalized (see fixTimes): Start is StartedAt (else
	// the earlier of end − usage.duration_ms and the agents' times, else
	// FirstSeen); End is task_updated's end_time, else the
	// notification's time (an abandoned run's: LastSeen); the pair is
	// widened to enclose every agent. Every output reads these.
	Start int64            `json:",omitzero"`
	End   int64            `json:",omitzero"`
	Usage streamjson.Usage `json:",omitzero"` // final usage (notification's, else the last progress)
	// Cost sums its agents' Cost (the CLI's own telemetry).
	Cost cost.Sum `json:",omitzero"`
	// Stalled is set while the unfinished run has shown no event for
	// TrackerOptions.StallAfter; Stalls counts its silences.
	Stalled   bool  `json:",omitzero"`
	Stalls    int   `json:",omitzero"`
	lastEvent int64 // the Tracker's clock at its last event
	// AgentsStalled counts its agents stalled now (Agent.Stalled).
	AgentsStalled int `json:",omitzero"`
	// agentDue is a lower bound of when one of its live agents can stall
	// (0: none can): the stall check looks at its agents only then.
	agentDue int64

	// Adopted is set while a run known only from its task_progress (no
	// task_started yet: a follower that joined mid-stream, or a reordered
	// stream) lacks its identity. A late task_started completes it.
	Adopted bool `json:",omitzero"`

	Phases []Phase `json:",omitzero"` // by index
	Agents []Agent `json:",omitzero"` // by index

	// InterruptAt is when an interrupt or stop_task aimed at this run was
	// seen on stdin (arrival, epoch ms); InterruptLatencyMs is the time
	// from it to the stopped notification, -1 when not applicable.
	InterruptAt        int64 `json:",omitzero"`
	InterruptLatencyMs int64 `json:",omitzero"`
	// budgetInterrupt: the interrupt was the wrapper's budget cap's
	// (its request_id starts with BudgetRequestIDPrefix).
	budgetInterrupt bool

	Finished  bool  `json:",omitzero"` // task_notification seen (or abandoned at stream end)
	Finalized bool  `json:",omitzero"` // grace window closed: nothing changes any more
	graceEnd  int64 // when the grace window closes
	// announceBy is set while an adopted run's RunStarted is held back
	// (see Tracker.adopt): it is emitted when the task_started comes, when
	// the run finishes, or at this time, whichever is first.
	announceBy int64
}

// pending reports whether r's RunStarted is held back: no lifecycle event
// of r reaches the sinks before it.
func (r *Run) pending() bool { return r.announceBy != 0 }

// DurationMs is End − Start when both are known.
func (r *Run) DurationMs() int64 {
	if r.Start > 0 && r.End >= r.Start {
		return r.End - r.Start
	}
	return 0
}

// agent returns the agent of index, or nil. Agents are kept sorted by
// index.
func (r *Run) agent(index int) *Agent {
	// Snapshots list agents in index order, so the common case is a hit at
	// the same position or an append.
	if index-1 >= 0 && index-1 < len(r.Agents) && r.Agents[index-1].Index == index {
		return &r.Agents[index-1]
	}
	if i, ok := slices.BinarySearchFunc(r.Agents, index, cmpAgent); ok {
		return &r.Agents[i]
	}
	return nil
}

// insertAgent adds a queued agent of index, which must be new, in index
// order: an append for snapshots in order, one move for any other.
func (r *Run) insertAgent(index int) *Agent {
	i, _ := slices.BinarySearchFunc(r.Agents, index, cmpAgent)
	r.Agents = slices.Insert(r.Agents, i, Agent{Index: index, State: AgentQueued})
	return &r.Agents[i]
}

func cmpAgent(a Agent, index int) int { return cmp.Compare(a.Index, index) }

func (r *Run) phase(index int) *Phase {
	if i, ok := slices.BinarySearchFunc(r.Phases, index, func(p Phase, idx int) int { return cmp.Compare(p.Index, idx) }); ok {
		return &r.Phases[i]
	}
	return nil
}

// BudgetRequestIDPrefix starts the request_id of the interrupt that `run
// --budget.max-cost-usd` writes to the child's stdin: a run it stops ends
// stopped with Reason StopReasonBudget (unless the notification gives a
// reason of its own).
const BudgetRequestIDPrefix = "cbc-otel-budget-"

// StopReasonBudget is the Reason of a run stopped by the budget cap.
const StopReasonBudget = "budget"
