package ingest

import (
	"hash/maphash"

	"github.com/cbc-otel/cbc-otel/streamjson"
)

// Stalled agents (issue 31): a started agent still live (start, running,
// progress...) of an unfinished workflow run that shows no progress for
// StallAfter, on the same clock as a stalled run, is stalled, once per
// silence. Progress is its row's lastProgressAt advancing when the row
// carries one (Claude Code 2.1.334+), else its row changing (state
// spelling, tokens, toolCalls, durationMs, times, error) between
// snapshots; a resent snapshot is never progress. A queued agent waits on
// the others, not on itself: it does not stall. The stall ends when the
// agent progresses, ends, or its run ends. The run's own stall is
// independent: a run silent as a whole stalls, and so do its live agents.

// rowSeed makes rowSum's hashes; one per process is enough (the sums are
// never stored beyond it: a restored agent starts afresh).
var rowSeed = maphash.MakeSeed()

// rowSum sums what an agent row says that changes with its progress.
func rowSum(e *streamjson.Entry) uint64 {
	var h maphash.Hash
	h.SetSeed(rowSeed)
	h.WriteString(e.State)
	h.WriteString(e.Error)
	for _, v := range [...]int64{e.StartedAt, e.EndedAt, e.DurationMs, e.Tokens, e.ToolCalls} {
		var b [8]byte
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		h.Write(b[:])
	}
	return h.Sum64()
}

// agentRow notes agent a's row e of run r: whether it shows progress, and
// so ends a's stall. Called from mergeAgent before a's state is taken
// from e; resent is the frame's "resent": a repeat, never progress.
func (t *Tracker) agentRow(r *Run, a *Agent, e *streamjson.Entry, resent bool) {
	sum := rowSum(e)
	moved := sum != a.rowSum
	if e.LastProgressAt > 0 {
		moved = e.LastProgressAt > a.lastProgressAt
		a.lastProgressAt = e.LastProgressAt
	}
	moved = moved || (e.StartedAt > 0 && a.Start == 0) // starting is progress
	a.rowSum = sum
	if resent || (!moved && a.lastMove != 0) {
		return
	}
	a.lastMove = t.now
	if t.stallAfter > 0 && !r.Finished {
		r.agentDue = earliest(r.agentDue, t.now+t.stallAfter)
	}
	t.unstallAgent(r, a)
}

// unstallAgent ends a's stall, if any: before its AgentEnded, so that no
// stall event of an agent follows its end.
func (t *Tracker) unstallAgent(r *Run, a *Agent) {
	if a.Stalled {
		a.Stalled = false
		r.AgentsStalled--
		t.emit(Lifecycle{Kind: AgentResumed, Run: r, Agent: a})
	}
}

// unstallAgents ends the stalls of r's agents (the run ended).
func (t *Tracker) unstallAgents(r *Run) {
	r.agentDue = 0
	for i := 0; r.AgentsStalled > 0 && i < len(r.Agents); i++ {
		t.unstallAgent(r, &r.Agents[i])
	}
}

// checkAgentStalls marks r's started, live agents without progress for
// stallAfter. It is called from checkStalls, so at most once a second, and
// looks at r's agents (at most Caps.Agents) only once the earliest of them
// can be due: a run whose agents keep moving is looked at about once per
// stallAfter.
func (t *Tracker) checkAgentStalls(r *Run) {
	if r.agentDue == 0 || t.now < r.agentDue || r.Finished || r.pending() {
		return
	}
	r.agentDue = 0
	for i := range r.Agents {
		a := &r.Agents[i]
		if a.State != AgentRunning || a.Stalled || a.lastMove == 0 {
			continue
		}
		if due := a.lastMove + t.stallAfter; t.now < due {
			r.agentDue = earliest(r.agentDue, due)
			continue
		}
		a.Stalled = true
		a.Stalls++
		r.AgentsStalled++
		t.emit(Lifecycle{Kind: AgentStalled, Run: r, Agent: a})
	}
}

// restartAgentClocks starts the silence of r's live agents afresh (a
// restored Tracker: what they said before is not kept).
func (t *Tracker) restartAgentClocks(r *Run) {
	for i := range r.Agents {
		if a := &r.Agents[i]; a.State == AgentRunning && !r.Finished {
			a.lastMove = t.now
			if t.stallAfter > 0 {
				r.agentDue = earliest(r.agentDue, t.now+t.stallAfter)
			}
		}
	}
}
