// Command genstream writes a synthetic stream-json recording for the
// passthrough benchmark: mostly large JSON lines (tool results, file
// contents) with small ones in between (progress and status events), from a
// fixed seed so every run measures the same bytes.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
)

func main() {
	sizeMB := flag.Int("size-mb", 1024, "approximate output size in MiB")
	seed := flag.Uint64("seed", 1, "random seed")
	out := flag.String("o", "-", "output file (- for stdout)")
	flag.Parse()
	if err := generate(*out, int64(*sizeMB)<<20, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "genstream:", err)
		os.Exit(1)
	}
}

func generate(path string, size int64, seed uint64) error {
	f := os.Stdout
	if path != "-" {
		var err error
		if f, err = os.Create(path); err != nil {
			return err
		}
		defer f.Close()
	}
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	// A pool of JSON-safe text to slice payloads from: generating every
	// byte afresh would make the generator, not the pipe, the slow part.
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:-_/()[]{}=+*#@"
	pool := make([]byte, 8<<20)
	for i := range pool {
		pool[i] = alphabet[rng.IntN(len(alphabet))]
	}
	var written int64
	for seq := 0; written < size; seq++ {
		var n int
		var line []byte
		suffix := `"}`
		if rng.IntN(10) < 7 {
			// small event: 100 B to 1 KiB
			n = 100 + rng.IntN(900)
			line = fmt.Appendf(nil, `{"type":"system","subtype":"task_progress","task_id":"t%d","session_id":"s1","seq":%d,"description":"`, seq%97, seq)
		} else {
			// large event: 16 KiB to 4 MiB
			n = 16<<10 + rng.IntN(4<<20)
			line = fmt.Appendf(nil, `{"type":"user","session_id":"s1","seq":%d,"message":{"role":"user","content":[{"type":"tool_result","content":"`, seq)
			suffix = `"}]}}`
		}
		off := rng.IntN(len(pool) - 1)
		for k := n; k > 0; {
			chunk := min(k, len(pool)-off)
			line = append(line, pool[off:off+chunk]...)
			k -= chunk
			off = 0
		}
		line = append(line, suffix...)
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			return err
		}
		written += int64(len(line))
	}
	return w.Flush()
}
