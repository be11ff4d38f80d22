package ingest_test

import (
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// TestStalledRuns: a run silent for StallAfter is stalled once per
// silence, resumed by its next event or its end; finished runs, plain
// tasks and other streams' silence never stall; 0 turns it off.
func TestStalledRuns(t *testing.T) {
	const after = 10 * time.Minute
	min := int64(60_000)
	cases := []struct {
		name  string
		after time.Duration
		drive func(r *clockRig)
		want  string // the stall kinds, in order
		stall int    // the run's Stalls at its end
	}{
		{"silent, then an event, silent again, then the end", after, func(r *clockRig) {
			r.at(T0, lnStarted("w1", "r1", "local_workflow", "wf"))
			r.tr.Advance(T0 + 10*min - 1)
			r.tr.Advance(T0 + 10*min)
			r.tr.Advance(T0 + 15*min)
			r.at(T0+16*min, lnProgress("w1", agentRow(1, "start", "agentId", "A", "startedAt", T0+16*min)))
			r.tr.Advance(T0 + 26*min)
			r.at(T0+27*min, lnNotify("w1", "completed"))
			r.tr.Close(T0 + 28*min)
		}, "run_stalled run_resumed run_stalled run_resumed", 2},
		{"finished runs do not stall", after, func(r *clockRig) {
			r.at(T0, lnStarted("w1", "r1", "local_workflow", "wf"))
			r.at(T0+1, lnNotify("w1", "completed"))
			r.tr.Advance(T0 + 60*min)
			r.tr.Close(T0 + 61*min)
		}, "", 0},
		{"abandoned while stalled: resumed at its end", after, func(r *clockRig) {
			r.at(T0, lnStarted("w1", "r1", "local_workflow", "wf"))
			r.tr.Advance(T0 + 11*min)
			r.tr.Close(T0 + 12*min)
		}, "run_stalled run_resumed", 1},
		{"plain tasks do not stall", after, func(r *clockRig) {
			r.at(T0, lnStarted("t1", "r1", "local_bash", ""))
			r.tr.Advance(T0 + 60*min)
			r.tr.Close(T0 + 61*min)
		}, "", 0},
		{"off", 0, func(r *clockRig) {
			r.at(T0, lnStarted("w1", "r1", "local_workflow", "wf"))
			r.tr.Advance(T0 + 600*min)
			r.tr.Close(T0 + 601*min)
		}, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newClockRigWith(t, ingest.TrackerOptions{Grace: time.Second, StallAfter: tc.after})
			tc.drive(r)
			var kinds string
			stalls := 0
			for _, e := range r.rec.Events {
				switch e.Kind {
				case ingest.RunStalled, ingest.RunResumed:
					if kinds != "" {
						kinds += " "
					}
					kinds += e.Kind.String()
				case ingest.RunFinalized:
					stalls = e.Run.Stalls
					if e.Run.Stalled {
						t.Error("a finalized run is still stalled")
					}
				}
			}
			if kinds != tc.want || stalls != tc.stall {
				t.Errorf("stall events %q, stalls %d; want %q, %d", kinds, stalls, tc.want, tc.stall)
			}
		})
	}
}
