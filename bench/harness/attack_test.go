package main

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestFeedFIFO checks that feedFIFO waits for the reader of the FIFO and
// hands it the whole file.
func TestFeedFIFO(t *testing.T) {
	dir := t.TempDir()
	want := make([]byte, 300<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(rng.IntN(256))
	}
	src := filepath.Join(dir, "in")
	if err := os.WriteFile(src, want, 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "f")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		f, err := os.Open(fifo) // blocks until the writer is there
		if err != nil {
			got <- nil
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		got <- b
	}()
	if err := feedFIFO(context.Background(), fifo, src, make(chan error, 1)); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the reader got %d bytes, want the %d of the file", len(b), len(want))
	}
}
