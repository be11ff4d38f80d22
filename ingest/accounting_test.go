package ingest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/tap"
)

// TestByteAccounting (issue 29.3) is a property over generated streams:
// lines of random sizes (empty, ordinary, lines of interest, lines over the
// cap, of interest or not) on both sources go through real taps with small
// queues to a consumer that stalls at random, so that the taps drop; some
// tries give up what is still queued at the end (Tap.Abandon, as run's exit
// does). Per source, every byte that passed the tap is accounted for once:
// framed into a line (Bytes), read as a piece of a line a drop cut
// (Incomplete), or dropped (Dropped).
func TestByteAccounting(t *testing.T) {
	const maxLine = 2048
	for i := range 300 {
		rng := rand.New(rand.NewPCG(uint64(i), 29))
		p := NewPipeline(PipelineOptions{MaxLine: maxLine, Live: true})
		taps := [numSources]*tap.Tap{tap.NewTap(512 + rng.IntN(16<<10)), tap.NewTap(512 + rng.IntN(16<<10))}
		streams := [numSources][]byte{genStream(rng, maxLine), genStream(rng, maxLine)}
		abandon := rng.IntN(4) == 0
		seeds := [3]uint64{rng.Uint64(), rng.Uint64(), rng.Uint64()}
		done := make(chan struct{})
		go func() {
			defer close(done)
			crng := rand.New(rand.NewPCG(seeds[0], 1))
			tap.Merge(context.Background(), taps[0], taps[1], tap.MergeOptions{
				Chunk: func(s tap.Source, c tap.Chunk) {
					if crng.IntN(8) == 0 {
						// A consumer stall: makes time pass, synchronises nothing.
						time.Sleep(time.Duration(crng.IntN(300)) * time.Microsecond)
					}
					p.chunk(s, taps[s], c)
				},
				End: func(s tap.Source) { p.endTap(s, taps[s]) },
			})
			p.Close()
		}()
		for src := range numSources {
			wrng := rand.New(rand.NewPCG(seeds[1+src], 2))
			for b := streams[src]; len(b) > 0; {
				k := min(len(b), 1+wrng.IntN(6000))
				taps[src].Write(b[:k])
				b = b[k:]
			}
		}
		taps[0].Close()
		taps[1].Close()
		if abandon {
			taps[0].Abandon()
			taps[1].Abandon()
		}
		<-done
		st := p.Stats()
		for src := range numSources {
			s := tap.Source(src)
			in, dropped, _ := taps[src].Stats()
			if in != int64(len(streams[src])) {
				t.Fatalf("try %d %s: tapped %d of %d bytes", i, s, in, len(streams[src]))
			}
			got := st.Bytes(s) + st.Incomplete(s) + st.Dropped(s)
			if got != in || st.Dropped(s) != dropped {
				t.Fatalf("try %d %s (abandon %v): %d bytes passed, accounted %d = framed %d + incomplete %d + dropped %d (tap dropped %d)",
					i, s, abandon, in, got, st.Bytes(s), st.Incomplete(s), st.Dropped(s), dropped)
			}
		}
	}
}

// genStream makes a stream of random lines, some of interest, some over
// maxLine; sometimes without a final newline.
func genStream(rng *rand.Rand, maxLine int) []byte {
	var b bytes.Buffer
	for n := rng.IntN(200); n > 0; n-- {
		pad := bytes.Repeat([]byte("x"), []int{0, 20, 500, maxLine, 10 * maxLine}[rng.IntN(5)]+rng.IntN(100))
		switch rng.IntN(4) {
		case 0:
			fmt.Fprintf(&b, `{"type":"system","subtype":"task_progress","task_id":"t%d","description":"%s"}`, rng.IntN(5), pad)
		case 1:
			fmt.Fprintf(&b, `{"type":"assistant","message":{"content":"%s"}}`, pad)
		case 2:
			fmt.Fprintf(&b, `{not json %s`, pad)
		}
		b.WriteByte('\n')
	}
	if rng.IntN(3) == 0 {
		b.WriteString(`{"type":"result"`)
	}
	return b.Bytes()
}
