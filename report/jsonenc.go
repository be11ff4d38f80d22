package report

// The replay --summary.json lines are appended to one reused buffer, field by
// field, instead of going through encoding/json's reflection: on a
// task-heavy replay that encoding was about 8% of the CPU (issue #22). The
// bytes are exactly encoding/json's (Encoder, SetEscapeHTML(false)) for
// the Workflow, Task, Session and StatsLine a run turns into: the types
// stay the documented contract, and jsonenc_test.go compares the two
// byte for byte (tables, random runs, fuzzing).

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/jsonnum"
)

// jsonChunk is how much output is gathered before it is written: callers
// pass os.Stdout unbuffered, where a write per line is a syscall per line.
const jsonChunk = 64 << 10

// jsonLines appends JSON lines to buf and writes them to w a chunk at a
// time.
type jsonLines struct {
	w   io.Writer
	buf []byte
}

// endLine ends the line in buf and writes buf out once it holds a chunk.
func (j *jsonLines) endLine() error {
	j.buf = append(j.buf, '\n')
	if len(j.buf) < jsonChunk {
		return nil
	}
	return j.flush()
}

// flush writes out what buf holds.
func (j *jsonLines) flush() error {
	if len(j.buf) == 0 {
		return nil
	}
	_, err := j.w.Write(j.buf)
	j.buf = j.buf[:0]
	if err != nil {
		return fmt.Errorf("writing JSON lines: %w", err)
	}
	return nil
}

// appendWorkflowRun appends the JSON of WorkflowOf(r), read from r
// directly: building the Workflow first (its phase, agent and cost slices)
// would cost nearly as much as the encoding itself (BenchmarkWriteJSON's
// runs: WorkflowOf 14 ms and 58,000 allocations, the whole report 17 ms
// and 3).
func appendWorkflowRun(b []byte, r *ingest.Run) []byte {
	b = append(b, `{"kind":"workflow","task_id":`...)
	b = appendJSONString(b, r.TaskID)
	b = append(b, `,"run_id":`...)
	b = appendJSONString(b, r.RunID)
	b = append(b, `,"session_id":`...)
	b = appendJSONString(b, r.SessionID)
	b = append(b, `,"workflow":`...)
	b = appendJSONString(b, r.Name)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, r.Status.String())
	b = appendIntField(b, `,"start":`, r.Start)
	b = appendIntField(b, `,"end":`, r.End)
	b = appendIntField(b, `,"duration_ms":`, r.DurationMs())
	if r.Usage.DurationMs != 0 {
		b = appendIntField(b, `,"cli_duration_ms":`, r.Usage.DurationMs)
	}
	b = appendIntField(b, `,"tokens":`, r.Usage.TotalTokens)
	b = appendIntField(b, `,"tool_uses":`, r.Usage.ToolUses)
	// Never null: WorkflowOf makes both slices non-nil.
	b = append(b, `,"phases":[`...)
	for i := range r.Phases {
		if i > 0 {
			b = append(b, ',')
		}
		p := &r.Phases[i]
		b = appendIntField(b, `{"index":`, int64(p.Index))
		b = append(b, `,"title":`...)
		b = appendJSONString(b, p.Title)
		b = appendIntField(b, `,"start":`, p.Start)
		b = appendIntField(b, `,"end":`, p.End)
		b = appendOptString(b, `,"kind":`, phaseKind(p))
		b = append(b, '}')
	}
	b = append(b, `],"agents":[`...)
	for i := range r.Agents {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendAgent(b, &r.Agents[i])
	}
	b = append(b, ']')
	if r.Stalls != 0 {
		b = appendIntField(b, `,"stalls":`, int64(r.Stalls))
	}
	if sr := StopReason(r); sr != "" {
		b = append(b, `,"stop_reason":`...)
		b = appendJSONString(b, sr)
	}
	b = appendNesting(b, r)
	b = appendRunCost(b, &r.Cost)
	return append(b, '}')
}

