package ingest_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/ingesttest"
	"github.com/cbc-otel/cbc-otel/tap"
)

func call(agent string, usd float64, in, out int64) ingest.ModelCall {
	return ingest.ModelCall{AgentID: agent, SessionID: "S1", Cost: cost.Model{
		Model: "claude-sonnet-4-5", CostUSD: usd, Tokens: cost.Tokens{in, out, 0, 0}}}
}

func calls(rec *ingesttest.Recorder) []ingest.ModelCall {
	var out []ingest.ModelCall
	for _, e := range rec.Events {
		if e.Kind == ingest.ModelCallSeen {
			out = append(out, e.Call)
		}
	}
	return out
}

func attributedRig(t *testing.T) *clockRig {
	return newClockRigWith(t, ingest.TrackerOptions{Grace: 5 * time.Second, AttributeCalls: true})
}

// TestCallAttribution covers every way a call finds (or misses) its agent.
func TestCallAttribution(t *testing.T) {
	running := func(idx int, id string) jobj { return agentRow(idx, "start", "agentId", id, "startedAt", T0+10) }
	cases := []struct {
		name  string
		drive func(r *clockRig)
		want  []ingest.CallScope
		check func(t *testing.T, r *clockRig)
	}{
		{"main conversation", func(r *clockRig) {
			r.tr.HandleCall(call("", 0.01, 100, 20), T0)
		}, []ingest.CallScope{ingest.CallMain}, nil},
		{"known agent", func(r *clockRig) {
			r.at(T0, lnStarted("w1", "r1", "local_workflow", "review"))
			r.at(T0+1, lnProgress("w1", running(1, "A1"), running(2, "A2")))
			r.tr.HandleCall(call("A1", 0.01, 100, 20), T0+2)
			r.tr.HandleCall(call("A1", 0.02, 200, 40), T0+3)
			r.tr.HandleCall(call("A2", 0.5, 1, 1), T0+4)
			r.at(T0+5, lnNotify("w1", "completed"))
			r.tr.Close(T0 + 6)
		}, []ingest.CallScope{ingest.CallWorkflow, ingest.CallWorkflow, ingest.CallWorkflow}, func(t *testing.T, r *clockRig) {
			run := finalRun(t, r.rec, "w1", "r1")
			if a := agentOf(t, run, 1); a.Cost.Calls != 2 || a.Cost.Tokens[cost.TokensInput] != 300 || !near(a.Cost.CostUSD, 0.03) {
				t.Errorf("agent 1 cost = %+v", a.Cost)
			}
			if run.Cost.Calls != 3 || !near(run.Cost.CostUSD, 0.53) || run.Cost.Tokens[cost.TokensOutput] != 61 {
				t.Errorf("run cost = %+v", run.Cost)
			}
			for _, c := range calls(r.rec) {
				if c.Workflow != "review" || c.TaskID != "w1" || c.RunID != "r1" {
					t.Errorf("call attributed to %q %s/%s", c.Workflow, c.TaskID, c.RunID)
				}
			}
		}},
		{"call before the snapshot names its agent", func(r *clockRig) {
			r.at(T0, lnStarted("w1", "r1", "local_workflow", "review"))
			r.tr.HandleCall(call("A1", 0.01, 100, 20), T0+1)
			r.at(T0+2000, lnProgress("w1", running(1, "A1")))
		}, []ingest.CallScope{ingest.CallWorkflow}, func(t *testing.T, r *clockRig) {
			if _, _, un := r.stats.Calls(); un != 0 {
				t.Errorf("unmatched = %d", un)
			}
		}},
		{"never named: unmatched after the grace window", func(r *clockRig) {
			r.tr.HandleCall(call("AX", 0.01, 100, 20), T0)
			r.tr.Advance(T0 + 4999)
			if n := len(calls(r.rec)); n != 0 {
				r.t.Errorf("emitted %d calls inside the hold", n)
			}
			r.tr.Advance(T0 + 5000)
		}, []ingest.CallScope{ingest.CallUnmatched}, nil},
		{"never named: unmatched at the stream's end", func(r *clockRig) {
			r.tr.HandleCall(call("AX", 0.01, 100, 20), T0)
			r.tr.Close(T0 + 1)
		}, []ingest.CallScope{ingest.CallUnmatched}, nil},
		{"after the run is final: counted for its workflow, late", func(r *clockRig) {
			r.at(T0, lnStarted("w1", "r1", "local_workflow", "review"))
			r.at(T0+1, lnProgress("w1", running(1, "A1")))
			r.at(T0+2, lnNotify("w1", "completed"))
			r.tr.Advance(T0 + 10_000)
			r.tr.HandleCall(call("A1", 0.01, 100, 20), T0+10_001)
		}, []ingest.CallScope{ingest.CallWorkflow}, func(t *testing.T, r *clockRig) {
			c := calls(r.rec)[0]
			if c.Workflow != "review" || c.AgentIndex != 1 {
				t.Errorf("late call = %+v", c)
			}
			if _, late, _ := r.stats.Calls(); late != 1 {
				t.Errorf("late = %d", late)
			}
			for _, e := range r.rec.Events {
				if e.Kind == ingest.ModelCallSeen && e.Run.TaskID != "" {
					t.Errorf("a late call carries its finalized run")
				}
			}
		}},
		{"a cached agent keeps the computing run's id and does not take it over", func(r *clockRig) {
			r.at(T0, lnStarted("w1", "r1", "local_workflow", "first"))
			r.at(T0+1, lnProgress("w1", running(1, "A1")))
			r.at(T0+2, lnStarted("w2", "r2", "local_workflow", "resumed"))
			r.at(T0+3, lnProgress("w2", agentRow(1, "done", "agentId", "A1", "cached", true, "startedAt", T0+3)))
			r.tr.HandleCall(call("A1", 0.01, 100, 20), T0+4)
		}, []ingest.CallScope{ingest.CallWorkflow}, func(t *testing.T, r *clockRig) {
			if c := calls(r.rec)[0]; c.TaskID != "w1" {
				t.Errorf("call went to %s, want the run that computed A1", c.TaskID)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := attributedRig(t)
			tc.drive(r)
			got := calls(r.rec)
			if len(got) != len(tc.want) {
				t.Fatalf("emitted %d calls, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, c := range got {
				if c.Scope != tc.want[i] {
					t.Errorf("call %d scope %v, want %v", i, c.Scope, tc.want[i])
				}
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

// TestCallsWithoutAttribution: with AttributeCalls off no index is kept and
// an agent's call is unmatched at once, never held.
func TestCallsWithoutAttribution(t *testing.T) {
	r := newClockRigWith(t, ingest.TrackerOptions{Grace: 5 * time.Second})
	r.at(T0, lnStarted("w1", "r1", "local_workflow", "review"))
	r.at(T0+1, lnProgress("w1", agentRow(1, "start", "agentId", "A1", "startedAt", T0)))
	r.tr.HandleCall(call("A1", 0.01, 100, 20), T0+2)
	if got := calls(r.rec); len(got) != 1 || got[0].Scope != ingest.CallUnmatched {
		t.Fatalf("calls = %+v", got)
	}
}

// TestHeldCallsAreBounded: a flood of calls for agents never named holds at
// most the cap; the rest are unmatched at once and the overflow is counted.
func TestHeldCallsAreBounded(t *testing.T) {
	r := attributedRig(t)
	const n = 5000
	for i := range n {
		r.tr.HandleCall(call("ghost", 0, 1, 0), T0+int64(i%3))
	}
	early := len(calls(r.rec))
	if early == 0 || early >= n {
		t.Fatalf("%d of %d calls emitted before the hold ended; want the overflow only", early, n)
	}
	if v := r.stats.Violations(ingest.ViolationOverCapacity); v != int64(early) {
		t.Errorf("over_capacity = %d, want %d", v, early)
	}
	r.tr.Close(T0 + 10)
	if got := len(calls(r.rec)); got != n {
		t.Errorf("%d calls emitted in all, want %d", got, n)
	}
}

// TestSubmitConcurrentWithStream is the property that matters for cost: calls
// submitted from other goroutines while the stream flows are each emitted
// exactly once, none lost, none doubled, whatever the interleaving, and the
// run's cost is the sum of its agents'.
func TestSubmitConcurrentWithStream(t *testing.T) {
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 1))
		rec := new(ingesttest.Recorder)
		cq := ingest.NewCallQueue()
		p := ingest.NewPipeline(ingest.PipelineOptions{Calls: cq, Live: true,
			Tracker: ingest.TrackerOptions{Grace: time.Hour, Sinks: []ingest.Sink{rec}}})
		out := tap.NewTap(1 << 20)
		ctx := context.Background()
		done := make(chan struct{})
		go func() { p.Consume(ctx, out, nil, time.Millisecond); close(done) }()

		const agents, perAgent = 6, 50
		var wg sync.WaitGroup
		var want float64
		for a := range agents {
			id := string(rune('A' + a))
			for range perAgent {
				want += 0.001
			}
			wg.Go(func() {
				for range perAgent {
					if !cq.Submit(call(id, 0.001, 10, 2)) {
						t.Error("submit dropped a call under the queue bound")
					}
				}
			})
		}
		rows := make([]jobj, agents)
		for a := range agents {
			rows[a] = agentRow(a+1, "start", "agentId", string(rune('A'+a)), "startedAt", T0)
		}
		lines := encodeLines(lnStarted("w1", "r1", "local_workflow", "wf"), lnProgress("w1", rows...))
		for len(lines) > 0 {
			n := min(len(lines), 1+rng.IntN(64))
			out.Write(lines[:n])
			lines = lines[n:]
		}
		out.Close()
		wg.Wait()
		cq.EndCalls()
		<-done

		var got float64
		var n int
		for _, c := range calls(rec) {
			n++
			got += c.Cost.CostUSD
		}
		if n != agents*perAgent || !near(got, want) {
			t.Fatalf("seed %d: %d calls, $%v; want %d, $%v", seed, n, got, agents*perAgent, want)
		}
	}
}

// TestCallsOfRunsSharingAgentIDs: agentIds are content-addressed, so a
// workflow run twice reuses them. A call naming its Workflow call goes to
// that run's agent, even after the next run named the same id; a call that
// names none goes to the latest.
func TestCallsOfRunsSharingAgentIDs(t *testing.T) {
	r := attributedRig(t)
	running := func(id string) jobj { return agentRow(1, "start", "agentId", id, "startedAt", T0+10) }
	r.at(T0, lnStarted("w1", "r1", "local_workflow", "review")) // tool_use_id toolu-w1
	r.at(T0+1, lnProgress("w1", running("A1")))
	r.at(T0+2, lnStarted("w2", "r2", "local_workflow", "review"))
	r.at(T0+3, lnProgress("w2", running("A1")))
	first := call("A1", 0.01, 1, 1)
	first.ToolUseID = "toolu-w1"
	r.tr.HandleCall(first, T0+4)
	r.tr.HandleCall(call("A1", 0.02, 1, 1), T0+5)
	unknownRun := call("A1", 0.04, 1, 1)
	unknownRun.ToolUseID = "toolu-w9" // a run the stream has not started yet: held
	r.tr.HandleCall(unknownRun, T0+6)
	got := calls(r.rec)
	if len(got) != 2 || got[0].TaskID != "w1" || got[1].TaskID != "w2" {
		t.Fatalf("calls went to %+v; want w1 (named by its Workflow call), then w2 (the latest)", got)
	}
	r.tr.Close(T0 + 7)
	if got := calls(r.rec); len(got) != 3 || got[2].Scope != ingest.CallUnmatched {
		t.Errorf("the call of an unknown run: %+v", got[len(got)-1])
	}
}
