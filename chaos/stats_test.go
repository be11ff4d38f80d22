//go:build chaos

package chaos

import (
	"math"
	"testing"
	"time"
)

// beSlowerP is the one-sided p-value of an exact Mann–Whitney rank test
// that the case's runs are slower than the reference's stretched by
// 1/ratio: the probability, were the case no slower than that, of its runs
// outranking the stretched reference's as much as they do, or more. A
// small p is evidence that the case's throughput is under ratio times the
// reference's; a p that is not small is no evidence either way, which on
// a noisy machine is what a few runs of a case as fast as the reference
// give. Ties count half. The null distribution is counted exactly (the
// sample sizes here are a dozen at most).
func beSlowerP(ref, c []time.Duration, ratio float64) (u, p float64) {
	for _, x := range c {
		for _, y := range ref {
			stretched := float64(y) / ratio
			switch {
			case float64(x) > stretched:
				u++
			case float64(x) == stretched:
				u += 0.5
			}
		}
	}
	m, n := len(c), len(ref)
	// f[i][j][k]: the orderings of i case and j reference runs in which
	// k (case, reference) pairs have the case run slower. The slowest of
	// all i+j runs is either a case run, slower than all j references, or
	// a reference run, slower than none of the case runs.
	maxU := m * n
	f := make([][][]float64, m+1)
	for i := range f {
		f[i] = make([][]float64, n+1)
		for j := range f[i] {
			f[i][j] = make([]float64, maxU+1)
			if i == 0 || j == 0 {
				f[i][j][0] = 1
				continue
			}
			for k := 0; k <= i*j; k++ {
				v := f[i][j-1][k]
				if k >= j {
					v += f[i-1][j][k-j]
				}
				f[i][j][k] = v
			}
		}
	}
	var tail, total float64
	for k := 0; k <= maxU; k++ {
		total += f[m][n][k]
		if float64(k) >= u {
			tail += f[m][n][k]
		}
	}
	return u, tail / total
}

// The rank test against known values: exact p-values of small samples
// and the extremes.
func TestBackendSlowerP(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	for _, tc := range []struct {
		name   string
		ref, c []time.Duration
		ratio  float64
		wantU  float64
		wantP  float64
	}{
		// 3 and 3 runs: C(6,3) = 20 orderings, one with every case run
		// slowest (U = 9), one with U = 8.
		{name: "3+3 all slower", ref: ms(100, 101, 102), c: ms(200, 201, 202), ratio: 1, wantU: 9, wantP: 1.0 / 20},
		{name: "3+3 all but one pair", ref: ms(100, 101, 150), c: ms(140, 201, 202), ratio: 1, wantU: 8, wantP: 2.0 / 20},
		{name: "3+3 all faster", ref: ms(200, 201, 202), c: ms(100, 101, 102), ratio: 1, wantU: 0, wantP: 1},
		// 6 and 6: C(12,6) = 924.
		{name: "6+6 separated", ref: ms(100, 101, 102, 103, 104, 105), c: ms(120, 121, 122, 123, 124, 125), ratio: 1, wantU: 36, wantP: 1.0 / 924},
		// 10 % slower, stretched by 1/0.95: still slower than the bound.
		{name: "10% slower than 0.95 allows", ref: ms(1000, 1010, 1020), c: ms(1110, 1120, 1130), ratio: 0.95, wantU: 9, wantP: 1.0 / 20},
		// 3 % slower is within 0.95: the stretched reference is slower.
		{name: "3% slower is within the bound", ref: ms(1000, 1010, 1020), c: ms(1030, 1040, 1050), ratio: 0.95, wantU: 0, wantP: 1},
		{name: "ties count half", ref: ms(100), c: ms(100), ratio: 1, wantU: 0.5, wantP: 1.0 / 2},
		// The positive control, interleaved pairs with one pair in a slow
		// phase of the machine (both runs at about twice their time): the
		// slow reference run beats the 4 control runs outside the phase.
		// U >= 21 mirrors U <= 4: the partitions of 0..4 in a 5x5 box, 12
		// of C(10,5) = 252. Not yet a breach: confirming pairs run.
		{name: "5+5 one slow pair", ref: ms(800, 810, 820, 830, 1700), c: ms(1600, 1610, 1620, 1630, 3300), ratio: 0.95, wantU: 21, wantP: 12.0 / 252},
		// After 4 confirming pairs: U <= 8 in a 9x9 box, 67 of
		// C(18,9) = 48620, a breach.
		{name: "9+9 one slow pair", ref: ms(800, 810, 820, 830, 840, 850, 860, 870, 1700),
			c: ms(1600, 1610, 1620, 1630, 1640, 1650, 1660, 1670, 3300), ratio: 0.95, wantU: 73, wantP: 67.0 / 48620},
		// Two slow pairs: U <= 14, 456 of 48620 (counted by brute force
		// over the 48620 splits), just a breach. What a clean CI run
		// once had (6 rounds' reference runs against 5 control runs made
		// later, one of the former stalled: 19/462 = 0.041) is why the
		// control is interleaved.
		{name: "9+9 two slow pairs", ref: ms(800, 810, 820, 830, 840, 850, 860, 1700, 1710),
			c: ms(1600, 1610, 1620, 1630, 1640, 1650, 1660, 3300, 3310), ratio: 0.95, wantU: 67, wantP: 456.0 / 48620},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, p := beSlowerP(tc.ref, tc.c, tc.ratio)
			if u != tc.wantU || math.Abs(p-tc.wantP) > 1e-12 {
				t.Errorf("U, p = %v, %v; want %v, %v", u, p, tc.wantU, tc.wantP)
			}
		})
	}
}
