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

// outPump is the state of an output pump, shared with Run, which may stop
// waiting for it (abandon) when a stop request finds it stalled writing to a
// consumer that no longer reads.
type outPump struct {
	mu       sync.Mutex
	detached bool  // Run stopped waiting: no more counting, no more tapping
	n        int64 // bytes read from the child (and tapped)
	broken   bool  // writing to the destination failed; the pipe was closed
	timedOut bool  // no EOF within DrainTimeout after the child exited
	// writing is set while a Write to the consumer is under way. When Run
	// gives up on the consumer (abandoned), a pump that is writing leaves
	// the rest of its pipe to Run (takenOver), which taps it; a pump that is
	// not goes on tapping without passing on.
	writing, abandoned, takenOver bool
	undelivered                   int64 // tapped after abandoned, not passed on
	done                          chan struct{}
}

func newOutPump() *outPump { return &outPump{done: make(chan struct{})} }

// abandon tells the pump that Run no longer waits for its consumer, and
// reports whether Run must take over its pipe: the pump is stuck in a Write
// and will not read again.
func (p *outPump) abandon() (takeover bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.abandoned = true
	p.takenOver = p.writing
	return p.takenOver
}

// tapOnly taps and counts b without passing it on: what the child wrote
// after the consumer was given up on still reaches the telemetry.
func (p *outPump) tapOnly(tap io.Writer, b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.detached {
		return false
	}
	p.n += int64(len(b))
	p.undelivered += int64(len(b))
	if tap != nil {
		tap.Write(b)
	}
	return true
}

// outcome is what an output pump reports.
type outcome struct {
	n        int64
	broken   bool
	timedOut bool
	// undelivered is what was tapped but not passed on: the consumer was
	// given up on, or had gone with the child's output still in the pipe.
	undelivered int64
}

// detach makes the pump stop touching the tap and the counters (a Write
// still blocked returns into a pump that only quits) and returns what it did
// so far.
func (p *outPump) detach() outcome {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.detached = true
	return outcome{n: p.n, broken: p.broken, timedOut: p.timedOut, undelivered: p.undelivered}
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
func (s *supervisor) pumpOut(st *outPump, r *os.File, w, tap io.Writer, stdout bool) {
	defer close(st.done)
	defer func() {
		st.mu.Lock()
		takenOver := st.takenOver
		st.mu.Unlock()
		if !takenOver { // else Run reads what is left, then closes it
			r.Close()
		}
	}()
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
	// Quiet system calls for the bytes' way through (see quiet.go).
	rd, out := newQuietReader(r), newQuietWriter(w)
	// emit taps p, then passes it on.
	emit := func(p []byte) bool {
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
		if tap != nil {
			tap.Write(p)
		}
		if st.abandoned {
			// Run gave up on the consumer: tapped, not passed on.
			st.undelivered += int64(len(p))
			st.mu.Unlock()
			return true
		}
		st.writing = true
		st.mu.Unlock()
		_, err := out.Write(p)
		st.mu.Lock()
		defer st.mu.Unlock()
		st.writing = false
		if st.detached || st.takenOver {
			return false // Run reads the rest of the pipe now
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
	for {
		n, err := rd.Read(buf)
		if n > 0 && !emit(buf[:n]) {
			st.mu.Lock()
			broken := st.broken && !st.detached
			st.mu.Unlock()
			if broken {
				// What the child had already written when the consumer
				// went is still the child's output: tapped, not passed
				// on (an SDK that closes the pipe at the result it
				// wanted must not cost the telemetry the lines after).
				// Its next write gets EPIPE. At most a pipe's worth:
				// a child still writing would otherwise keep refilling it.
				left := int64(PipeSize)
				s.sweep(r, buf, func(b []byte) bool {
					left -= int64(len(b))
					return st.tapOnly(tap, b) && left > 0
				})
			}
			return
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			if !flushHeld(w) {
				return
			}
			if stdout && s.cfg.StdoutEOF != nil {
				s.cfg.StdoutEOF()
			}
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Either the consumer was slow and the rest is buffered in the
			// pipe, or someone else (a grandchild) still holds it open.
			if s.sweep(r, buf, emit) {
				flushHeld(w)
				return
			}
			s.log.Warn("child exited but its "+name+" is still open (a grandchild?); killing its process group",
				"pid", s.ch.pid, "drain_timeout", s.cfg.DrainTimeout)
			st.mu.Lock()
			st.timedOut = true
			st.mu.Unlock()
			s.killGroup()
			s.sweep(r, buf, emit)
			flushHeld(w)
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

	inj      *Injector // nil unless Config.Inject
	mu       sync.Mutex
	detached bool
	n        int64
}

func newInPump(src io.Reader, dst *os.File, tap io.Writer, bufSize int, log *slog.Logger, inj *Injector) *inPump {
	p := &inPump{src: src, dst: dst, tap: tap, bufSize: bufSize, log: log, inj: inj}
	if inj != nil {
		inj.attach(dst, p.tapChunk, p.count)
	}
	return p
}

// tapChunk taps b unless Run is done with the pump.
func (p *inPump) tapChunk(b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.detached {
		return false
	}
	if p.tap != nil {
		p.tap.Write(b)
	}
	return true
}

// count counts n bytes written to the child's stdin.
func (p *inPump) count(n int) {
	p.mu.Lock()
	p.n += int64(n)
	p.mu.Unlock()
}

// run pumps until EOF on src (then closes the child's stdin, which is how the
// child sees EOF), or until the child stops taking input.
func (p *inPump) run() {
	defer p.dst.Close()
	if p.inj != nil {
		defer p.inj.close() // first: nothing is written to a closed stdin
	}
	buf := make([]byte, p.bufSize)
	for {
		n, err := p.src.Read(buf)
		if n > 0 && p.inj != nil {
			// Whole lines are what the injector needs to see: it taps,
			// writes and counts, in stream order with its own line.
			if werr := p.inj.pass(buf[:n]); werr != nil {
				p.log.Debug("write child stdin", "err", werr)
				if errors.Is(werr, syscall.EPIPE) {
					p.closeSrc()
				}
				return
			}
		} else if n > 0 {
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
