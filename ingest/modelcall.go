package ingest

import "github.com/cbc-otel/cbc-otel/cost"

// CallScope says whose model call a ModelCall was.
type CallScope uint8

// Call scopes, in label order.
const (
	CallMain      CallScope = iota // the main conversation (no agent id)
	CallWorkflow                   // a workflow sub-agent the stream named
	CallUnmatched                  // an agent id no workflow of the stream named (a plain sub-agent, or one never seen)
)

var callScopeNames = [...]string{"main", "workflow", "unmatched"}

// String is the scope's label value.
func (s CallScope) String() string { return callScopeNames[s] }

// CallScopes lists every scope, in label order.
func CallScopes() []CallScope { return []CallScope{CallMain, CallWorkflow, CallUnmatched} }

// ModelCall is one model call the CLI reported in its own telemetry (Claude
// Code's api_request log event). The Tracker fills in the attribution.
type ModelCall struct {
	AgentID string // the CLI's agent_id; empty in the main conversation
	// ToolUseID is the tool_use_id of the Workflow call the call ran
	// under, when known. agentIds are content-addressed, so a workflow run
	// twice reuses them: this tells the runs apart.
	ToolUseID  string
	SessionID  string
	Cost       cost.Model
	DurationMs int64
	At         int64 // epoch ms

	// Set by the Tracker.
	Scope CallScope
	// Late is set when the call's run was already final: it counts for the
	// workflow's totals, not for the run's Cost.
	Late       bool
	Workflow   string // the run's workflow name (CallWorkflow)
	TaskID     string
	RunID      string
	AgentIndex int
}

// Turn is one turn of a session as its result line tells it: the session's
// cumulative cost turned into what this turn added.
//
// The rule: result lines carry total_cost_usd and modelUsage CUMULATIVE
// over the session (workflow sub-agents included), so they are never
// summed. The Tracker keeps each session's last values (its baseline) and
// emits delta = current - previous, per model (cost and each token type)
// and for total_cost_usd. The first result of a session, or of one whose
// baseline was forgotten (the bound on sessions), counts in full. If a
// cumulative value known in both went DOWN (beyond float noise), it is a
// new session under the same id or a reset: Reset is set and the delta is
// the whole current value. Each value is known on its own: one that is
// absent or bad (total_cost_usd, a model's costUSD or a token count, or a
// model left out) is unknown, not 0, so it is no decrease and leaves its
// baseline as it was; the next line that gives it counts its growth since
// the last one that did. A result line lost (too long, dropped) costs
// nothing in the end either: the next one's delta includes its share.
// Delta lists only the models that grew.
type Turn struct {
	SessionID  string
	Subtype    string // result.subtype: success, error_max_turns, ...
	IsError    bool
	DurationMs int64
	// Reset is set when a cumulative value known in this line and before
	// went down (a new session under the same id, or a reset): the delta
	// is then the whole of each value the line knows.
	Reset bool
	// Delta is what the session's cumulative total_cost_usd and modelUsage
	// grew by since its previous result line, per model.
	Delta []cost.Model
	// CostUSD is the growth of total_cost_usd.
	CostUSD float64
}
