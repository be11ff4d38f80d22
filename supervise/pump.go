package supervise

import (
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cbc-otel/cbc-otel/tap"
)

// outPump is the state of an output pump, shared with Run, which may stop
// waiting for it (abandon) when a stop request finds it stalled writing to a
// consumer that no longer reads.
type outPump struct {
	mu       sync.Mutex
	detached bool  // Run stopped waiting: no more counting, no more tapping
	n        int64 // bytes read from the child (and tapped)
	broken   bool  // writing to the destination failed; the pipe was closed
	timedOut bool  // no EOF within DrainTimeout after the child exited
}

// outcome is what an output pump reports.
type outcome struct {
	n        int64
	broken   bool
	timedOut bool
}

// detach makes the pump stop touching the tap and the counters (a Write
// still blocked returns into a pump that only quits) and returns what it did
// so far.
func (p *outPump) detach() outcome {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.detached = true
	return outcome{n: p.n, broken: p.broken, timedOut: p.timedOut}
}

// pumpOut copies the child's stdout (or stderr) from r to w, and to tap,
// until EOF. Each read is written out as it is, at once, through a fixed
// buffer: no line is ever held whole and nothing waits for a newline.
//
// Once the child has exited, reads get DrainTimeout to reach EOF; past it
// the process group is killed and what is still buffered in the pipe is
// swept up without waiting. Writing to w is never cut short by the
// deadline, so a slow consumer loses nothing the child wrote (Run may still
// abandon the pump on a stop request: see superviseSignals).
func (s *supervisor) pumpOut(st *outPump, r *os.File, w io.Writer, tw tap.Writer, stdout bool) {
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

	// buf is what the next read fills: a buffer lent by the tap when it
	// lends (no copy into the tap), else our own. Only this goroutine
	// touches it; the tap, only under st.mu while not detached.
	var buf []byte
	lending := false
	lend := func() {
		b := tw.Lend()
		buf = b[:min(len(b), s.cfg.BufSize)]
	}
	if tw != nil {
		st.mu.Lock()
		if !st.detached {
			lend()
			lending = buf != nil
		}
		st.mu.Unlock()
	}
	if !lending {
		buf = make([]byte, s.cfg.BufSize)
	}
	// emit taps p, then passes it on (unless tee already did).
	emit := func(p []byte, teed bool) bool {
		st.mu.Lock()
		if st.detached {
			st.mu.Unlock()
			return false // Run has returned: no call on the tap any more
		}
		// Tap and count what the child did write, delivered or not. The
		// tap comes first, stamping the bytes' passage: the consumer may
		// answer them on stdin at once, and its answer must not be
		// stamped earlier than what it answers.
		st.n += int64(len(p))
		switch {
		case lending:
			// p is queued in the lent buffer itself. The consumer only
			// reads it, and it comes back to be lent again only through
			// lend below, after the Write: p stays ours to write out.
			tw.Commit(p)
		case tw != nil:
			tw.Write(p)
		}
		st.mu.Unlock()
		var err error
		if !teed {
			_, err = w.Write(p)
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.detached {
			return false
		}
		if lending {
			lend()
		}
		if err != nil {
			// The consumer is gone (EPIPE) or broken. Closing our read end
			// makes the child's next write fail with EPIPE/SIGPIPE, exactly
			// what it would have got writing to the consumer itself.
			s.log.Debug("write "+name+" failed, closing the child's "+name, "err", err)
			st.broken = true
			return false
		}
		return true
	}
	next := func() []byte { return buf }
	// With a tap and a pipe for w, tee(2) passes the bytes on without
	// copying them through us; the read that follows is only for the tap.
	var tee *teeReader
	if tw != nil {
		tee = newTeeReader(r, w, s.log)
	}
	if tee != nil {
		// The bytes tee passes on reach the consumer before emit taps
		// them: the tap is told when they pass (see tap.Writer.Begin).
		tee.begin = func() {
			st.mu.Lock()
			defer st.mu.Unlock()
			if !st.detached {
				tw.Begin()
			}
		}
		tee.cancel = func() {
			st.mu.Lock()
			defer st.mu.Unlock()
			if !st.detached {
				tw.Cancel()
			}
		}
	}
	last := 0 // bytes of the last read
	for {
		var n int
		var teed bool
		var err error
		// tee pays off on large reads only (it locks both pipes each call):
		// small ones, a line at a time, keep the plain read and write and
		// their latency. The last read predicts the next.
		if tee != nil && last >= teeMinRead {
			n, teed, err = tee.read(buf)
		} else {
			n, err = r.Read(buf)
		}
		last = n
		if n > 0 && !emit(buf[:n], teed) {
			return
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Either the consumer was slow and the rest is buffered in the
			// pipe, or someone else (a grandchild) still holds it open.
			if s.sweep(r, next, emit) {
				return
			}
			s.log.Warn("child exited but its "+name+" is still open (a grandchild?); killing its process group",
				"pid", s.ch.pid, "drain_timeout", s.cfg.DrainTimeout)
			st.mu.Lock()
			st.timedOut = true
			st.mu.Unlock()
			s.killGroup()
			s.sweep(r, next, emit)
			return
		default:
			if !errors.Is(err, os.ErrClosed) { // closed by Run abandoning us
				s.log.Warn("read child "+name, "err", err)
			}
			return
		}
	}
}

// sweep reads what is already buffered in the pipe without waiting, until
// the pipe is empty or at EOF, and reports whether it reached EOF. Each
// read fills next(), which emit may change.
func (s *supervisor) sweep(r *os.File, next func() []byte, emit func([]byte, bool) bool) (eof bool) {
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
		buf := next()
		err := rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.Read(int(fd), buf)
			return true // never wait for readiness
		})
		switch {
		case err != nil || rerr != nil: // EAGAIN: empty but still open
			return false
		case n == 0:
			return true
		case !emit(buf[:n], false):
			return true // broken: the pipe is closed, nothing more to read
		}
	}
}

