package ingest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// TestStalledAgents: a started, live agent of an unfinished run without
// progress for StallAfter is stalled once per silence; progress is its
// row's lastProgressAt advancing when the row has one, else the row
// changing; a resent frame is never progress; the stall ends (before any
// AgentEnded) when the agent moves, ends or its run ends.
func TestStalledAgents(t *testing.T) {
	const after = 10 * time.Minute
	min := int64(60_000)
	// a1 is agent 1 live; lp its lastProgressAt (0: none); tok its tokens.
	a1 := func(lp, tok int64) jobj {
		row := agentRow(1, "start", "agentId", "A", "startedAt", T0, "tokens", tok)
		if lp > 0 {
			row = set(row, "lastProgressAt", lp)
		}
		return row
	}
	// a2 is agent 2 moving at time at: the run goes on.
	a2 := func(at int64) jobj {
		return agentRow(2, "start", "agentId", "B", "startedAt", T0, "lastProgressAt", at, "tokens", at-T0)
	}
	a1done := agentRow(1, "done", "agentId", "A", "startedAt", T0, "endedAt", T0+30*min)
	// every minute from..to, a snapshot where agent 2 moves and agent 1
	// says row(i).
	tick := func(r *clockRig, from, to int64, row func(at int64) jobj) {
		for m := from; m <= to; m++ {
			at := T0 + m*min
			r.at(at, lnProgress("w1", row(at), a2(at)))
		}
	}
	cases := []struct {
		name  string
		after time.Duration
		drive func(r *clockRig)
		want  string // stall, resume and end events, in order
	}{
		{"lastProgressAt advancing: no stall", after, func(r *clockRig) {
			tick(r, 0, 40, func(at int64) jobj { return a1(at, 5) })
			r.at(T0+41*min, lnNotify("w1", "completed"))
		}, "run_finished end:1"},
		{"lastProgressAt still while the row changes: stalled, then it advances", after, func(r *clockRig) {
			tick(r, 0, 15, func(at int64) jobj { return a1(T0, at-T0) })
			tick(r, 16, 20, func(at int64) jobj { return a1(at, 1) })
			r.at(T0+21*min, lnNotify("w1", "completed"))
		}, "stall:1@10 resume:1@16 run_finished end:1"},
		{"lastProgressAt going back and forth is not progress", after, func(r *clockRig) {
			tick(r, 0, 12, func(at int64) jobj { return a1(T0+(at-T0)/min%2*min, 1) })
			r.at(T0+13*min, lnNotify("w1", "completed"))
		}, "stall:1@11 resume:1@13 run_finished end:1"}, // it last advanced at 1m
		{"no lastProgressAt, the row changing: no stall", after, func(r *clockRig) {
			tick(r, 0, 40, func(at int64) jobj { return a1(0, at-T0) })
			r.at(T0+41*min, lnNotify("w1", "completed"))
		}, "run_finished end:1"},
		{"no lastProgressAt, the row the same: stalled until it changes, twice", after, func(r *clockRig) {
			tick(r, 0, 12, func(at int64) jobj { return a1(0, 7) })
			tick(r, 13, 13, func(at int64) jobj { return a1(0, 8) })
			tick(r, 14, 30, func(at int64) jobj { return set(a1(0, 8), "state", "progress") })
			r.at(T0+31*min, lnNotify("w1", "completed"))
		}, "stall:1@10 resume:1@13 stall:1@24 resume:1@31 run_finished end:1"},
		{"the agent ends while stalled: resumed before its end", after, func(r *clockRig) {
			tick(r, 0, 12, func(at int64) jobj { return a1(T0, 1) })
			r.at(T0+13*min, lnProgress("w1", set(a1done, "lastProgressAt", T0), a2(T0+13*min)))
			tick(r, 14, 40, func(at int64) jobj { return set(a1done, "lastProgressAt", T0) })
			r.at(T0+41*min, lnNotify("w1", "completed"))
		}, "stall:1@10 resume:1@13 end:1 run_finished"},
		{"the run ends while stalled: resumed at its end", after, func(r *clockRig) {
			tick(r, 0, 12, func(at int64) jobj { return a1(T0, 1) })
			r.at(T0+13*min, lnNotify("w1", "stopped"))
			r.tr.Advance(T0 + 40*min) // grace: late rows move nothing
		}, "stall:1@10 resume:1@13 run_finished end:1"},
		{"abandoned while stalled: resumed at the stream's end", after, func(r *clockRig) {
			tick(r, 0, 12, func(at int64) jobj { return a1(T0, 1) })
			r.tr.Close(T0 + 13*min)
		}, "stall:1@10 resume:1@13 run_finished end:1"},
		{"a resent frame is not progress", after, func(r *clockRig) {
			tick(r, 0, 5, func(at int64) jobj { return a1(T0, 1) })
			// Resent frames with lastProgressAt advanced and new tokens:
			// the same state, sent again, never progress.
			for m := int64(6); m <= 14; m++ {
				at := T0 + m*min
				r.at(at, resent(lnProgress("w1", a1(at, at), a2(at))))
				r.at(at+1, lnProgress("w1", a1(T0, 1), a2(at+1)))
			}
			r.at(T0+15*min, resent(lnFinal("w1", "completed", a1done, a2(T0+15*min))))
		}, "stall:1@10 resume:1@15 end:1 run_finished"},
		{"a run silent as a whole: the run and its live agent stall", after, func(r *clockRig) {
			tick(r, 0, 0, func(at int64) jobj { return a1(T0, 1) })
			r.tr.Advance(T0 + 11*min)
			r.at(T0+12*min, lnProgress("w1", a1(T0+12*min, 1), a2(T0+12*min)))
			r.at(T0+13*min, lnNotify("w1", "completed"))
		}, "stall:1@11 stall:2@11 run_stalled run_resumed resume:1@12 resume:2@12 run_finished end:1"},
		{"queued agents do not stall", after, func(r *clockRig) {
			for m := int64(0); m <= 30; m++ {
				at := T0 + m*min
				r.at(at, lnProgress("w1", agentRow(1, "start", "queuedAt", T0, "lastProgressAt", T0), a2(at)))
			}
			r.at(T0+31*min, lnNotify("w1", "completed"))
		}, "run_finished end:1"},
		{"off", 0, func(r *clockRig) {
			tick(r, 0, 40, func(at int64) jobj { return a1(T0, 1) })
			r.at(T0+41*min, lnNotify("w1", "completed"))
		}, "run_finished end:1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newClockRigWith(t, ingest.TrackerOptions{Grace: time.Second, StallAfter: tc.after})
			r.at(T0, lnWorkflow("w1"))
			tc.drive(r)
			r.tr.Close(T0 + 100*min)
			var got []string
			stalls := map[int]int{}
			for _, e := range r.rec.Events {
				switch e.Kind {
				case ingest.AgentStalled, ingest.AgentResumed:
					if e.Kind == ingest.AgentStalled {
						stalls[e.Agent.Index]++
					}
					got = append(got, fmt.Sprintf("%s:%d@%d", map[bool]string{true: "stall", false: "resume"}[e.Kind == ingest.AgentStalled], e.Agent.Index, (e.At-T0)/min))
				case ingest.AgentEnded:
					if e.Agent.Index == 1 {
						got = append(got, "end:1")
					}
				case ingest.RunStalled, ingest.RunResumed, ingest.RunFinished:
					got = append(got, e.Kind.String())
				case ingest.RunFinalized:
					if e.Run.AgentsStalled != 0 {
						t.Errorf("finalized with %d agents stalled", e.Run.AgentsStalled)
					}
					for _, a := range e.Run.Agents {
						if a.Stalled || a.Stalls != stalls[a.Index] {
							t.Errorf("agent %d: stalled %v, stalls %d; %d stall events", a.Index, a.Stalled, a.Stalls, stalls[a.Index])
						}
					}
				}
			}
			if s := strings.Join(got, " "); s != tc.want {
				t.Errorf("events\n got %q\nwant %q", s, tc.want)
			}
		})
	}
}
