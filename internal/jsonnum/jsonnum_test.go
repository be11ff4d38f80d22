package jsonnum

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAppendFloatAsEncodingJSON: every finite float64 is written as
// encoding/json writes it: edge values, and a million random bit patterns.
func TestAppendFloatAsEncodingJSON(t *testing.T) {
	check := func(f float64) {
		t.Helper()
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		if got := AppendFloat(nil, f); string(got) != string(want) {
			t.Fatalf("AppendFloat(%v) = %s, encoding/json %s", f, got, want)
		}
	}
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1e-6, 9.99e-7, 1e-7, 1e20, 1e21, 123456789e13,
		math.MaxFloat64, math.SmallestNonzeroFloat64, -math.MaxFloat64, 0.0042, 12.5} {
		check(f)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		if f := math.Float64frombits(r.Uint64()); !math.IsNaN(f) && !math.IsInf(f, 0) {
			check(f)
		}
	}
}
