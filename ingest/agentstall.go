package ingest

import "github.com/cbc-otel/cbc-otel/streamjson"

// Stalled agents (issue 31): a started agent still live (start, running,
// progress...) of an unfinished workflow run that shows no progress for
// StallAfter, on the same clock as a stalled run, is stalled, once per
// silence. Progress is its row's lastProgressAt advancing when the row
// carries one (Claude Code 2.1.334+), else its row changing (state
// spelling, tokens, toolCalls, durationMs, startedAt) between
// snapshots; a resent snapshot is never progress. A queued agent waits on
// the others, not on itself: it does not stall. The stall ends when the
// agent progresses, ends, or its run ends. The run's own stall is
// independent: a run silent as a whole stalls, and so do its live agents.

// spelling identifies a state's spelling: its length and first byte tell
// every live spelling the protocol has apart (start, started, running,
// progress, in_progress, ""), without keeping the string.
func spelling(s string) uint16 {
	if s == "" {
		return 0
	}
	return uint16(min(len(s), 255))<<8 | uint16(s[0])
}

// agentRow notes agent a's row e of run r, before a's fields take e's:
// whether it shows progress, and so ends a's stall. started is e's
// startedAt as taken (0: none or implausible); resent is the frame's
// "resent": a repeat, never progress. It compares what a holds already
// (no hash, no copy): every live row of every snapshot pays it.
func (t *Tracker) agentRow(r *Run, a *Agent, e *streamjson.Entry, started int64, resent bool) {
	sp := spelling(e.State)
	moved := e.Tokens != a.Tokens || e.ToolCalls != a.ToolCalls || e.DurationMs != a.DurationMs ||
		sp != a.spelling || (started > 0 && started != a.Start)
	if e.LastProgressAt > 0 {
		// The CLI's own word, when it gives one; starting is progress.
		moved = e.LastProgressAt > a.lastProgressAt || (started > 0 && a.Start == 0)
		a.lastProgressAt = max(a.lastProgressAt, e.LastProgressAt) // a row that goes back is late
	}
	a.spelling = sp
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
