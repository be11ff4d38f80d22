package streamjson

import (
	"github.com/cbc-otel/cbc-otel/tap"
)

// Kind is the kind of a decoded protocol message.
type Kind uint8

// The messages the Tracker consumes. Everything else on the wire is passed
// through and ignored.
const (
	KindNone             Kind = iota
	KindInit                  // system/init
	KindTaskStarted           // system/task_started
	KindTaskProgress          // system/task_progress
	KindTaskUpdated           // system/task_updated
	KindTaskNotification      // system/task_notification
	KindControlRequest        // control_request (stdin: interrupt, stop_task)
	KindControlResponse       // control_response (stdout)
	KindResult                // result: the end of a turn, with the session's cumulative cost
)

var kindNames = [...]string{"none", "init", "task_started", "task_progress", "task_updated", "task_notification", "control_request", "control_response", "result"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Usage is the usage block of task_progress and task_notification.
type Usage struct {
	TotalTokens int64
	ToolUses    int64
	DurationMs  int64
}

// Entry is one element of a workflow_progress snapshot: a phase or an agent.
// Unknown entry types never become an Entry.
type Entry struct {
	Phase bool // a workflow_phase; otherwise a workflow_agent
	Child bool // kind "child": a script's workflow() run inside its parent run
	// EndedWithRun: the row says the run's outcome ended the agent while
	// it was still running (Claude Code: "endedWithRun":"stopped"). Only
	// whether it says so is kept: the value is the run's own status, which
	// the notification gives (a bool beside the others keeps the Entry of
	// a 20,000-row snapshot 24 bytes a row smaller than a string did).
	EndedWithRun bool
	Index        int
	Title        string // phase title

	AgentID    string
	Label      string
	State      string // raw spelling: start, running, done, error, cached, ...
	Cached     bool   // done + cached:true
	PhaseIndex int
	PhaseTitle string
	QueuedAt   int64
	StartedAt  int64
	EndedAt    int64
	// LastProgressAt is Claude Code's last activity time; it only advances
	// the replay clock.
	LastProgressAt int64
	DurationMs     int64
	Tokens         int64
	ToolCalls      int64
	Error          string
	// Previews are untrusted model and user text; the decoder fills them
	// only when asked (DecodeOptions.KeepPreviews).
	ResultPreview string
	PromptPreview string
}

// Event is one decoded message of interest. Which fields are set depends on
// Kind. Strings are already sanitized and bounded; secrets never reach an
// Event because the decoder has no field for them.
type Event struct {
	Kind   Kind
	Source tap.Source

	// WrittenAt is the line's written_at (ISO-8601, Claude Code 2.1.334+)
	// in epoch ms, 0 when absent: the time of an event that carries no
	// time of its own.
	WrittenAt int64

	// BadFields counts the fields of this line (entries' fields included)
	// that were present but unusable: a value of the wrong type, out of
	// range, or unparseable. Each cost only itself: the field reads as
	// absent. BadEntries counts workflow_progress elements skipped whole:
	// not an object, no readable type, or an invalid index. The Tracker
	// counts both as protocol violations (bad_field, bad_entry).
	BadFields  int
	BadEntries int
	// ElementsOverCap counts workflow_progress elements beyond
	// DecodeOptions.MaxElements, skipped unread.
	ElementsOverCap int

	SessionID string
	TaskID    string
	RunID     string
	ToolUseID string

	// task_started
	TaskType     string
	WorkflowName string
	Description  string
	ParentTaskID string
	// ParentAgentID is the agentId of the workflow agent that launched
	// this task (a nested workflow run), when the CLI says; SpawnDepth is
	// its nesting depth (1 top level, up to MaxSpawnDepth; 0 when absent).
	ParentAgentID string
	SpawnDepth    int

	// task_progress; a task_notification may carry the run's final
	// snapshot too (HasProgress, Entries).
	Usage       Usage
	HasUsage    bool
	HasProgress bool // workflow_progress present (else a usage-only tick)
	Entries     []Entry
	// Resent marks a snapshot sent again after a reconnect ("resent":
	// true): the same state as before, not new progress.
	Resent bool

	// task_updated
	PatchStatus  string
	PatchEndTime int64
	PatchError   string

	// task_notification
	Status  string
	Summary string // only with KeepPreviews
	Reason  string

	// control_request / control_response
	RequestID      string
	RequestSubtype string // interrupt, stop_task, initialize, ... / success, error

	// result: TotalCostUSD and Models are cumulative over the session.
	ResultSubtype string // success, error_max_turns, ...
	IsError       bool
	DurationMs    int64
	HasCost       bool // total_cost_usd was usable: else TotalCostUSD is unknown, not 0
	TotalCostUSD  float64
	Models        []ResultModel // sorted by name, at most MaxResultModels
}

// ResultModel is one model of a result line's modelUsage.
type ResultModel struct {
	Model   string
	CostUSD float64
	Tokens  [4]int64 // input, output, cache read, cache creation: cost.TokenType's order
	// Known says which of Tokens (KnownTokens<<k) and CostUSD (KnownCost)
	// the line gave as usable numbers. One absent, null, of the wrong type
	// or out of range is unknown and reads 0, which is not its value.
	Known uint8
}

// Times returns the largest plausible epoch-ms timestamp the event carries,
// or 0. The replay clock advances with it so that replay sees the same
// grace windows as a live run.
func (e *Event) Times() int64 {
	var t int64
	up := func(v int64) {
		if v > t && Plausible(v) {
			t = v
		}
	}
	up(e.WrittenAt)
	up(e.PatchEndTime)
	for i := range e.Entries {
		en := &e.Entries[i]
		up(en.QueuedAt)
		up(en.StartedAt)
		up(en.EndedAt)
		up(en.LastProgressAt)
		if en.StartedAt > 0 && en.DurationMs > 0 {
			up(en.StartedAt + en.DurationMs)
		}
	}
	return t
}

// Plausible bounds of an epoch-ms time: from 2001-09-09 (1e12 ms) to
// 2100-01-01. A time outside them is not a time of this stream: most often
// seconds written where milliseconds belong (which would make a span of
// decades), or garbage. Such a time is counted as bad_time and not used.
const (
	minPlausibleMs = 1_000_000_000_000
	maxPlausibleMs = 4_102_444_800_000
)

// Plausible reports whether v can be an epoch-ms time of a stream.
func Plausible(v int64) bool { return v >= minPlausibleMs && v < maxPlausibleMs }

// MaxSpawnDepth bounds spawn_depth as read: Claude Code nests at most 3
// deep; a larger number is kept as this, not as whatever a stream says.
const MaxSpawnDepth = 16
