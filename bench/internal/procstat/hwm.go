package procstat

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"
)

// HWMWatcher follows the VmHWM (peak resident set) of a running process.
// rusage Maxrss cannot serve for a wrapper started by os/exec: it uses vfork,
// and exec folds the high-water mark of the parent's address space (the
// benchmark harness, which may be larger than the wrapper) into it.
type HWMWatcher struct {
	stop chan struct{}
	done chan int64
}

// WatchHWM polls pid's VmHWM every 5 ms until stopped; VmHWM only grows, so
// the last value read is the peak up to then.
func WatchHWM(pid int) *HWMWatcher {
	w := &HWMWatcher{stop: make(chan struct{}), done: make(chan int64, 1)}
	go func() {
		var peak int64
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			if v := vmHWMKB(pid); v > peak {
				peak = v
			}
			select {
			case <-w.stop:
				w.done <- peak
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// PeakKB stops the watcher and returns the largest VmHWM seen, in KiB.
func (w *HWMWatcher) PeakKB() int64 {
	close(w.stop)
	return <-w.done
}

// vmHWMKB reads VmHWM of a live process, 0 when it is gone.
func vmHWMKB(pid int) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
