package main

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
)

// writeSpool writes a complete spool file (header, then the stream) named
// so that it sorts by age.
func writeSpool(t *testing.T, dir string, age int, rec recording) string {
	t.Helper()
	path := filepath.Join(dir, "17962000000000000"+string(rune('0'+age))+"-1-00.cbcspool")
	if err := os.WriteFile(path, append([]byte("\x1ecbcspool 1\n"), rec.all()...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The spool never grows without bound: over --spool.max-bytes, complete
// files not yet processed are evicted oldest first and counted, the newest
// is processed; later, a processed file kept by --spool.keep goes first,
// without being counted as lost.
func TestServeSpoolEviction(t *testing.T) {
	dir := t.TempDir()
	recs := []recording{record(t, 11, "completed"), record(t, 12, "failed"), record(t, 13, "completed")}
	var paths []string
	var size int64
	for i, r := range recs {
		paths = append(paths, writeSpool(t, dir, i, r))
		fi, err := os.Stat(paths[i])
		if err != nil {
			t.Fatal(err)
		}
		size = max(size, fi.Size())
	}
	// Room for one file and a half: the two oldest must go.
	s := startServed(t, "--spool-dir", dir, "--spool.keep", "--spool.max-bytes", strconv.FormatInt(size*3/2, 10))
	s.waitFor(t, recs[2], "only the newest spool file processed")
	s.waitMetric(t, "cbc_otel_spool_evicted_total", "", "", 2)
	left := remaining(t, dir)
	if len(left) != 1 || left[0] != filepath.Base(paths[2]) {
		t.Fatalf("spool files left %v, want only the newest (kept after processing)", left)
	}

	// A new file: the kept, processed one makes room; nothing is lost.
	rec4 := record(t, 14, "failed")
	p4 := writeSpool(t, dir, 4, rec4)
	s.waitFor(t, sum(recs[2], rec4), "the new spool file processed")
	s.waitMetric(t, "cbc_otel_spool_evicted_total", "", "", 2)
	if left := remaining(t, dir); len(left) != 1 || left[0] != filepath.Base(p4) {
		t.Fatalf("spool files left %v, want only %s", left, filepath.Base(p4))
	}
	if code := s.stop(t); code != 0 {
		t.Fatalf("serve exit %d", code)
	}
}

func remaining(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.cbcspool*"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	sort.Strings(m)
	return m
}
