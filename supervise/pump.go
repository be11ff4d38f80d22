package supervise

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"
)

// outcome is what an output pump reports.
type outcome struct {
	n        int64
	broken   bool // writing to the destination failed; the pipe was closed
	timedOut bool // no EOF within DrainTimeout after the child exited
}

// pumpOut copies the child's stdout (or stderr) from r to w, and to tap,
// until EOF. Each read is written out as it is, at once, through a fixed
// buffer: no line is ever held whole and nothing waits for a newline.
//
// Once the child has exited, reads get DrainTimeout to reach EOF; past it
// the process group is killed and what is still buffered in the pipe is
// swept up without waiting. Writing to w is never cut short by the
// deadline, so a slow consumer loses nothing the child wrote.
func (s *supervisor) pumpOut(r *os.File, w, tap io.Writer, stdout bool) (o outcome) {
	defer r.Close()
	if w == nil {
		w = io.Discard
	}
	name := "stderr"
	if stdout {
		name = "stdout"
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-s.ch.exited:
			// Safe concurrently with Read: the poller wakes the reader.
			r.SetReadDeadline(time.Now().Add(s.cfg.DrainTimeout))
		case <-done:
		}
	}()

	buf := make([]byte, s.cfg.BufSize)
	emit := func(p []byte) bool {
		if _, err := w.Write(p); err != nil {
			// The consumer is gone (EPIPE) or broken. Closing our read end
			// makes the child's next write fail with EPIPE/SIGPIPE, exactly
			// what it would have got writing to the consumer itself.
			s.log.Debug("write "+name+" failed, closing the child's "+name, "err", err)
			o.broken = true
			o.n += int64(len(p)) // tap and count what the child did write
			if tap != nil {
				tap.Write(p)
			}
			return false
		}
		o.n += int64(len(p))
		if tap != nil {
			tap.Write(p)
		}
		return true
	}
	for {
		n, err := r.Read(buf)
		if n > 0 && !emit(buf[:n]) {
			return o
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return o
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Either the consumer was slow and the rest is buffered in the
			// pipe, or someone else (a grandchild) still holds it open.
			if s.sweep(r, buf, emit) {
				return o
			}
			s.log.Warn("child exited but its "+name+" is still open (a grandchild?); killing its process group",
				"pid", s.ch.pid, "drain_timeout", s.cfg.DrainTimeout)
			o.timedOut = true
			s.killGroup()
			s.sweep(r, buf, emit)
			return o
		default:
			s.log.Warn("read child "+name, "err", err)
			return o
		}
	}
}

// sweep reads what is already buffered in the pipe without waiting, until
// the pipe is empty or at EOF, and reports whether it reached EOF.
func (s *supervisor) sweep(r *os.File, buf []byte, emit func([]byte) bool) (eof bool) {
	if err := r.SetReadDeadline(time.Time{}); err != nil {
		return false
	}
	rc, err := r.SyscallConn()
	if err != nil {
		return false
	}
	for {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.Read(int(fd), buf)
			return true // never wait for readiness
		})
		switch {
		case err != nil || rerr != nil: // EAGAIN: empty but still open
			return false
		case n == 0:
			return true
		case !emit(buf[:n]):
			return true // broken: the pipe is closed, nothing more to read
		}
	}
}

// inPump copies the supervisor's stdin to the child's stdin pipe. Run does
// not wait for it: a Read on a terminal may never return. Once Run is done
// with it (detach), it no longer touches the tap or the counters.
type inPump struct {
	src     io.Reader
	dst     *os.File
	tap     io.Writer
	bufSize int
	log     *slog.Logger

	mu       sync.Mutex
	detached bool
	n        int64
}

func newInPump(src io.Reader, dst *os.File, tap io.Writer, bufSize int, log *slog.Logger) *inPump {
	return &inPump{src: src, dst: dst, tap: tap, bufSize: bufSize, log: log}
}

// run pumps until EOF on src (then closes the child's stdin, which is how the
// child sees EOF), or until the child stops taking input.
func (p *inPump) run() {
	defer p.dst.Close()
	buf := make([]byte, p.bufSize)
	for {
		n, err := p.src.Read(buf)
		if n > 0 {
			// Tap before passing on: the tap stamps the bytes' passage,
			// and a request (an interrupt) must be stamped before the
			// child can react to it on stdout.
			p.mu.Lock()
			if p.detached {
				p.mu.Unlock()
				return
			}
			if p.tap != nil {
				p.tap.Write(buf[:n])
			}
			p.mu.Unlock()
			if _, werr := p.dst.Write(buf[:n]); werr != nil {
				// The child closed its stdin or exited (EPIPE), or Run
				// detached us: what it did not take, nobody will.
				p.log.Debug("write child stdin", "err", werr)
				return
			}
			p.mu.Lock()
			p.n += int64(n)
			p.mu.Unlock()
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				p.log.Warn("read stdin", "err", err)
			}
			return
		}
	}
}

// detach stops the pump from touching the tap, closes the child's stdin
// (unblocking a Write to a child that never read) and returns the count.
func (p *inPump) detach() int64 {
	p.mu.Lock()
	p.detached = true
	n := p.n
	p.mu.Unlock()
	p.dst.Close()
	return n
}
