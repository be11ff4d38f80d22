// Command genstream writes the synthetic mixed stream-json recording of the
// benchmarks (see bench/internal/streamgen) to a file or stdout.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/cbc-otel/cbc-otel/bench/internal/streamgen"
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
			return fmt.Errorf("create output: %w", err)
		}
	}
	if _, err := streamgen.Mixed(f, size, seed); err != nil {
		return err
	}
	if f != os.Stdout {
		if err := f.Close(); err != nil {
			return fmt.Errorf("close output: %w", err)
		}
	}
	return nil
}
