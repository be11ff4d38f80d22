package main

import (
	"testing"
)

// TestAddedSeries checks that the added latency is taken run by run.
func TestAddedSeries(t *testing.T) {
	run := []latencyQuantiles{{p50: 10, p99: 100}, {p50: 20, p99: 50}}
	base := []latencyQuantiles{{p50: 4, p99: 120}, {p50: 5, p99: 10}}
	a50, a99 := addedSeries(run, base)
	if len(a50) != 2 || a50[0] != 6 || a50[1] != 15 || a99[0] != -20 || a99[1] != 40 {
		t.Fatalf("added p50 %v, p99 %v", a50, a99)
	}
}
