// Package golden compares test output with committed golden files, and
// rewrites them when the test binary runs with -update:
//
//	go test ./report/ -update
//
// It is internal because it is test support shared by this module's
// packages, not API: nothing outside the module should build on it.
package golden

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Update is the -update flag of every test binary that imports this
// package: rewrite the golden files instead of comparing with them. It is
// registered here, once, so that no two test files of a package can
// define it twice.
var Update = flag.Bool("update", false, "rewrite the golden files from the current output instead of comparing with them")

// maxLines bounds the differing lines Diff shows: enough to see the
// pattern, short enough to read.
const maxLines = 10

// Assert compares got with the golden file at path and reports a readable
// diff of the first differing lines; with -update it writes got to path
// (creating its directory) instead.
func Assert(t testing.TB, path string, got []byte) {
	t.Helper()
	if *Update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (rerun with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale (rerun with -update to rewrite it, then review the diff):\n%s", path, Diff(string(want), string(got)))
	}
}

// Diff describes how got differs from want, line by line: the first
// differing lines (at most ten) with their numbers, and the count of the
// others. It returns "" when they are equal.
func Diff(want, got string) string {
	if want == got {
		return ""
	}
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	if len(w) != len(g) {
		fmt.Fprintf(&b, "want %d lines, got %d\n", len(w), len(g))
	}
	shown, more := 0, 0
	for i := range max(len(w), len(g)) {
		wl, wok := line(w, i)
		gl, gok := line(g, i)
		if wl == gl && wok == gok {
			continue
		}
		if shown == maxLines {
			more++
			continue
		}
		shown++
		fmt.Fprintf(&b, "line %d:\n  want %s\n  got  %s\n", i+1, show(wl, wok), show(gl, gok))
	}
	if more > 0 {
		fmt.Fprintf(&b, "… and %d more differing lines\n", more)
	}
	return b.String()
}

// line returns lines[i] and whether it exists.
func line(lines []string, i int) (string, bool) {
	if i < len(lines) {
		return lines[i], true
	}
	return "", false
}

// show quotes a line so that trailing spaces, tabs and control bytes are
// visible, and marks a line that does not exist.
func show(l string, ok bool) string {
	if !ok {
		return "(no line)"
	}
	return fmt.Sprintf("%q", l)
}
