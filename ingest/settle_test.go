package ingest

import "testing"

// TestSettleAgent covers the documented fill-ins for an agent's missing
// times when its run is finalized (they moved here from the traces sink:
// every output reads them now).
func TestSettleAgent(t *testing.T) {
	cases := []struct {
		name       string
		a          Agent
		start, end int64
		inferred   bool
	}{
		{"complete", Agent{State: AgentDone, Start: 120, End: 150}, 120, 150, false},
		{"no end", Agent{State: AgentError, Start: 120}, 120, 900, true},
		{"abandoned", Agent{State: AgentAbandoned, Start: 120}, 120, 900, true},
		{"no start", Agent{State: AgentError, End: 300}, 100, 300, false},
		{"cached at queue time", Agent{State: AgentCached, QueuedAt: 110}, 110, 110, false},
		{"cached without times", Agent{State: AgentCached}, 100, 100, false},
		{"not started, queued", Agent{State: AgentNotStarted, QueuedAt: 130}, 130, 130, false},
		{"not started", Agent{State: AgentNotStarted}, 900, 900, false},
		{"kept inside the run", Agent{State: AgentError, Start: 50, End: 950}, 100, 900, false},
	}
	for _, c := range cases {
		r := &Run{Start: 100, End: 900}
		a := c.a
		settleAgent(r, &a)
		if a.Start != c.start || a.End != c.end || a.EndInferred != c.inferred {
			t.Errorf("%s: %d..%d inferred %v, want %d..%d inferred %v", c.name, a.Start, a.End, a.EndInferred, c.start, c.end, c.inferred)
		}
	}
}
