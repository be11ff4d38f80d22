package ingest

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
	case "pending", "running", "paused":
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
func parseAgentState(e *Entry) (AgentState, bool) {
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
	Index int
	Title string
	Start int64 // epoch ms, 0 if unknown
	End   int64
}

// Agent is a sub-agent of a workflow run, identified within the run by Index
// (agentId may be missing while it is queued).
type Agent struct {
	Index      int
	AgentID    string
	Label      string
	PhaseIndex int
	PhaseTitle string
	State      AgentState
	Cached     bool
	QueuedAt   int64
	Start      int64 // startedAt, epoch ms, 0 if never started
	End        int64 // endedAt, or startedAt+durationMs, or the run's end for abandoned agents
	DurationMs int64
	Tokens     int64
	ToolCalls  int64
	Error      string
	// Opt-in content (DecodeOptions.KeepPreviews).
	ResultPreview string
	PromptPreview string

	startSent bool // AgentStarted emitted
	endSent   bool // AgentEnded emitted
}

// Run is one run of a task: a workflow (Workflow true) with its phases and
// agents, or a plain background task.
type Run struct {
	TaskID       string
	RunID        string
	SessionID    string
	ToolUseID    string
	ParentTaskID string // only when that task was seen in the stream
	TaskType     string
	Workflow     bool
	Name         string // workflow_name (sanitized)
	Description  string

	Status      RunStatus
	PatchStatus string // last task_updated status spelling
	Reason      string // task_notification reason (e.g. worker_restart)
	Error       string // task_updated patch.error
	Summary     string // opt-in

	FirstSeen int64 // arrival time of the first event, epoch ms
	Start     int64 // derived: see finalize
	End       int64 // task_updated end_time, else arrival of the notification
	Usage     Usage // final usage (notification's, else the last progress)

	Phases []Phase // by index
	Agents []Agent // by index

	// InterruptAt is when an interrupt or stop_task aimed at this run was
	// seen on stdin (arrival, epoch ms); InterruptLatencyMs is the time
	// from it to the stopped notification, -1 when not applicable.
	InterruptAt        int64
	InterruptLatencyMs int64

	Finished  bool  // task_notification seen (or abandoned at stream end)
	Finalized bool  // grace window closed: nothing changes any more
	graceEnd  int64 // when the grace window closes
}

// DurationMs is End − Start when both are known.
func (r *Run) DurationMs() int64 {
	if r.Start > 0 && r.End >= r.Start {
		return r.End - r.Start
	}
	return 0
}

func (r *Run) agent(index int) *Agent {
	// Snapshots list agents in index order, so the common case is an append
	// or a hit at the same position.
	if index-1 >= 0 && index-1 < len(r.Agents) && r.Agents[index-1].Index == index {
		return &r.Agents[index-1]
	}
	for i := range r.Agents {
		if r.Agents[i].Index == index {
			return &r.Agents[i]
		}
	}
	return nil
}

func (r *Run) phase(index int) *Phase {
	for i := range r.Phases {
		if r.Phases[i].Index == index {
			return &r.Phases[i]
		}
	}
	return nil
}
