// Package procstat reads what a process of this machine has spent from
// /proc: its own CPU (utime + stime, also of a zombie not yet reaped, so a
// wrapper's figure leaves out the child it reaped) and its peak resident set
// (VmHWM). The benchmark harness measures cbc-otel with it; Linux only.
package procstat

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of utime and stime in /proc/PID/stat: the kernel
// exports them in USER_HZ ticks, fixed at 100 for user space on Linux.
const userHZ = 100

// ZombieCPU waits until pid has exited without reaping it (waitid with
// WNOWAIT), then reads its own user+system CPU from /proc/PID/stat, which
// a zombie keeps until it is reaped. The caller reaps it (cmd.Wait).
func ZombieCPU(pid int) (time.Duration, error) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINTR) {
			return 0, fmt.Errorf("waitid %d: %w", pid, err)
		}
	}
	return CPU(pid)
}

// CPU reads utime + stime of pid (all its threads, not its children)
// from /proc/PID/stat.
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("cpu of %d: %w", pid, err)
	}
	return parseStatCPU(string(b))
}

// parseStatCPU returns utime + stime (fields 14 and 15) of a /proc/PID/stat
// line. The command name (field 2) may hold spaces and parentheses, so the
// fields are counted from its closing parenthesis, the last one.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat %.40q: no command name", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("stat %.40q: too few fields", stat)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("stat utime/stime: %w", err)
	}
	return time.Duration(ut+st) * (time.Second / userHZ), nil
}