// teeMinRead is the size of a read past which the next one is tee'd.
const teeMinRead = 32 << 10

// teeReader reads a child's pipe after tee(2) has duplicated what it holds
// into the destination pipe: the kernel shares the pages, so passing the
// bytes on costs no copy, and the read that follows (for the tap) is the
// only one. Whenever tee cannot do it (the destination is full, gone or
// refuses), that read's bytes are reported as not passed on and go
// through Write as usual, so a full destination blocks as before and EPIPE
// comes back from Write exactly as it would without tee.
type teeReader struct {
	src *os.File
	rc  syscall.RawConn // src's
	out syscall.RawConn // the destination pipe; nil once tee is given up
	log *slog.Logger
	// begin and cancel, if set, frame each tee call: begin before it,
	// cancel after it when it passed nothing on.
	begin, cancel func()
}

// newTeeReader returns a teeReader when w is a pipe, else nil.
func newTeeReader(r *os.File, w io.Writer, log *slog.Logger) *teeReader {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
		return nil
	}
	rc, err := r.SyscallConn()
	if err != nil {
		return nil
	}
	// Through a RawConn (not f.Fd, which would make a pollable f blocking)
	// the fd cannot be closed and reused under a tee.
	out, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	return &teeReader{src: r, rc: rc, out: out, log: log}
}

// read fills buf with the next bytes of the pipe, waiting for them like
// os.File.Read (deadline included), and reports whether they were already
// passed on by tee. At EOF it returns io.EOF.
func (t *teeReader) read(buf []byte) (n int, teed bool, err error) {
	var opErr error
	err = t.rc.Read(func(fd uintptr) bool {
		if t.out != nil {
			var m int
			var terr error
			if t.begin != nil {
				t.begin()
			}
			if cerr := t.out.Control(func(out uintptr) {
				m, terr = ignoringEINTR(func() (int, error) {
					k, err := unix.Tee(int(fd), int(out), len(buf), unix.SPLICE_F_NONBLOCK)
					return int(k), err
				})
			}); cerr != nil {
				terr = cerr // closed: let Write say so
			}
			if t.cancel != nil && (terr != nil || m == 0) {
				t.cancel()
			}
			switch {
			case terr == nil && m == 0:
				opErr = io.EOF
				return true
			case terr == nil:
				// Only we read this pipe, so the m bytes tee saw are still
				// at its head, and a read gets all of them (an error is
				// as unexpected as on any read and ends the pump).
				n, opErr = readFull(int(fd), buf[:m])
				teed = true
				return true
			case errors.Is(terr, unix.EAGAIN):
				// The pipe is empty, or the destination full: the plain
				// read below tells which.
			case errors.Is(terr, unix.EPIPE), errors.Is(terr, os.ErrClosed):
				// Let Write report it, with os.File's own EPIPE handling.
			default:
				t.log.Debug("tee refused, copying instead", "err", terr)
				t.out = nil
			}
		}
		m, rerr := ignoringEINTR(func() (int, error) { return syscall.Read(int(fd), buf) })
		switch {
		case errors.Is(rerr, syscall.EAGAIN):
			return false // empty: wait for the child
		case rerr != nil:
			opErr = rerr
		case m == 0:
			opErr = io.EOF
		default:
			n = m
		}
		return true
	})
	switch {
	case err == nil:
		err = opErr
	case !errors.Is(err, os.ErrDeadlineExceeded):
		// A RawConn reports a closed file with an error of its own, where
		// os.File.Read says os.ErrClosed, which the pump expects when
		// Run abandons it; Stat says which.
		if _, serr := t.src.Stat(); errors.Is(serr, os.ErrClosed) {
			err = os.ErrClosed
		}
	}
	return n, teed, err
}

// readFull reads len(buf) bytes that are known to be in the pipe.
func readFull(fd int, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := ignoringEINTR(func() (int, error) { return syscall.Read(fd, buf[n:]) })
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.ErrUnexpectedEOF
		}
		n += m
	}
	return n, nil
}

// ignoringEINTR retries f while it is interrupted by a signal.
func ignoringEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if !errors.Is(err, syscall.EINTR) {
			return n, err
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
				if errors.Is(werr, syscall.EPIPE) {
					p.closeSrc()
				}
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

// closeSrc closes our stdin once the child's stdin has no reader left, when
// it is a file (a pipe, a terminal): without the supervisor the writer
// feeding us would now get EPIPE instead of blocking, and with the read end
// closed it does. Another reader is left alone: it has no readers to lose.
func (p *inPump) closeSrc() {
	if f, ok := p.src.(*os.File); ok {
		if err := f.Close(); err != nil {
			p.log.Debug("close stdin", "err", err)
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
