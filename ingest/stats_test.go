package ingest

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// The iterators yield every source, reason and violation kind once, in
// order, named as their String says, with what the getters return; and
// they stop when the loop does. Counters random, zeros included.
func TestStatsIterators(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 4))
	for round := range 20 {
		var s Stats
		n := func() int64 { return rng.Int64N(3) * rng.Int64N(1000) } // a third are 0
		sources := []tap.Source{tap.SourceStdout, tap.SourceStdin}
		for _, src := range sources {
			for range n() % 5 {
				s.countLine(src, n())
			}
			s.AddDropped(src, n())
			s.incomplete[src].Add(n())
		}
		for _, r := range streamjson.Reasons() {
			for range n() % 5 {
				s.reject(r, n())
			}
		}
		for _, v := range Violations() {
			s.violations[v].Add(n())
		}

		var names []string
		for name, c := range s.PerSource() {
			src := sources[len(names)]
			names = append(names, name)
			want := SourceCounts{Lines: s.Lines(src), Bytes: s.Bytes(src), Incomplete: s.Incomplete(src), Dropped: s.Dropped(src)}
			if name != src.String() || c != want {
				t.Fatalf("round %d: PerSource yields %s %+v, want %s %+v", round, name, c, src, want)
			}
		}
		if len(names) != len(sources) {
			t.Fatalf("PerSource yields %v", names)
		}
		names = names[:0]
		for name, c := range s.PerReason() {
			r := streamjson.Reasons()[len(names)]
			names = append(names, name)
			if want := (ReasonCounts{Lines: s.Rejected(r), Bytes: s.RejectedBytes(r)}); name != r.String() || c != want {
				t.Fatalf("round %d: PerReason yields %s %+v, want %s %+v", round, name, c, r, want)
			}
		}
		if len(names) != len(streamjson.Reasons()) {
			t.Fatalf("PerReason yields %v", names)
		}
		names = names[:0]
		for name, c := range s.PerViolation() {
			v := Violations()[len(names)]
			names = append(names, name)
			if name != v.String() || c != s.Violations(v) {
				t.Fatalf("round %d: PerViolation yields %s %d, want %s %d", round, name, c, v, s.Violations(v))
			}
		}
		if len(names) != len(Violations()) || len(names) != len(slices.Compact(slices.Sorted(slices.Values(names)))) {
			t.Fatalf("PerViolation yields %v", names)
		}
	}
	var s Stats
	for _, seq := range []func() int{
		func() (k int) {
			for range s.PerSource() {
				k++
				break
			}
			return
		},
		func() (k int) {
			for range s.PerReason() {
				k++
				break
			}
			return
		},
		func() (k int) {
			for range s.PerViolation() {
				k++
				break
			}
			return
		},
	} {
		if k := seq(); k != 1 {
			t.Errorf("a loop that breaks ran %d times", k)
		}
	}
}
