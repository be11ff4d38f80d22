package supervise

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultParentPoll is how often WatchParent checks the parent's pid where
// the kernel has no pidfd (Linux before 5.3, or pidfd_open refused).
const DefaultParentPoll = time.Second

// WatchParent returns a channel that is closed when the process that
// started this one exits, and a description of how it watches.
//
// It watches the parent process, not the thread that forked us, which is
// why it does not use PR_SET_PDEATHSIG: the kernel sends that signal when
// the forking thread exits, and a caller that starts the wrapper from a
// short-lived thread (a Python or Java worker thread, a locked Go thread)
// would stop a healthy run the moment that thread ended. A pidfd of the
// parent becomes readable only when the whole process has exited; without
// pidfds the parent's pid is polled every poll (0: DefaultParentPoll).
//
// The channel is closed at once if the parent exits while the watch
// begins. A process whose parent is init (pid 1, or 0 for the first
// process of a container) is not watched: a parent that died before we
// looked cannot be told from init. The watch ends, without closing the
// channel, when ctx is done.
func WatchParent(ctx context.Context, poll time.Duration) (<-chan struct{}, string) {
	return watchParent(ctx, poll, true)
}

// watchParent is WatchParent; pidfd false forces the polling fallback.
func watchParent(ctx context.Context, poll time.Duration, pidfd bool) (<-chan struct{}, string) {
	gone := make(chan struct{})
	ppid := os.Getppid()
	if ppid <= 1 {
		// Started by init, or the first process of a container (ppid 0),
		// or reparented already: nothing to watch, and a parent that died
		// before we looked cannot be told from init.
		return gone, "parent is init: not watched"
	}
	why := "pidfd not tried"
	if pidfd {
		err := watchPidfd(ctx, ppid, gone)
		if err == nil {
			return gone, fmt.Sprintf("parent %d watched by pidfd", ppid)
		}
		why = err.Error()
	}
	if poll <= 0 {
		poll = DefaultParentPoll
	}
	go pollParent(ctx, ppid, poll, gone)
	return gone, fmt.Sprintf("parent %d watched by polling every %s (%s)", ppid, poll, why)
}

// watchPidfd closes gone when the process ppid exits, waiting on a pidfd
// in the runtime's poller, or returns an error if pidfds cannot be used.
func watchPidfd(ctx context.Context, ppid int, gone chan struct{}) error {
	fd, err := unix.PidfdOpen(ppid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	if os.Getppid() != ppid {
		// The parent died between Getppid and PidfdOpen, and the pid may
		// even name another process now.
		unix.Close(fd)
		close(gone)
		return nil
	}
	// Non-blocking, so os.NewFile registers it with the poller: the wait
	// below parks a goroutine, not a thread. A file the poller cannot
	// handle has no deadlines: then fall back.
	f := os.NewFile(uintptr(fd), "pidfd")
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return fmt.Errorf("pidfd not pollable: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return fmt.Errorf("pidfd: %w", err)
	}
	go func() {
		defer f.Close()
		// Read calls the func, and waits for readability between calls
		// that return false; a pidfd is readable once its process exited.
		err := rc.Read(func(fd uintptr) bool {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(pfd, 0)
			return err == nil && n > 0
		})
		if err == nil {
			close(gone)
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			f.Close() // ends the Read above with an error: gone stays open
		case <-gone:
		}
	}()
	return nil
}

// pollParent closes gone when our parent is no longer ppid.
func pollParent(ctx context.Context, ppid int, every time.Duration, gone chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if os.Getppid() != ppid {
			close(gone)
			return
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}
