package main

import (
	"syscall"
	"testing"
	"time"
)

// demo --live keeps workflows coming with /metrics up: two scrapes see the
// runs counter grow, and SIGINT ends it cleanly (exit 0) with every outcome
// of the scenarios counted.
func TestDemoLiveCountersGrow(t *testing.T) {
	addr := freeAddr(t)
	s := startBin(t, addr, "demo", "--live", "--speed", "0.02", "--pace", "10ms", "--web.listen-address", addr)
	sum := func(m map[string]float64) (n float64) {
		for _, v := range m {
			n += v
		}
		return n
	}
	// runs waits until the runs counter, by status, satisfies ok.
	runs := func(ok func(map[string]float64) bool) map[string]float64 {
		t.Helper()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(30 * time.Second)
		for {
			m, err := s.metric("cbc_workflow_runs_total", "status")
			if err == nil && ok(m) {
				return m
			}
			select {
			case <-tick.C:
			case <-deadline:
				t.Fatalf("cbc_workflow_runs_total stayed at %v (last error %v)", m, err)
			case <-s.exited:
				t.Fatalf("demo --live exited by itself (%v)", s.cmd.ProcessState)
			}
		}
	}
	first := runs(func(m map[string]float64) bool { return sum(m) > 0 })
	// Then more, and every outcome the scenarios make: completed (also
	// cached, mixed), failed, stopped (interrupted by the driver).
	runs(func(m map[string]float64) bool {
		return sum(m) > sum(first) && m["completed"] > 0 && m["failed"] > 0 && m["stopped"] > 0
	})
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("demo --live did not stop after SIGINT")
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit %d after SIGINT, want 0", code)
	}
}
