package supervise

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/tap"
)

// orderLate is how long a checkingTap gives the consumer to show that it
// already has bytes being tapped: a pump that passed them on first lets the
// consumer read them within microseconds, one that taps first never.
const orderLate = 10 * time.Millisecond

// checkingTap forwards to a tap.Tap and counts the taps that came after
// the consumer had the bytes (a Write of bytes it already read), which
// would stamp an answer of the consumer on stdin before the event it
// answers.
type checkingTap struct {
	tap    *tap.Tap
	read   *atomic.Int64 // stdout bytes the consumer has read
	tapped int64         // stdout bytes tapped so far; the pump's goroutine only
	late   atomic.Int64
}

// check waits up to orderLate for the consumer to read past what was tapped
// so far, and counts it if it does.
func (c *checkingTap) check() {
	for end := time.Now().Add(orderLate); c.read.Load() <= c.tapped && time.Now().Before(end); {
		runtime.Gosched()
	}
	if c.read.Load() > c.tapped {
		c.late.Add(1)
	}
}

func (c *checkingTap) Write(p []byte) (int, error) {
	c.check()
	c.tapped += int64(len(p))
	return c.tap.Write(p)
}

// countingReader counts what it reads into n.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// writerOnly hides a pipe's *os.File from the pump.
type writerOnly struct{ io.Writer }

// A consumer that answers every line of the child's stdout on stdin at
// once: the taps must see each line before the answer it caused, whether
// Stdout is a pipe or another writer. The child is cat, so the consumer's
// answer k is the child's line k+1; Merge, fed by the taps, must then
// never deliver an answer before all of the line it answers. The lines are
// long (64 KiB): each takes more than one read.
func TestTapStampsBeforeConsumerAnswers(t *testing.T) {
	const lines, lineLen = 12, 64 << 10
	for _, tc := range []struct {
		name    string
		pipeOut bool // Stdout is the pipe itself, else a plain writer
	}{
		{name: "written to a writer"},
		{name: "written to a pipe", pipeOut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := helper(t, "cat")
			inR, inW := pipe(t)
			outR, outW := pipe(t)
			cfg.Stdin = inR
			cfg.Stdout = writerOnly{outW}
			if tc.pipeOut {
				cfg.Stdout = outW
			}
			var read atomic.Int64
			outTap, inTap := tap.NewTap(16<<20), tap.NewTap(16<<20)
			ct := &checkingTap{tap: outTap, read: &read}
			cfg.StdoutTap = ct
			cfg.StdinTap = inTap
			done := make(chan Result, 1)
			go func() {
				res, _ := Run(context.Background(), cfg)
				done <- res
			}()

			line := func(k int) []byte {
				b := slices.Repeat([]byte{byte('a' + k%26)}, lineLen)
				b[lineLen-1] = '\n'
				return b
			}
			consumer := countingReader{r: outR, n: &read}
			got := make([]byte, lineLen)
			inW.Write(line(0))
			for k := range lines {
				outR.SetReadDeadline(time.Now().Add(20 * time.Second))
				if _, err := io.ReadFull(consumer, got); err != nil {
					t.Fatalf("line %d: %v", k, err)
				}
				if k+1 < lines {
					inW.Write(line(k + 1)) // the answer, at once
				}
			}
			inW.Close()
			if res := <-done; res.ExitCode != 0 {
				t.Fatalf("Run = %+v", res)
			}
			outTap.Close()
			inTap.Close()

			if n := ct.late.Load(); n > 0 {
				t.Errorf("%d taps came after the consumer had read the bytes", n)
			}
			// Replay the taps as the pipeline does: no answer (stdin line
			// k+1) may come before the whole of stdout line k.
			var outN, inN int64
			var order []string
			err := tap.Merge(context.Background(), outTap, inTap, tap.MergeOptions{
				Chunk: func(src tap.Source, c tap.Chunk) {
					if src == tap.SourceStdout {
						outN += int64(len(c.Data))
						outTap.Release(c)
						return
					}
					if k := inN / lineLen; k > 0 && outN < k*lineLen {
						order = append(order, fmt.Sprintf("stdin line %d (at byte %d) before stdout's line %d was through (%d of %d bytes)",
							k, inN, k-1, outN, k*lineLen))
					}
					inN += int64(len(c.Data))
					inTap.Release(c)
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if outN != lines*lineLen || inN != lines*lineLen {
				t.Fatalf("taps got %d stdout and %d stdin bytes, want %d each", outN, inN, lines*lineLen)
			}
			for _, o := range order {
				t.Error(o)
			}
		})
	}
}
