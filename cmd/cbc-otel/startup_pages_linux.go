package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// releaseStartupPages tells the kernel that run no longer needs the pages
// of its own executable's read-only segments (code and read-only data)
// that are mapped now, once start-up is over and before the child's
// output flows. Start-up (the package init of gRPC, protobuf, OpenTelemetry
// and Prometheus, flag parsing, the listeners) touches about 14 MiB of them
// and the kernel maps them in 64 KiB blocks around each fault; the
// pipeline's own working set is about half. They are clean and stay in the
// page cache, so what is used again comes back on a minor fault; but
// mapped, they were half of run's resident set and of every peak the
// README bounds (docs/reliability.md). It returns the bytes advised; a
// failure only costs the figure.
func releaseStartupPages() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("release start-up pages: %w", err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("release start-up pages: %w", err)
	}
	var total int64
	for line := range bytes.Lines(maps) {
		// address perms offset dev inode path
		f := bytes.Fields(line)
		if len(f) < 6 || string(bytes.Join(f[5:], []byte(" "))) != exe {
			continue
		}
		if perms := f[1]; len(perms) < 4 || perms[1] == 'w' || perms[3] != 'p' {
			continue // only private mappings never written: nothing is lost
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, uintptr(start), uintptr(end-start), syscall.MADV_DONTNEED); e != 0 {
			return total, fmt.Errorf("release start-up pages: madvise: %w", e)
		}
		total += int64(end - start)
	}
	return total, nil
}
