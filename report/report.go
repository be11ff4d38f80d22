// Package report turns finalized runs into what people and scripts read: a
// terminal waterfall per workflow run, the `replay --summary.json` contract, one
// JSON object per line (docs/json.md), and a Markdown section
// for a CI step summary (WriteStepSummary).
//
// Cost: when the CLI's own telemetry was joined (run --cli-telemetry.join),
// a run and an agent whose cost.Sum is known gain, in JSON,
//
//	"cost_usd": 0.0123,                  the sum of the CLI's api_request cost_usd
//	"tokens_by_type": {"input":N,"output":N,"cache_read":N,"cache_creation":N},
//	"model_calls": N,                    api_request events counted in
//	"models": [{"model":"claude-sonnet-4-5","cost_usd":0.0123,"tokens_by_type":{...}}]
//
// and the waterfall shows "$0.0123" on their lines. (The stream's own
// "tokens", a total, keeps its name and meaning.) The main conversation's
// calls, which no run owns, are summed per session in a "session" line,
// {"kind":"session","session_id":…,"cost_usd":…,…}, before the stats line
// (WriteJSONSessions) and under the waterfall. Without cost nothing of
// this appears: the output is what it was.
package report

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
)

// Collector is an ingest.Sink that keeps every finalized run, in order of
// finalization, and the cost of each session's main conversation.
type Collector struct {
	Runs []ingest.Run
	// JSONOnly keeps each finalized run as its replay --summary.json line, not as a
	// copy in Runs (WriteJSON writes them): no copy of every run's agents
	// and phases, a run's line is all that is left of it. The copies were a
	// quarter of replay's allocated bytes.
	JSONOnly bool
	// The runs' lines, with JSONOnly, in blocks of about linesBlock bytes:
	// one growing slice copied all it held at every doubling and faulted in
	// fresh pages each time (a tenth of replay's CPU on a 230 MiB stream).
	lines [][]byte
	main  []sessionCost // in order of first call
}

// linesBlock is the size of the blocks a JSONOnly Collector keeps its
// lines in.
const linesBlock = 1 << 20

// MaxSessions bounds the sessions whose main conversation a Collector
// sums; calls of further sessions are not counted (a wrapped CLI runs one).
const MaxSessions = 1024

type sessionCost struct {
	id   string
	cost cost.Sum
}

// Observe keeps finalized runs and sums the main conversation's calls.
func (c *Collector) Observe(l ingest.Lifecycle) {
	switch {
	case l.Kind == ingest.RunFinalized && c.JSONOnly:
		n := len(c.lines) - 1
		if n < 0 || len(c.lines[n]) >= linesBlock {
			c.lines = append(c.lines, make([]byte, 0, linesBlock+linesBlock/4))
			n++
		}
		c.lines[n] = append(appendRunLine(c.lines[n], l.Run), '\n')
	case l.Kind == ingest.RunFinalized:
		c.Runs = append(c.Runs, l.Run.Clone())
	case l.Kind == ingest.ModelCallSeen && l.Call != nil && l.Call.Scope == ingest.CallMain:
		for i := range c.main {
			if c.main[i].id == l.Call.SessionID {
				c.main[i].cost.Add(l.Call.Cost, 1)
				return
			}
		}
		if len(c.main) < MaxSessions {
			s := sessionCost{id: strings.Clone(l.Call.SessionID)}
			s.cost.Add(cost.Model{Model: strings.Clone(l.Call.Cost.Model), CostUSD: l.Call.Cost.CostUSD, Tokens: l.Call.Cost.Tokens}, 1)
			c.main = append(c.main, s)
		}
	}
}

// Sessions returns the main conversation's cost of every session that had
// one, in order of first call.
func (c *Collector) Sessions() []Session {
	out := make([]Session, 0, len(c.main))
	for _, s := range c.main {
		out = append(out, Session{Kind: "session", SessionID: s.id, Cost: CostOf(&s.cost)})
	}
	return out
}

// Session is the JSON form of a session's main conversation (kind
// "session"): the calls no run owns.
type Session struct {
	Kind      string `json:"kind"` // "session"
	SessionID string `json:"session_id"`
	Cost
}

