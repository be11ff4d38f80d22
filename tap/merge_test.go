package tap

import (
	"context"
	"slices"
	"testing"
	"time"
)

// mergeLate is how long a test gives Merge to deliver a chunk it must
// hold back: one it would wrongly deliver comes within microseconds.
const mergeLate = 20 * time.Millisecond

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
// wrapper, stdin first on a tie; stdout bytes announced by Begin hold back
// the stdin chunks that passed after them until they are queued, dropped,
// or cancelled, and no longer.
func TestMergeOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		// steps run before the merge starts; held runs once the merge has
		// had mergeLate to deliver: what it delivered by then is "early".
		steps func(out, in *Tap)
		held  func(out, in *Tap)
		early []string
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
			// tee passed the event on before it was read for the tap, and
			// the consumer's answer was tapped first: the event still
			// comes first.
			name:  "begun stdout holds back a later answer",
			steps: func(out, in *Tap) { out.Begin(); in.Write([]byte("answer")) },
			held:  func(out, in *Tap) { out.Write([]byte("event")) },
			want:  []string{"out:event", "in:answer"},
		},
		{
			name:  "begun and committed in a lent buffer",
			steps: func(out, in *Tap) { out.Begin(); in.Write([]byte("answer")) },
			held: func(out, in *Tap) {
				b := out.Lend()
				n := copy(b, slices.Repeat([]byte("e"), len(b)))
				out.Commit(b[:n])
			},
			want: []string{"out:" + string(slices.Repeat([]byte("e"), tapClasses[len(tapClasses)-1])), "in:answer"},
		},
		{
			name:  "a cancelled Begin holds nothing",
			steps: func(out, in *Tap) { out.Begin(); in.Write([]byte("answer")) },
			held:  func(out, in *Tap) { out.Cancel() },
			want:  []string{"in:answer"},
		},
		{
			name:  "stdin that passed before the Begin is not held",
			steps: func(out, in *Tap) { in.Write([]byte("request")); out.Begin() },
			early: []string{"in:request"},
			held:  func(out, in *Tap) { out.Write([]byte("event")) },
			want:  []string{"in:request", "out:event"},
		},
		{
			name:  "closing the stdout tap releases what it held",
			steps: func(out, in *Tap) { out.Begin(); in.Write([]byte("answer")) },
			held:  func(out, in *Tap) { out.Close() },
			want:  []string{"in:answer"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, in := NewTap(1<<20), NewTap(1<<20)
			tc.steps(out, in)
			got := mergeRun(t, out, in)
			var all []string
			if tc.held != nil {
				var early []string
				for end := time.After(mergeLate); ; {
					select {
					case s := <-got:
						early = append(early, s)
						continue
					case <-end:
					}
					break
				}
				if !slices.Equal(early, tc.early) {
					t.Fatalf("delivered before the held bytes came: %q, want %q", early, tc.early)
				}
				all = early
				tc.held(out, in)
			}
			out.Close()
			in.Close()
			for s := range got {
				all = append(all, s)
			}
			if !slices.Equal(all, tc.want) {
				t.Errorf("order %q, want %q", all, tc.want)
			}
		})
	}
}

// Begin's bytes dropped for a full queue release the stdin chunks held
// back for them: the merge must not wait for bytes that will never come.
func TestMergeBegunThenDropped(t *testing.T) {
	out, in := NewTap(tapClasses[0]), NewTap(1<<20)
	out.Write(make([]byte, tapClasses[0])) // fills the queue
	out.Begin()
	in.Write([]byte("answer"))
	out.Write([]byte("event")) // dropped: the queue is full
	got := mergeRun(t, out, in)
	first, second := <-got, <-got
	if first != "out:"+string(make([]byte, tapClasses[0])) || second != "in:answer" {
		t.Errorf("got %q then %q", first, second)
	}
	if _, dropped, _ := out.Stats(); dropped != int64(len("event")) {
		t.Errorf("dropped %d bytes, want %d", dropped, len("event"))
	}
	out.Close()
	in.Close()
	for s := range got {
		t.Errorf("then %q", s)
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
