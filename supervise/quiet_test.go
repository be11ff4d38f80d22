package supervise

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The quiet reader reports what os.File.Read reports, for every way a
// pump's read ends: data, end of file, the drain deadline, a close.
func TestQuietReaderAsFileRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, r, w *os.File)
		want    string // data read first, if any
		wantErr error
	}{
		{name: "data", prepare: func(t *testing.T, r, w *os.File) { w.Write([]byte("line\n")) }, want: "line\n"},
		{name: "end of file", prepare: func(t *testing.T, r, w *os.File) { w.Close() }, wantErr: io.EOF},
		{name: "data, then end of file", prepare: func(t *testing.T, r, w *os.File) { w.Write([]byte("last")); w.Close() }, want: "last", wantErr: io.EOF},
		{name: "deadline", prepare: func(t *testing.T, r, w *os.File) { r.SetReadDeadline(time.Now().Add(time.Millisecond)) }, wantErr: os.ErrDeadlineExceeded},
		{name: "closed", prepare: func(t *testing.T, r, w *os.File) { r.Close() }, wantErr: os.ErrClosed},
		{name: "data written while waiting", prepare: func(t *testing.T, r, w *os.File) {
			go w.Write([]byte("later"))
		}, want: "later"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			q := newQuietReader(r)
			tc.prepare(t, r, w)
			buf := make([]byte, 64)
			var got []byte
			for {
				n, err := q.Read(buf)
				got = append(got, buf[:n]...)
				if err != nil {
					if !errors.Is(err, tc.wantErr) {
						t.Fatalf("error %v, want %v", err, tc.wantErr)
					}
					break
				}
				if string(got) == tc.want && tc.wantErr == nil {
					break
				}
			}
			if string(got) != tc.want {
				t.Errorf("read %q, want %q", got, tc.want)
			}
		})
	}
}

// The quiet writer writes every byte, in order, whatever the file: a pipe
// that fills up (its would-block writes fall back to the plain Write), a
// regular file (at the current position, as write(2)), a socket, and
// /dev/null; and it reports a write to a pipe without a reader.
func TestQuietWriterWritesAll(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), (3<<20)/16) // three times the pipe
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (w *os.File, read func() []byte)
	}{
		{name: "pipe, slow reader", open: func(t *testing.T) (*os.File, func() []byte) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan []byte, 1)
			go func() {
				var b bytes.Buffer
				buf := make([]byte, 4096) // small reads: the pipe stays full
				for {
					n, err := r.Read(buf)
					b.Write(buf[:n])
					if err != nil {
						break
					}
				}
				r.Close()
				got <- b.Bytes()
			}()
			return w, func() []byte { w.Close(); return <-got }
		}},
		{name: "regular file", open: func(t *testing.T) (*os.File, func() []byte) {
			p := filepath.Join(t.TempDir(), "out")
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte("head:")) // the quiet writes go on from here
			return f, func() []byte {
				f.Close()
				b, _ := os.ReadFile(p)
				return bytes.TrimPrefix(b, []byte("head:"))
			}
		}},
		{name: "socket", open: func(t *testing.T) (*os.File, func() []byte) {
			fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
			if err != nil {
				t.Fatal(err)
			}
			w, r := os.NewFile(uintptr(fds[0]), "w"), os.NewFile(uintptr(fds[1]), "r")
			got := make(chan []byte, 1)
			go func() { b, _ := io.ReadAll(r); r.Close(); got <- b }()
			return w, func() []byte { w.Close(); return <-got }
		}},
		{name: "/dev/null", open: func(t *testing.T) (*os.File, func() []byte) {
			f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			return f, func() []byte { f.Close(); return payload }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, read := tc.open(t)
			q := newQuietWriter(f)
			for off := 0; off < len(payload); {
				k := min(len(payload)-off, 100<<10+off%777) // uneven pieces
				n, err := q.Write(payload[off : off+k])
				if err != nil || n != k {
					t.Fatalf("Write = %d, %v; want %d", n, err, k)
				}
				off += k
			}
			if got := read(); !bytes.Equal(got, payload) {
				t.Errorf("%d bytes arrived, want %d, equal %v", len(got), len(payload), bytes.Equal(got, payload))
			}
		})
	}
	t.Run("pipe without a reader", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		defer w.Close()
		if _, err := newQuietWriter(w).Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
			t.Errorf("error %v, want EPIPE", err)
		}
	})
	t.Run("not a file", func(t *testing.T) {
		var b strings.Builder
		if w := newQuietWriter(&b); w != io.Writer(&b) {
			t.Errorf("a writer that is no *os.File came back wrapped: %T", w)
		}
	})
}