// Cost is the JSON form of an cost.Sum, embedded in Workflow, Agent and
// Session; every field is left out when no cost is known, and a cost_usd
// that is not a finite number (JSON has none) is left out alone.
type Cost struct {
	CostUSD      *float64      `json:"cost_usd,omitempty"`
	TokensByType *TokensByType `json:"tokens_by_type,omitempty"`
	ModelCalls   int64         `json:"model_calls,omitempty"`
	Models       []ModelCost   `json:"models,omitempty"`
}

// TokensByType is the JSON form of cost.Tokens.
type TokensByType struct {
	Input         int64 `json:"input"`
	Output        int64 `json:"output"`
	CacheRead     int64 `json:"cache_read"`
	CacheCreation int64 `json:"cache_creation"`
}

// ModelCost is one model's share of a Cost.
type ModelCost struct {
	Model        string       `json:"model"`
	CostUSD      *float64     `json:"cost_usd,omitempty"`
	TokensByType TokensByType `json:"tokens_by_type"`
}

// CostOf converts c; the zero Cost when c is not Known.
func CostOf(c *cost.Sum) Cost {
	if !c.Known() {
		return Cost{}
	}
	tok := tokensOf(c.Tokens)
	out := Cost{CostUSD: finite(c.CostUSD), TokensByType: &tok, ModelCalls: c.Calls, Models: make([]ModelCost, 0, len(c.Models))}
	for _, m := range c.Models {
		out.Models = append(out.Models, ModelCost{Model: m.Model, CostUSD: finite(m.CostUSD), TokensByType: tokensOf(m.Tokens)})
	}
	return out
}

// finite is &v, nil when v is NaN or infinite: encoding/json refuses
// those, and one bad value from the CLI's telemetry must not cost the
// whole report.
func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func tokensOf(t cost.Tokens) TokensByType {
	return TokensByType{Input: t[cost.TokensInput], Output: t[cost.TokensOutput],
		CacheRead: t[cost.TokensCacheRead], CacheCreation: t[cost.TokensCacheCreation]}
}

// Workflow is the JSON form of a workflow run (kind "workflow"). Times are
// epoch milliseconds, 0 when unknown.
type Workflow struct {
	Kind       string `json:"kind"` // "workflow"
	TaskID     string `json:"task_id"`
	RunID      string `json:"run_id"`
	SessionID  string `json:"session_id"`
	Workflow   string `json:"workflow"`
	Status     string `json:"status"` // completed | failed | stopped | abandoned
	Start      int64  `json:"start"`
	End        int64  `json:"end"`
	DurationMs int64  `json:"duration_ms"` // end − start: the one clock every output reads
	// CLIDurationMs is the CLI's own usage.duration_ms, 0 if none. It is
	// not the run's duration: the CLI counts from when the script starts,
	// after the task did.
	CLIDurationMs int64   `json:"cli_duration_ms,omitempty"`
	Tokens        int64   `json:"tokens"`
	ToolUses      int64   `json:"tool_uses"`
	Phases        []Phase `json:"phases"`
	Agents        []Agent `json:"agents"`
	// Stalls counts the run's silences of --tracker.stall-after (omitted: none).
	Stalls int `json:"stalls,omitempty"`
	// StopReason says why a stopped run stopped, when known: the
	// notification's reason, or "budget" (run --budget.max-cost-usd).
	StopReason string `json:"stop_reason,omitempty"`
	// SpawnDepth is the run's nesting depth when the stream said
	// (spawn_depth); LaunchedBy what launched a nested run; Resumes the
	// run of the same task this run resumes.
	SpawnDepth int         `json:"spawn_depth,omitempty"`
	LaunchedBy *LaunchedBy `json:"launched_by,omitempty"`
	Resumes    string      `json:"resumes,omitempty"`
	Cost                   // what its agents' model calls cost (package doc)
}

