package ingest

// TokenType is a kind of model token, as the CLIs split them. The set is
// closed so that it can be a metric label.
type TokenType uint8

// Token types, in label order.
const (
	TokensInput         TokenType = iota // uncached input
	TokensOutput                         // output (thinking included)
	TokensCacheRead                      // input read from the prompt cache
	TokensCacheCreation                  // input written to the prompt cache
	NumTokenTypes
)

var tokenTypeNames = [...]string{"input", "output", "cache_read", "cache_creation"}

// String is the type's label value.
func (t TokenType) String() string { return tokenTypeNames[t] }

// TokenTypes lists every token type, in label order.
func TokenTypes() []TokenType {
	return []TokenType{TokensInput, TokensOutput, TokensCacheRead, TokensCacheCreation}
}

// Tokens counts tokens by type.
type Tokens [NumTokenTypes]int64

// Total is the sum over every type.
func (t Tokens) Total() int64 {
	var n int64
	for _, v := range t {
		n += v
	}
	return n
}

// ModelUsage is what one model cost and used.
type ModelUsage struct {
	Model   string
	CostUSD float64
	Tokens  Tokens
}

// MaxCostModels bounds how many models a Cost keeps apart; the rest are
// summed under OtherModel. A session uses one to three.
const MaxCostModels = 8

// OtherModel is the model name under which a Cost sums the models beyond
// MaxCostModels.
const OtherModel = "other"

// Cost is what a run, an agent or a session spent: the sum, and the same
// per model.
type Cost struct {
	CostUSD float64
	Tokens  Tokens
	Calls   int64 // model calls counted in
	Models  []ModelUsage
}

// Known reports whether anything was counted.
func (c *Cost) Known() bool { return c.Calls > 0 || c.CostUSD != 0 || c.Tokens.Total() != 0 }

// Add counts one model's usage (one call when calls is 1; a session delta
// counts as many calls as it says).
func (c *Cost) Add(u ModelUsage, calls int64) {
	c.CostUSD += u.CostUSD
	for i, v := range u.Tokens {
		c.Tokens[i] += v
	}
	c.Calls += calls
	name := u.Model
	for i := range c.Models {
		if c.Models[i].Model == name {
			c.Models[i].add(u)
			return
		}
	}
	if len(c.Models) >= MaxCostModels {
		name = OtherModel
		for i := range c.Models {
			if c.Models[i].Model == name {
				c.Models[i].add(u)
				return
			}
		}
		// Fold the last kept model into "other" to make room: the list
		// never grows past the bound.
		last := &c.Models[len(c.Models)-1]
		last.Model = OtherModel
		last.add(u)
		return
	}
	c.Models = append(c.Models, ModelUsage{Model: name, CostUSD: u.CostUSD, Tokens: u.Tokens})
}

func (m *ModelUsage) add(u ModelUsage) {
	m.CostUSD += u.CostUSD
	for i, v := range u.Tokens {
		m.Tokens[i] += v
	}
}

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
	Usage      ModelUsage
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
// baseline was forgotten (the bound on sessions), counts in full. If any
// cumulative value went DOWN (beyond float noise) or a model of the
// baseline is missing, it is a new session under the same id or a reset:
// Reset is set and the delta is the whole current value. A total_cost_usd
// that is absent or bad leaves its baseline as it was (CostUSD 0). A
// result line lost (too long, dropped) costs nothing in the end: the next
// one's delta includes its share. Delta lists only the models that grew.
type Turn struct {
	SessionID  string
	Subtype    string // result.subtype: success, error_max_turns, ...
	IsError    bool
	DurationMs int64
	// Reset is set when a cumulative value went down since the session's
	// previous result (a new session under the same id, or a reset): the
	// delta is then the whole cumulative value.
	Reset bool
	// Delta is what the session's cumulative total_cost_usd and modelUsage
	// grew by since its previous result line, per model.
	Delta []ModelUsage
	// CostUSD is the growth of total_cost_usd.
	CostUSD float64
}
