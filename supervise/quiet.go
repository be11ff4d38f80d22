package supervise

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The output pumps move each line with system calls that do not enter the
// Go scheduler's syscall state (RawSyscall): a read of a non-blocking pipe
// that the poller said is ready, and a write that may not block
// (pwritev2 RWF_NOWAIT). Both return at once, so holding the P is harmless,
// and they spare what a plain syscall costs once the process has gone idle
// between two lines of a paced child: entering a syscall wakes the
// runtime's sysmon thread from its deep sleep, which then polls every
// 20 µs until the process is idle again. Measured with `run` at 200
// lines/s (perf): sysmon's sleeps and wake-ups were a third of the
// wrapper's CPU. A write that would block (a full pipe, a slow terminal)
// falls back to the ordinary Write, which parks the goroutine properly.

// quietReader reads a pollable (non-blocking) file with raw reads, waiting
// for readiness through the runtime poller as os.File.Read does, so read
// deadlines and Close still wake it.
type quietReader struct {
	rc syscall.RawConn
}

// newQuietReader returns a reader of f that makes no scheduler-visible
// syscall, or f itself when f gives no raw access.
func newQuietReader(f *os.File) io.Reader {
	rc, err := f.SyscallConn()
	if err != nil {
		return f
	}
	return &quietReader{rc: rc}
}

// Read reads once, as os.File.Read: io.EOF at end of file,
// os.ErrDeadlineExceeded past the read deadline, os.ErrClosed once closed.
func (q *quietReader) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var (
		n     int
		errno syscall.Errno
	)
	err := q.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // empty: the poller waits for data
			}
			n, errno = int(r), e
			return true
		}
	})
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return 0, err
	case err != nil:
		// The poller's "use of closed file", which os.File.Read reports
		// as os.ErrClosed.
		return 0, fmt.Errorf("%w: %w", os.ErrClosed, err)
	case errno != 0:
		return 0, &os.PathError{Op: "read", Path: "pipe", Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// quietWriter writes to f with pwritev2(RWF_NOWAIT) first and falls back
// to f.Write for what that would not write without waiting, or for good
// when f does not support it (EOPNOTSUPP: a terminal, some devices).
type quietWriter struct {
	f           *os.File
	rc          syscall.RawConn
	unsupported atomic.Bool
}

// newQuietWriter returns w, made quiet when it is an *os.File.
func newQuietWriter(w io.Writer) io.Writer {
	f, ok := w.(*os.File)
	if !ok {
		return w
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return w
	}
	return &quietWriter{f: f, rc: rc}
}

// Write writes all of p, as os.File.Write.
func (q *quietWriter) Write(p []byte) (int, error) {
	done := 0
	if !q.unsupported.Load() && len(p) > 0 {
		var unsupported bool
		cerr := q.rc.Control(func(fd uintptr) {
			for done < len(p) {
				iov := unix.Iovec{Base: &p[done]}
				iov.SetLen(len(p) - done)
				// offset -1: the file's current position, as write(2).
				r, _, e := syscall.RawSyscall6(unix.SYS_PWRITEV2, fd, uintptr(unsafe.Pointer(&iov)), 1,
					^uintptr(0), ^uintptr(0), unix.RWF_NOWAIT)
				switch e {
				case 0:
					if r == 0 {
						return
					}
					done += int(r)
					continue
				case syscall.EINTR:
					continue
				case syscall.EOPNOTSUPP, syscall.EINVAL, syscall.ENOSYS, syscall.ESPIPE:
					unsupported = true
				}
				return // EAGAIN and real errors: the plain Write decides
			}
		})
		if unsupported {
			q.unsupported.Store(true)
		}
		if cerr == nil && done == len(p) {
			return done, nil
		}
	}
	n, err := q.f.Write(p[done:])
	return done + n, err
}