// LaunchedBy is what launched a nested run: agent Index of run (TaskID,
// RunID) of workflow Workflow, or with Index -1 the run itself (a
// sub-agent task, or a workflow whose agent the stream did not name).
// Its agents, tokens and cost are counted in the nested run only.
type LaunchedBy struct {
	TaskID   string `json:"task_id"`
	RunID    string `json:"run_id,omitempty"`
	Workflow string `json:"workflow,omitempty"`
	Index    int    `json:"agent_index"`
	AgentID  string `json:"agent_id,omitempty"`
	Label    string `json:"label,omitempty"`
}

// Phase is the JSON form of a phase: its agents' earliest start and latest end.
type Phase struct {
	Index int    `json:"index"`
	Title string `json:"title"`
	Start int64  `json:"start"`
	End   int64  `json:"end"`
	// Kind is "child" for a script's workflow() run inside this one (its
	// agents are this run's), omitted for a plain phase.
	Kind string `json:"kind,omitempty"`
}

// Agent is the JSON form of a sub-agent. State is done | error | cached |
// abandoned (started, never ended) | not_started (queued, never started);
// Cached is true for a cached agent whichever spelling the stream used.
type Agent struct {
	Index      int    `json:"index"`
	AgentID    string `json:"agentId"`
	Label      string `json:"label"`
	PhaseIndex int    `json:"phaseIndex"`
	State      string `json:"state"`
	Cached     bool   `json:"cached"`
	Start      int64  `json:"start"`
	End        int64  `json:"end"`
	// EndInferred is set when the stream gave no end (a stopped or
	// abandoned agent): End is then the run's end.
	EndInferred bool   `json:"end_inferred,omitempty"`
	Tokens      int64  `json:"tokens"`
	Error       string `json:"error"`
	// Stalls counts the agent's silences of --tracker.stall-after while live
	// (omitted: none).
	Stalls int `json:"stalls,omitempty"`
	Cost       // what its model calls cost (package doc)
}

// Task is the JSON form of a non-workflow background task (kind "task"):
// with Claude Code, its run, and for a nested task (a sub-agent's
// sub-agent or shell) its depth and launcher, like a Workflow's.
type Task struct {
	Kind       string      `json:"kind"` // "task"
	TaskID     string      `json:"task_id"`
	RunID      string      `json:"run_id,omitempty"`
	TaskType   string      `json:"task_type"`
	Status     string      `json:"status"`
	SpawnDepth int         `json:"spawn_depth,omitempty"`
	LaunchedBy *LaunchedBy `json:"launched_by,omitempty"`
	Resumes    string      `json:"resumes,omitempty"`
}

// StatsLine is the last JSON line (kind "stats"): what the pipeline read.
type StatsLine struct {
	Kind       string           `json:"kind"` // "stats"
	Lines      int64            `json:"lines"`
	Bytes      int64            `json:"bytes"`
	Rejected   map[string]int64 `json:"rejected"`
	Violations map[string]int64 `json:"violations"`
	// The telemetry's gaps, present only when there were any: bytes the
	// taps dropped (or that were not read at exit), bytes read as pieces of
	// lines a drop cut, and the bytes of the rejected lines by reason.
	// Lines' Bytes + IncompleteBytes + DroppedBytes is all that passed.
	DroppedBytes    int64            `json:"dropped_bytes,omitempty"`
	IncompleteBytes int64            `json:"incomplete_bytes,omitempty"`
	RejectedBytes   map[string]int64 `json:"rejected_bytes,omitempty"`
}

// DropsText says what the telemetry did not read ("telemetry incomplete:
// 9.3 MiB dropped (it fell behind), 90.6 MiB in lines the drops cut"), or
// "" when it read everything: said, not only counted, because the runs
// reported may miss what was in those bytes.
func (s StatsLine) DropsText() string {
	if s.DroppedBytes == 0 && s.IncompleteBytes == 0 {
		return ""
	}
	return fmt.Sprintf("telemetry incomplete: %s dropped (it fell behind), %s in lines the drops cut",
		bytesText(s.DroppedBytes), bytesText(s.IncompleteBytes))
}

