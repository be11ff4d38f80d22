package supervisetest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// StartFromExitingThread starts cmd from an OS thread of its own, runs
// ready on that thread (to wait until the child has set itself up), then
// lets the thread exit and returns once it has. It is what a caller that
// starts processes from short-lived threads does to its children, and what
// the kernel takes for the parent's death under PR_SET_PDEATHSIG.
func StartFromExitingThread(cmd *exec.Cmd, ready func() error, within time.Duration) error {
	type started struct {
		tid int
		err error
	}
	c := make(chan started, 1)
	fork := func() {
		// Never unlocked: a goroutine that ends locked takes its thread
		// with it.
		runtime.LockOSThread()
		tid := unix.Gettid()
		if err := cmd.Start(); err != nil {
			c <- started{err: err}
			return
		}
		c <- started{tid: tid, err: ready()}
	}
	go func() {
		// The main thread never exits (the runtime parks it instead): if
		// this goroutine is on it, hold it while fork runs on another.
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			runtime.UnlockOSThread()
			fork()
			return
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			fork()
		}()
		<-done
		runtime.UnlockOSThread()
	}()
	s := <-c
	if s.err != nil {
		return s.err
	}
	task := fmt.Sprintf("/proc/self/task/%d", s.tid)
	deadline := time.Now().Add(within)
	for {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the forking thread %d did not exit within %s", s.tid, within)
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronisation
	}
}
