package chaos

// These tests run in `make test` (no build tag): they check how the fuzzing
// pass of chaos/run.sh judges a failed `go test -fuzz` run, against real
// failures of a throwaway module and the one failure Go's own coordinator
// makes (recorded from CI, as it cannot be provoked on demand).

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzlib runs a bash snippet with chaos/fuzzlib.sh sourced, in dir, with
// env added, and returns its trimmed standard output.
func fuzzlib(t *testing.T, dir string, env []string, script string, args ...string) string {
	t.Helper()
	lib, err := filepath.Abs("fuzzlib.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", append([]string{"-c", `set -euo pipefail; . "$0"; ` + script, lib}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash %q: %v\n%s%s", script, err, out, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// A module whose fuzz targets fail in each way a finding shows itself.
const fuzzModTest = `package fz

import "testing"

func FuzzFinds(f *testing.F) {
	f.Add([]byte("ab"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 3 {
			t.Fatalf("found %q", b)
		}
	})
}

func FuzzPanics(f *testing.F) {
	f.Add([]byte("ab"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 3 {
			panic("boom")
		}
	})
}

func FuzzSeedFails(f *testing.F) {
	f.Add([]byte("abcdef"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 3 {
			t.Errorf("seed fails")
		}
	})
}
`

func fuzzModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":     "module example.com/fz\n\ngo 1.26\n",
		"fz_test.go": fuzzModTest,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestFuzzFailureKind(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the fuzzing pass needs go on PATH: %v", err)
	}
	mod := fuzzModule(t)
	race, err := filepath.Abs("testdata/fuzz-deadline-race.log")
	if err != nil {
		t.Fatal(err)
	}
	logs := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(logs, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	canceled, err := os.ReadFile(race)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		log  func(t *testing.T) string
		want string
	}{
		{"the coordinator's race, recorded in CI", func(*testing.T) string { return race }, "deadline"},
		{"the same race under an interrupt", func(*testing.T) string {
			return write("canceled.log", strings.Replace(string(canceled), "context deadline exceeded", "context canceled", 1))
		}, "deadline"},
		{"a second message beside the deadline", func(*testing.T) string {
			return write("two.log", strings.Replace(string(canceled), "    context deadline exceeded\n",
				"    context deadline exceeded\n    fuzz_test.go:9: invariant broken\n", 1))
		}, "finding"},
		{"another error", func(*testing.T) string {
			return write("other.log", strings.Replace(string(canceled), "context deadline exceeded", "fuzzing process hung or terminated unexpectedly: exit status 2", 1))
		}, "finding"},
	}
	// Real failures: each target of the module, fuzzed until it fails.
	for _, target := range []string{"FuzzFinds", "FuzzPanics", "FuzzSeedFails"} {
		cases = append(cases, struct {
			name string
			log  func(t *testing.T) string
			want string
		}{"real " + target, func(t *testing.T) string {
			cmd := exec.Command(goBin, "test", "-run", "^$", "-fuzz", "^"+target+"$", "-fuzztime", "60s", "-parallel", "1", "-fuzzminimizetime", "2s", ".")
			cmd.Dir = mod
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("%s did not fail:\n%s", target, out)
			}
			return write(target+".log", string(out))
		}, "finding"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			log := c.log(t)
			if got := fuzzlib(t, logs, nil, `fuzz_failure_kind "$1"`, log); got != c.want {
				text, _ := os.ReadFile(log)
				t.Errorf("fuzz_failure_kind = %q, want %q; log:\n%s", got, c.want, text)
			}
		})
	}
}

// TestFuzzTargetVerdict drives fuzz_target with a fake go whose fuzzing run
// fails as the coordinator's race does: tolerated only when no input was
// written and the replay passes.
func TestFuzzTargetVerdict(t *testing.T) {
	race, err := filepath.Abs("testdata/fuzz-deadline-race.log")
	if err != nil {
		t.Fatal(err)
	}
	fake := `#!/usr/bin/env bash
# "go test ... -fuzz ..." prints the recorded race; a replay exits $REPLAY.
case " $* " in
*" -fuzz "*)
	cat "$RACE_LOG"
	if [ -n "${WRITE_INPUT:-}" ]; then mkdir -p testdata/fuzz/FuzzX && echo x >testdata/fuzz/FuzzX/0123; fi
	exit 1 ;;
*) exit "$REPLAY" ;;
esac
`
	cases := []struct {
		name               string
		replay, writeInput string
		want               string
	}{
		{"race, replay clean", "0", "", "ok-deadline"},
		{"race, replay fails", "1", "", "BREACH"},
		{"race, an input written", "0", "1", "BREACH"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			goBin := filepath.Join(dir, "go")
			if err := os.WriteFile(goBin, []byte(fake), 0o755); err != nil {
				t.Fatal(err)
			}
			got := fuzzlib(t, dir, []string{"GO=" + goBin, "FUZZ_PKG=.", "RACE_LOG=" + race, "REPLAY=" + c.replay, "WRITE_INPUT=" + c.writeInput},
				`fuzz_target FuzzX 1s "$1"`, filepath.Join(dir, "fuzz.log"))
			if got != c.want {
				t.Errorf("fuzz_target = %q, want %q", got, c.want)
			}
		})
	}
	// And a run that passes is ok whatever else holds.
	dir := t.TempDir()
	goBin := filepath.Join(dir, "go")
	if err := os.WriteFile(goBin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := fuzzlib(t, dir, []string{"GO=" + goBin, "FUZZ_PKG=."}, `fuzz_target FuzzX 1s "$1"`, filepath.Join(dir, "fuzz.log")); got != "ok" {
		t.Errorf("fuzz_target on a passing run = %q, want ok", got)
	}
}