// RejectedText is "rejected too_long=1 (50.0 MiB), invalid_json=2 (310 B)",
// or "" when no line was rejected.
func (s StatsLine) RejectedText() string {
	var parts []string
	for _, k := range sortedKeys(s.Rejected) {
		parts = append(parts, fmt.Sprintf("%s=%d (%s)", k, s.Rejected[k], bytesText(s.RejectedBytes[k])))
	}
	if len(parts) == 0 {
		return ""
	}
	return "rejected " + strings.Join(parts, ", ")
}

// GapsText is DropsText and RejectedText together ("" when neither says
// anything): what the step summary and the runs page warn about.
func (s StatsLine) GapsText() string {
	var parts []string
	for _, p := range []string{s.DropsText(), s.RejectedText()} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "; ")
}

// WorkflowOf converts a finalized workflow run.
func WorkflowOf(r *ingest.Run) Workflow {
	w := Workflow{
		Kind: "workflow", TaskID: r.TaskID, RunID: r.RunID, SessionID: r.SessionID,
		Workflow: r.Name, Status: r.Status.String(), Start: r.Start, End: r.End,
		DurationMs: r.DurationMs(), CLIDurationMs: r.Usage.DurationMs, Tokens: r.Usage.TotalTokens, ToolUses: r.Usage.ToolUses,
		Phases: make([]Phase, 0, len(r.Phases)), Agents: make([]Agent, 0, len(r.Agents)), Cost: CostOf(&r.Cost),
		Stalls: r.Stalls, SpawnDepth: r.SpawnDepth, LaunchedBy: launchedBy(r), Resumes: resumedRun(r),
		StopReason: StopReason(r),
	}
	for _, p := range r.Phases {
		w.Phases = append(w.Phases, Phase{Index: p.Index, Title: p.Title, Start: p.Start, End: p.End, Kind: phaseKind(&p)})
	}
	for _, a := range r.Agents {
		w.Agents = append(w.Agents, Agent{
			Index: a.Index, AgentID: a.AgentID, Label: a.Label, PhaseIndex: a.PhaseIndex,
			State: a.State.String(), Cached: a.Cached, Start: a.Start, End: a.End,
			EndInferred: a.EndInferred, Tokens: a.Tokens, Error: a.Error, Stalls: a.Stalls, Cost: CostOf(&a.Cost),
		})
	}
	return w
}

// phaseKind is Phase.Kind of p.
func phaseKind(p *ingest.Phase) string {
	if p.Child {
		return "child"
	}
	return ""
}

// TaskOf converts a finalized non-workflow task.
func TaskOf(r *ingest.Run) Task {
	return Task{Kind: "task", TaskID: r.TaskID, RunID: r.RunID, TaskType: r.TaskType, Status: r.Status.String(),
		SpawnDepth: r.SpawnDepth, LaunchedBy: launchedBy(r), Resumes: resumedRun(r)}
}

// launcher is what launched r, when the stream named it and it was seen:
// the run (or agent) it hangs under, else the ended run it is linked to.
func launcher(r *ingest.Run) *ingest.AgentRef {
	if r.Parent.TaskID != "" {
		return &r.Parent
	}
	if r.ParentLink != nil {
		return r.ParentLink
	}
	return nil
}

// resumedRun is the run id of the run r resumes, "" when none.
func resumedRun(r *ingest.Run) string {
	if r.Resumes == nil {
		return ""
	}
	return r.Resumes.RunID
}

// launchedBy is LaunchedBy of r's launcher, nil without one.
func launchedBy(r *ingest.Run) *LaunchedBy {
	p := launcher(r)
	if p == nil {
		return nil
	}
	return &LaunchedBy{TaskID: p.TaskID, RunID: p.RunID, Workflow: p.Workflow, Index: p.Index, AgentID: p.AgentID, Label: p.Label}
}

