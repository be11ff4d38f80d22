package ingest

import "github.com/cbc-otel/cbc-otel/cost"

// LifecycleKind says what happened to a run.
type LifecycleKind uint8

// Lifecycle kinds, in the order a run goes through them. Workflow runs get
// RunStarted, Agent*, RunUpdated, RunFinished and, after the grace window,
// RunFinalized. Plain tasks get TaskStarted and TaskEnded.
const (
	RunStarted         LifecycleKind = iota // a workflow run was announced
	AgentStarted                            // an agent has a startedAt for the first time
	AgentEnded                              // an agent reached its final state (once per agent)
	RunUpdated                              // a task_updated patch was merged
	RunFinished                             // the terminal status is known (once per run)
	RunFinalized                            // the grace window closed; the run is immutable
	TaskStarted                             // a non-workflow task started
	TaskEnded                               // a non-workflow task reached its terminal status
	InterruptRequested                      // an interrupt or stop_task was seen on stdin
	InterruptMatched                        // a stopped notification answered an interrupt
	ViolationSeen                           // a protocol violation was counted
	ModelCallSeen                           // the CLI's telemetry reported a model call (Lifecycle.Call)
	TurnEnded                               // a result line ended a turn of a session (Lifecycle.Turn)
	RunStalled                              // an unfinished workflow run showed no event for TrackerOptions.StallAfter
	RunResumed                              // a stalled run showed an event again, or ended
	AgentStalled                            // a started, live agent of an unfinished run showed no progress for TrackerOptions.StallAfter
	AgentResumed                            // a stalled agent progressed, ended, or its run ended
)

var lifecycleNames = [...]string{"run_started", "agent_started", "agent_ended", "run_updated", "run_finished", "run_finalized", "task_started", "task_ended", "interrupt_requested", "interrupt_matched", "violation", "model_call", "turn_ended", "run_stalled", "run_resumed", "agent_stalled", "agent_resumed"}

func (k LifecycleKind) String() string { return lifecycleNames[k] }

// Lifecycle is one event the Tracker emits. Run and Agent point into the
// Tracker's state and are valid only during Observe: a sink that keeps
// anything must copy it. Sinks are called synchronously, in order, from the
// goroutine that feeds the Tracker, so they need no locking of their own
// for these calls and must not block.
type Lifecycle struct {
	Kind      LifecycleKind
	At        int64 // the Tracker's clock, epoch ms (0 if unknown)
	Run       *Run
	Agent     *Agent    // AgentStarted, AgentEnded, AgentStalled, AgentResumed
	Violation Violation // ViolationSeen
	LatencyMs int64     // InterruptMatched
	// Call is the model call of a ModelCallSeen; Run and Agent are set too
	// while its run is open (the call has already been added to their Cost).
	Call *ModelCall
	Turn *Turn // TurnEnded
}

// Sink consumes lifecycle events.
type Sink interface {
	Observe(Lifecycle)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(Lifecycle)

// Observe calls f.
func (f SinkFunc) Observe(l Lifecycle) { f(l) }

// Violation is a kind of protocol violation (PROTOCOL.md §6 and the
// one-notification rule). The set is closed so that it can be a label.
type Violation uint8

// Protocol violations.
const (
	ViolationNone                    Violation = iota
	ViolationDuplicateNotify                   // a second task_notification for a run
	ViolationDuplicateStart                    // a second task_started for the same run
	ViolationUnknownTask                       // an event for a task never started
	ViolationLateEvent                         // an event after the run's grace window closed
	ViolationMissingTerminal                   // an agent without a final state at a completed/failed notification
	ViolationAgentRegression                   // an agent's final state changed or went back to live
	ViolationStatusConflict                    // task_updated's terminal status contradicts the notification
	ViolationUpdateAfterNotification           // task_updated after the task_notification
	ViolationUnknownStatus                     // a status spelling the protocol does not define
	ViolationBadField                          // a field of the wrong type or out of range: that field was ignored
	ViolationBadEntry                          // a workflow_progress element skipped: not an object, no type, or an invalid index
	ViolationBadTime                           // an implausible time (out of range, an end before its start) was not used
	ViolationStartAfterProgress                // task_started after the run's first task_progress: it completed the run's identity
	ViolationOverCapacity                      // a cap on the Tracker's state was reached: something old was given up, or something new refused
	numViolations
)

var violationNames = [...]string{"none", "duplicate_notification", "duplicate_start", "unknown_task", "late_event", "missing_terminal_agent_state", "agent_state_regression", "status_conflict", "update_after_notification", "unknown_status", "bad_field", "bad_entry", "bad_time", "start_after_progress", "over_capacity"}

func (v Violation) String() string { return violationNames[v] }

// Violations lists every violation kind, for exporters that pre-create series.
func Violations() []Violation {
	out := make([]Violation, 0, numViolations-1)
	for v := ViolationDuplicateNotify; v < numViolations; v++ {
		out = append(out, v)
	}
	return out
}

// Clone returns a deep copy of r.
func (r *Run) Clone() Run {
	c := *r
	c.Phases = append([]Phase(nil), r.Phases...)
	c.Agents = append([]Agent(nil), r.Agents...)
	c.Cost.Models = append([]cost.Model(nil), r.Cost.Models...)
	for i := range c.Agents {
		c.Agents[i].Cost.Models = append([]cost.Model(nil), c.Agents[i].Cost.Models...)
	}
	return c
}