// appendNesting appends spawn_depth, launched_by and resumes, each when
// set (Workflow's and Task's last fields but cost).
func appendNesting(b []byte, r *ingest.Run) []byte {
	if r.SpawnDepth != 0 {
		b = appendIntField(b, `,"spawn_depth":`, int64(r.SpawnDepth))
	}
	if p := launcher(r); p != nil {
		b = append(b, `,"launched_by":{"task_id":`...)
		b = appendJSONString(b, p.TaskID)
		b = appendOptString(b, `,"run_id":`, p.RunID)
		b = appendOptString(b, `,"workflow":`, p.Workflow)
		b = appendIntField(b, `,"agent_index":`, int64(p.Index))
		b = appendOptString(b, `,"agent_id":`, p.AgentID)
		b = appendOptString(b, `,"label":`, p.Label)
		b = append(b, '}')
	}
	return appendOptString(b, `,"resumes":`, resumedRun(r))
}

// appendAgent appends the JSON of the Agent WorkflowOf makes of a.
func appendAgent(b []byte, a *ingest.Agent) []byte {
	b = appendIntField(b, `{"index":`, int64(a.Index))
	b = append(b, `,"agentId":`...)
	b = appendJSONString(b, a.AgentID)
	b = append(b, `,"label":`...)
	b = appendJSONString(b, a.Label)
	b = appendIntField(b, `,"phaseIndex":`, int64(a.PhaseIndex))
	b = append(b, `,"state":`...)
	b = appendJSONString(b, a.State.String())
	b = append(b, `,"cached":`...)
	b = strconv.AppendBool(b, a.Cached)
	b = appendIntField(b, `,"start":`, a.Start)
	b = appendIntField(b, `,"end":`, a.End)
	if a.EndInferred {
		b = append(b, `,"end_inferred":true`...)
	}
	b = appendIntField(b, `,"tokens":`, a.Tokens)
	b = append(b, `,"error":`...)
	b = appendJSONString(b, a.Error)
	if a.Stalls != 0 {
		b = appendIntField(b, `,"stalls":`, int64(a.Stalls))
	}
	b = appendRunCost(b, &a.Cost)
	return append(b, '}')
}

