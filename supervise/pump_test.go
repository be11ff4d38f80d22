package supervise

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cbc-otel/cbc-otel/supervise/supervisetest"
)

// teeReader passes bytes on with tee when the destination pipe takes them,
// and otherwise hands them back for Write, never both and never neither.
func TestTeeReader(t *testing.T) {
	const n = 1000
	for _, tc := range []struct {
		name     string
		dest     string // "pipe", "full pipe", "closed pipe", "file"
		tee      bool   // a teeReader is made
		wantTeed bool
	}{
		{name: "pipe takes the bytes", dest: "pipe", tee: true, wantTeed: true},
		{name: "full pipe: copy instead", dest: "full pipe", tee: true},
		{name: "no reader: copy, Write reports EPIPE", dest: "closed pipe", tee: true},
		{name: "a file is written, not tee'd", dest: "file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, child := pipe(t)
			var dst *os.File
			var dstR *os.File
			switch tc.dest {
			case "file":
				f, err := os.Create(filepath.Join(t.TempDir(), "out"))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				dst = f
			default:
				dstR, dst = pipe(t)
				if tc.dest == "full pipe" {
					// Fill it without blocking: a nonblocking raw write
					// until EAGAIN.
					rc, _ := dst.SyscallConn()
					rc.Write(func(fd uintptr) bool {
						for {
							if _, err := syscall.Write(int(fd), make([]byte, 4096)); err != nil {
								return true
							}
						}
					})
				}
				if tc.dest == "closed pipe" {
					dstR.Close()
				}
			}
			tr := newTeeReader(src, dst, slog.New(slog.DiscardHandler))
			if (tr != nil) != tc.tee {
				t.Fatalf("teeReader made: %v, want %v", tr != nil, tc.tee)
			}
			if tr == nil {
				return
			}
			in := supervisetest.Pattern(n)
			if _, err := child.Write(in); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64<<10)
			got, teed, err := tr.read(buf)
			if err != nil || got != n || !bytes.Equal(buf[:got], in) || teed != tc.wantTeed {
				t.Fatalf("read = %d, teed %v, %v; want %d, teed %v", got, teed, err, n, tc.wantTeed)
			}
			if tc.dest == "closed pipe" {
				if _, err := dst.Write(buf[:got]); !errors.Is(err, syscall.EPIPE) {
					t.Fatalf("Write of the copied bytes = %v, want EPIPE", err)
				}
			}
			if tc.dest == "pipe" {
				out := make([]byte, n)
				if _, err := io.ReadFull(dstR, out); err != nil || !bytes.Equal(out, in) {
					t.Fatalf("destination got %q, %v", out, err)
				}
			}
			// The source is now empty: after the child closes it, EOF.
			child.Close()
			if got, _, err := tr.read(buf); got != 0 || !errors.Is(err, io.EOF) {
				t.Fatalf("after close: read = %d, %v; want 0, EOF", got, err)
			}
		})
	}
}

// Closing the child's pipe under a waiting read (Run abandoning the pump)
// ends it with os.ErrClosed, as os.File.Read would, not with a warning.
func TestTeeReaderClosed(t *testing.T) {
	src, _ := pipe(t)
	_, dst := pipe(t)
	tr := newTeeReader(src, dst, slog.New(slog.DiscardHandler))
	errc := make(chan error, 1)
	go func() {
		_, _, err := tr.read(make([]byte, 4096))
		errc <- err
	}()
	src.Close()
	if err := <-errc; !errors.Is(err, os.ErrClosed) {
		t.Fatalf("read after Close = %v, want os.ErrClosed", err)
	}
}
