package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestProbeFlagNames: a binary whose `run -h` lists --traces.file gets the
// dotted names, one that lists --traces-file (a baseline from before the
// rename) the old ones, and one that cannot say (fails, prints nothing)
// the old ones, which every binary since has accepted.
func TestProbeFlagNames(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, help string
		want       string
	}{
		{"dotted", `  -summary.file string\n  -traces.file string\n    \talso write spans`, "--traces.file"},
		{"old", `  -summary-file string\n  -traces-file string\n    \talso write spans`, "--traces-file"},
		{"silent", ``, "--traces-file"},
	} {
		bin := filepath.Join(dir, tc.name)
		script := "#!/bin/sh\n[ \"$1 $2\" = \"run -h\" ] || exit 9\nprintf 'usage: cbc-otel run\\n\\nflags:\\n" + tc.help + "\\n' >&2\n"
		if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		if got := probeFlagNames(context.Background(), bin).of("traces.file", "traces-file"); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