// StatsOf summarizes a pipeline's counters over all sources.
func StatsOf(s *ingest.Stats) StatsLine {
	out := StatsLine{Kind: "stats", Rejected: map[string]int64{}, Violations: map[string]int64{}}
	for _, n := range s.PerSource() {
		out.Lines += n.Lines
		out.Bytes += n.Bytes
		out.DroppedBytes += n.Dropped
		out.IncompleteBytes += n.Incomplete
	}
	for r, n := range s.PerReason() {
		if n.Lines > 0 {
			out.Rejected[r] = n.Lines
			if out.RejectedBytes == nil {
				out.RejectedBytes = map[string]int64{}
			}
			out.RejectedBytes[r] = n.Bytes
		}
	}
	for v, n := range s.PerViolation() {
		if n > 0 {
			out.Violations[v] = n
		}
	}
	return out
}

// WriteJSON writes one JSON object per run and the stats line.
func WriteJSON(w io.Writer, runs []ingest.Run, stats *ingest.Stats) error {
	return WriteJSONSessions(w, runs, nil, stats)
}

// WriteJSONSessions is WriteJSON with a "session" line per session
// (Collector.Sessions) between the runs and the stats line. The lines are
// encoding/json's encoding of the Workflow, Task, Session and StatsLine
// values, byte for byte, made without reflection (jsonenc.go) and written
// to w in chunks of up to 64 KiB, so an unbuffered w costs no syscall per
// line.
func WriteJSONSessions(w io.Writer, runs []ingest.Run, sessions []Session, stats *ingest.Stats) error {
	j := jsonLines{w: w, buf: make([]byte, 0, jsonChunk+jsonChunk/4)}
	for i := range runs {
		j.buf = appendRunLine(j.buf, &runs[i])
		if err := j.endLine(); err != nil {
			return err
		}
	}
	return j.sessionsAndStats(sessions, stats)
}

// WriteJSON writes what WriteJSONSessions writes of the collected runs
// and sessions: from the lines kept with JSONOnly, else from Runs.
func (c *Collector) WriteJSON(w io.Writer, stats *ingest.Stats) error {
	if !c.JSONOnly {
		return WriteJSONSessions(w, c.Runs, c.Sessions(), stats)
	}
	for _, b := range c.lines {
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("writing JSON lines: %w", err)
		}
	}
	j := jsonLines{w: w, buf: make([]byte, 0, jsonChunk+jsonChunk/4)}
	return j.sessionsAndStats(c.Sessions(), stats)
}

// appendRunLine appends r's JSON line without its newline.
func appendRunLine(b []byte, r *ingest.Run) []byte {
	if r.Workflow {
		return appendWorkflowRun(b, r)
	}
	return appendTaskRun(b, r)
}

// sessionsAndStats writes the session lines and the stats line (when
// stats is not nil) after the runs' lines.
func (j *jsonLines) sessionsAndStats(sessions []Session, stats *ingest.Stats) error {
	for i := range sessions {
		line := len(j.buf)
		var err error
		if j.buf, err = appendSession(j.buf, &sessions[i]); err != nil {
			// The lines before are written, this one not at all, as
			// encoding/json did.
			j.buf = j.buf[:line]
			return errors.Join(j.flush(), err)
		}
		if err := j.endLine(); err != nil {
			return err
		}
	}
	if stats != nil {
		st := StatsOf(stats)
		j.buf = appendStats(j.buf, &st)
		j.buf = append(j.buf, '\n')
	}
	return j.flush()
}

// WriteJSONFile writes WriteJSON's output to path atomically (a temporary
// file renamed into place), so a reader never sees half a summary.
func WriteJSONFile(path string, runs []ingest.Run, sessions []Session, stats *ingest.Stats) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("summary file: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename this fails harmlessly
	w := bufio.NewWriter(tmp)
	if err := WriteJSONSessions(w, runs, sessions, stats); err != nil {
		tmp.Close()
		return fmt.Errorf("summary file: %w", err)
	}
	if err := errors.Join(w.Flush(), tmp.Chmod(0o644), tmp.Close()); err != nil {
		return fmt.Errorf("summary file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("summary file: %w", err)
	}
	return nil
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// StopReason is why a stopped run stopped, when known ("budget": run
// --budget.max-cost-usd; else the notification's reason), "" otherwise.
func StopReason(r *ingest.Run) string {
	if r.Status != ingest.StatusStopped {
		return ""
	}
	return r.Reason
}