// appendRunCost appends the fields of CostOf(c), each after a comma.
func appendRunCost(b []byte, c *cost.Sum) []byte {
	if !c.Known() {
		return b
	}
	if isFinite(c.CostUSD) {
		b = append(b, `,"cost_usd":`...)
		b = jsonnum.AppendFloat(b, c.CostUSD)
	}
	b = append(b, `,"tokens_by_type":`...)
	b = appendTokens(b, tokensOf(c.Tokens))
	if c.Calls != 0 {
		b = appendIntField(b, `,"model_calls":`, c.Calls)
	}
	if len(c.Models) == 0 {
		return b
	}
	b = append(b, `,"models":[`...)
	for i := range c.Models {
		if i > 0 {
			b = append(b, ',')
		}
		m := &c.Models[i]
		b = append(b, `{"model":`...)
		b = appendJSONString(b, m.Model)
		if isFinite(m.CostUSD) {
			b = append(b, `,"cost_usd":`...)
			b = jsonnum.AppendFloat(b, m.CostUSD)
		}
		b = append(b, `,"tokens_by_type":`...)
		b = appendTokens(b, tokensOf(m.Tokens))
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendTaskRun appends the JSON of TaskOf(r).
func appendTaskRun(b []byte, r *ingest.Run) []byte {
	b = append(b, `{"kind":"task","task_id":`...)
	b = appendJSONString(b, r.TaskID)
	b = appendOptString(b, `,"run_id":`, r.RunID)
	b = append(b, `,"task_type":`...)
	b = appendJSONString(b, r.TaskType)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, r.Status.String())
	b = appendNesting(b, r)
	return append(b, '}')
}

// appendSession appends the JSON of s.
func appendSession(b []byte, s *Session) ([]byte, error) {
	b = append(b, `{"kind":`...)
	b = appendJSONString(b, s.Kind)
	b = append(b, `,"session_id":`...)
	b = appendJSONString(b, s.SessionID)
	b, err := appendCost(b, &s.Cost)
	if err != nil {
		return b, fmt.Errorf("session %q: %w", s.SessionID, err)
	}
	return append(b, '}'), nil
}

// appendCost appends the fields of c, each after a comma. A cost_usd that
// is not finite is an error, as encoding/json refuses it (JSON has none):
// CostOf never makes one, a Session built by hand may hold one.
func appendCost(b []byte, c *Cost) ([]byte, error) {
	if c.CostUSD != nil {
		if !isFinite(*c.CostUSD) {
			return b, fmt.Errorf("cost_usd %v is not a finite number", *c.CostUSD)
		}
		b = append(b, `,"cost_usd":`...)
		b = jsonnum.AppendFloat(b, *c.CostUSD)
	}
	if c.TokensByType != nil {
		b = append(b, `,"tokens_by_type":`...)
		b = appendTokens(b, *c.TokensByType)
	}
	if c.ModelCalls != 0 {
		b = appendIntField(b, `,"model_calls":`, c.ModelCalls)
	}
	if len(c.Models) == 0 {
		return b, nil
	}
	b = append(b, `,"models":[`...)
	for i := range c.Models {
		if i > 0 {
			b = append(b, ',')
		}
		m := &c.Models[i]
		b = append(b, `{"model":`...)
		b = appendJSONString(b, m.Model)
		if m.CostUSD != nil {
			if !isFinite(*m.CostUSD) {
				return b, fmt.Errorf("model %q: cost_usd %v is not a finite number", m.Model, *m.CostUSD)
			}
			b = append(b, `,"cost_usd":`...)
			b = jsonnum.AppendFloat(b, *m.CostUSD)
		}
		b = append(b, `,"tokens_by_type":`...)
		b = appendTokens(b, m.TokensByType)
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

// appendTokens appends t as an object.
func appendTokens(b []byte, t TokensByType) []byte {
	b = appendIntField(b, `{"input":`, t.Input)
	b = appendIntField(b, `,"output":`, t.Output)
	b = appendIntField(b, `,"cache_read":`, t.CacheRead)
	b = appendIntField(b, `,"cache_creation":`, t.CacheCreation)
	return append(b, '}')
}

// appendStats appends the JSON of s, the maps' keys sorted as
// encoding/json sorts them (byte order).
func appendStats(b []byte, s *StatsLine) []byte {
	b = append(b, `{"kind":`...)
	b = appendJSONString(b, s.Kind)
	b = appendIntField(b, `,"lines":`, s.Lines)
	b = appendIntField(b, `,"bytes":`, s.Bytes)
	b = append(b, `,"rejected":`...)
	b = appendCounts(b, s.Rejected)
	b = append(b, `,"violations":`...)
	b = appendCounts(b, s.Violations)
	if s.DroppedBytes != 0 {
		b = appendIntField(b, `,"dropped_bytes":`, s.DroppedBytes)
	}
	if s.IncompleteBytes != 0 {
		b = appendIntField(b, `,"incomplete_bytes":`, s.IncompleteBytes)
	}
	if len(s.RejectedBytes) > 0 {
		b = append(b, `,"rejected_bytes":`...)
		b = appendCounts(b, s.RejectedBytes)
	}
	return append(b, '}')
}

// appendCounts appends m as an object, null when nil.
func appendCounts(b []byte, m map[string]int64) []byte {
	if m == nil {
		return append(b, "null"...)
	}
	b = append(b, '{')
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = strconv.AppendInt(b, m[k], 10)
	}
	return append(b, '}')
}

// appendIntField appends key (`,"name":`) and v.
func appendIntField(b []byte, key string, v int64) []byte {
	return strconv.AppendInt(append(b, key...), v, 10)
}

// appendOptString appends key and s unless s is empty (omitempty).
func appendOptString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendJSONString(append(b, key...), s)
}

func isFinite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// appendJSONString appends s quoted as encoding/json does without HTML
// escaping: `"` and `\` escaped, \b \f \n \r \t by name, other control
// bytes as \u00XX, each byte of invalid UTF-8 as \ufffd, and U+2028 and
// U+2029 as \u2028 and \u2029 (JSONP). Everything else is copied.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
