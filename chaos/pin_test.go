//go:build chaos

package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// bePlacement keeps the throughput runs of the backend section on fixed
// CPUs: the test process (the reader of the wrapper's stdout and the OTLP
// receivers) on one, the wrapper and its child on another. Unpinned, the
// scheduler places the four busy threads (child, pump, reader, telemetry)
// differently from run to run on a 2-vCPU machine, and single runs of one
// binary spread by 25 % or more (measured: 0.94-1.79 s for the same 1 GiB
// run), which no 5 % bound can resolve. Pinned, the reference and every
// case meet the same placement, and the spread falls to a few per cent.
type bePlacement struct {
	wrapperCPU int // -1: not pinned
	note       string
}

// bePin pins the test process to its first allowed CPU for the rest of the
// test and returns the CPU the wrapper runs on. With fewer than two CPUs,
// or CHAOS_BACKEND_PIN=0, nothing is pinned.
func bePin(t *testing.T) bePlacement {
	t.Helper()
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return bePlacement{wrapperCPU: -1, note: fmt.Sprintf("not pinned: %v", err)}
	}
	var cpus []int
	for c := range 1024 {
		if allowed.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 || os.Getenv("CHAOS_BACKEND_PIN") == "0" {
		return bePlacement{wrapperCPU: -1, note: "not pinned"}
	}
	var mine unix.CPUSet
	mine.Set(cpus[0])
	if err := beSetProcessAffinity(&mine); err != nil {
		t.Fatalf("pinning the test process: %v", err)
	}
	t.Cleanup(func() {
		if err := beSetProcessAffinity(&allowed); err != nil {
			t.Errorf("unpinning the test process: %v", err)
		}
	})
	return bePlacement{wrapperCPU: cpus[1],
		note: fmt.Sprintf("pinned: reader on CPU %d, wrapper and child on CPU %d", cpus[0], cpus[1])}
}

// beSetProcessAffinity sets the affinity of every thread of this process.
// Threads made later inherit it from the thread that makes them, which is
// one of these.
func beSetProcessAffinity(set *unix.CPUSet) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, e := range tasks {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// A thread may have ended since the listing: ESRCH is no error.
		if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("thread %d: %w", tid, err)
		}
	}
	return nil
}

// beStartOn starts cmd on the given CPU (-1: wherever). The child inherits
// the affinity of the thread that forks it, so the fork is made from a
// locked thread pinned for the purpose; the goroutine ends still locked,
// which ends that thread, so no other goroutine ever runs on it.
func beStartOn(cmd *exec.Cmd, cpu int) error {
	if cpu < 0 {
		return cmd.Start()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			errc <- fmt.Errorf("pinning the forking thread: %w", err)
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}
