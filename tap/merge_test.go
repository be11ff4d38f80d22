package tap

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// mergeRun runs Merge in the background and sends what it delivers, as
// "out:..." or "in:...", on the returned channel, closed at the end.
func mergeRun(t *testing.T, out, in *Tap) <-chan string {
	t.Helper()
	got := make(chan string, 64)
	go func() {
		defer close(got)
		err := Merge(context.Background(), out, in, MergeOptions{Chunk: func(src Source, c Chunk) {
			prefix := "out:"
			tap := out
			if src == SourceStdin {
				prefix, tap = "in:", in
			}
			got <- prefix + string(c.Data)
			tap.Release(c)
		}})
		if err != nil {
			t.Error(err)
		}
	}()
	return got
}

// Merge delivers the chunks of both taps in the order they passed the
// wrapper, stdin first on a tie.
func TestMergeOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps func(out, in *Tap)
		want  []string
	}{
		{
			name:  "in order of passage",
			steps: func(out, in *Tap) { out.Write([]byte("event")); in.Write([]byte("answer")) },
			want:  []string{"out:event", "in:answer"},
		},
		{
			name:  "a request before its effect",
			steps: func(out, in *Tap) { in.Write([]byte("interrupt")); out.Write([]byte("stopped")) },
			want:  []string{"in:interrupt", "out:stopped"},
		},
		{
			name: "interleaved",
			steps: func(out, in *Tap) {
				out.Write([]byte("e1"))
				in.Write([]byte("a1"))
				out.Write([]byte("e2"))
				out.Write([]byte("e3"))
				in.Write([]byte("a3"))
			},
			want: []string{"out:e1", "in:a1", "out:e2", "out:e3", "in:a3"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, in := NewTap(1<<20), NewTap(1<<20)
			tc.steps(out, in)
			out.Close()
			in.Close()
			var all []string
			for s := range mergeRun(t, out, in) {
				all = append(all, s)
			}
			if !slices.Equal(all, tc.want) {
				t.Errorf("order %q, want %q", all, tc.want)
			}
		})
	}
}

// The order of the taps holds whatever their wall anchors say: here the
// in tap's is an hour ahead (the wall clock stepped back an hour after it
// was anchored), so by At the interrupt would come after the notification
// it caused.
func TestMergeOrdersByMonotonicClock(t *testing.T) {
	out, in := NewTap(1<<20), NewTap(1<<20)
	in.baseNs += int64(time.Hour)
	out.Write([]byte("started"))
	in.Write([]byte("interrupt"))
	out.Write([]byte("stopped"))
	out.Close()
	in.Close()
	var got []string
	for s := range mergeRun(t, out, in) {
		got = append(got, s)
	}
	if want := []string{"out:started", "in:interrupt", "out:stopped"}; !slices.Equal(got, want) {
		t.Fatalf("merged %q, want %q", got, want)
	}
}

// Abandon after Close (run's exit giving up on a consumer that is behind):
// Merge hands over no chunk it had not taken yet, counts each as dropped,
// still calls End for both taps, and marks the tail missing. Every byte
// written is delivered or dropped, never both; the taken chunks come first.
func TestMergeAbandon(t *testing.T) {
	for _, eol := range []bool{true, false} {
		out, in := NewTap(1<<20), NewTap(1<<20)
		var written int64
		for i := range 100 {
			line := []byte(fmt.Sprintf("line %d\n", i))
			if i == 99 && !eol {
				line = line[:len(line)-1]
			}
			out.Write(line)
			in.Write(line)
			written += int64(len(line))
		}
		out.Close()
		in.Close()
		var delivered [NumSources]int64
		var ended [NumSources]bool
		taken := 0
		err := Merge(context.Background(), out, in, MergeOptions{
			Chunk: func(s Source, c Chunk) {
				delivered[s] += int64(len(c.Data))
				if taken++; taken == 10 {
					out.Abandon() // the exit gives up while the consumer works
					in.Abandon()
				}
				[NumSources]*Tap{out, in}[s].Release(c)
			},
			End: func(s Source) { ended[s] = true },
		})
		if err != nil {
			t.Fatal(err)
		}
		for s, tp := range []*Tap{out, in} {
			bytesIn, dropped, _ := tp.Stats()
			if bytesIn != written || delivered[s]+dropped != written || dropped == 0 || !ended[s] {
				t.Errorf("eol %v, %s: written %d, delivered %d + dropped %d, ended %v", eol, Source(s), written, delivered[s], dropped, ended[s])
			}
			if !tp.GapPending() || tp.GapPendingAtLineEnd() != eol {
				t.Errorf("eol %v, %s: gap pending %v at line end %v", eol, Source(s), tp.GapPending(), tp.GapPendingAtLineEnd())
			}
		}
	}
}
