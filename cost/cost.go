// Package cost is the vocabulary of what model calls cost: tokens by type,
// what one model cost (Model), the Sum a run, an agent or a session keeps;
// and Sessions, which turns the cumulative cost of a session's result
// lines into what each turn added. It imports nothing; package ingest
// carries these on its runs and events. ("Usage" is the stream's own
// per-run counters, streamjson.Usage: another concept.)
package cost

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

// Model is what one model cost and used.
type Model struct {
	Model   string
	CostUSD float64
	Tokens  Tokens
}

// MaxModels bounds how many models a Sum keeps apart; the rest are
// summed under OtherModel. A session uses one to three.
const MaxModels = 8

// OtherModel is the model name under which a Sum sums the models beyond
// MaxModels.
const OtherModel = "other"

// Sum is what a run, an agent or a session spent: the sum, and the same
// per model.
type Sum struct {
	CostUSD float64
	Tokens  Tokens
	Calls   int64 // model calls counted in
	Models  []Model
}

// Known reports whether anything was counted.
func (c *Sum) Known() bool { return c.Calls > 0 || c.CostUSD != 0 || c.Tokens.Total() != 0 }

// Add counts one model's usage (one call when calls is 1; a session delta
// counts as many calls as it says).
func (c *Sum) Add(u Model, calls int64) {
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
	if len(c.Models) >= MaxModels {
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
	c.Models = append(c.Models, Model{Model: name, CostUSD: u.CostUSD, Tokens: u.Tokens})
}

func (m *Model) add(u Model) {
	m.CostUSD += u.CostUSD
	for i, v := range u.Tokens {
		m.Tokens[i] += v
	}
}
