package main

import (
	"bytes"
	"os"
	"strconv"
	"testing"
)

// rssFileKiB is this process's resident file-backed memory (RssFile).
func rssFileKiB(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(line, []byte("RssFile:")); ok {
			f := bytes.Fields(rest)
			n, err := strconv.ParseInt(string(f[0]), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// TestReleaseStartupPages: the read-only segments of the executable are
// advised away, the resident set falls by most of them, and the process
// runs on (the pages it uses come back on a fault).
func TestReleaseStartupPages(t *testing.T) {
	before := rssFileKiB(t)
	n, err := releaseStartupPages()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKiB(t)
	if n <= 0 {
		t.Fatalf("advised %d bytes: no read-only segment of the executable found", n)
	}
	if after >= before/2 {
		t.Errorf("RssFile %d KiB before, %d KiB after: want at most half", before, after)
	}
	t.Logf("advised %d KiB; RssFile %d -> %d KiB", n>>10, before, after)
	// Code that ran before runs again.
	if again := rssFileKiB(t); again <= 0 {
		t.Fatalf("RssFile %d KiB", again)
	}
}
