package main

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestRoundTrip checks that every probe line sent through cat comes back
// and is measured once, the latencies sorted and not negative.
func TestRoundTrip(t *testing.T) {
	if _, err := exec.LookPath("cat"); err != nil {
		t.Skip("no cat:", err)
	}
	lats, err := latencyRoundTrip(context.Background(), []string{"cat"}, 1000, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(lats) != 50 || !slices.IsSorted(lats) || lats[0] < 0 {
		t.Fatalf("%d latencies (want 50, sorted, ≥ 0): %v", len(lats), lats)
	}
}
