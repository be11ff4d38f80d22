package fifo

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMapForgetsOldestFirst: the bound holds, the key put longest ago goes
// first, a key put again is young again, and what is forgotten is counted.
func TestMapForgetsOldestFirst(t *testing.T) {
	m := New[string, int](2)
	if n := m.Put("a", 1) + m.Put("b", 2); n != 0 {
		t.Fatalf("forgot %d within the bound", n)
	}
	m.Put("a", 3) // a is now younger than b
	if n := m.Put("c", 4); n != 1 {
		t.Fatalf("forgot %d, want 1", n)
	}
	if _, ok := m.Get("b"); ok {
		t.Error("b, the oldest, is still held")
	}
	if v, ok := m.Get("a"); !ok || v != 3 {
		t.Errorf("a = %v, %v; want 3", v, ok)
	}
	if got := m.Values(); !slices.Equal(got, []int{3, 4}) || m.Len() != 2 {
		t.Errorf("values %v, len %d; want [3 4], 2", got, m.Len())
	}
}

// TestMapModel compares the Map with a plain slice model on random puts:
// the same keys, values and order, and the stale slots stay bounded.
func TestMapModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, max := range []int{1, 3, 16} {
		m := New[int, int](max)
		var model []int // keys, oldest first
		val := map[int]int{}
		forgotten := 0
		for i := range 5000 {
			k := r.IntN(2 * max)
			model = slices.DeleteFunc(model, func(x int) bool { return x == k })
			model = append(model, k)
			val[k] = i
			want := 0
			for len(model) > max {
				delete(val, model[0])
				model = model[1:]
				want++
			}
			forgotten += want
			if got := m.Put(k, i); got != want {
				t.Fatalf("max %d put %d: forgot %d, want %d", max, k, got, want)
			}
			var wantVals []int
			for _, x := range model {
				wantVals = append(wantVals, val[x])
			}
			if got := m.Values(); !slices.Equal(got, wantVals) {
				t.Fatalf("max %d: values %v, want %v", max, got, wantVals)
			}
			if len(m.order) > 2*max+65 {
				t.Fatalf("max %d: %d slots held", max, len(m.order))
			}
		}
		if forgotten == 0 {
			t.Fatalf("max %d: nothing forgotten, the test is empty", max)
		}
	}
}
