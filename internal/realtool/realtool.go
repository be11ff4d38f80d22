// Package realtool finds the real programs some tests run (Prometheus,
// promtool, Jaeger, Helm, Node, the agent SDKs) and handles their absence
// the same way everywhere: the test is skipped with a message saying what
// is missing and how to get it, or fails when CI is set, since .ci/run
// installs them all.
//
// Every skip is recorded: when $CBC_SKIP_LOG names a file, a line
// "package test: tool: reason" is appended to it, and `make test` prints
// those lines at the end. Without that, `go test ./e2e/` says "ok" whether
// or not the end-to-end tests ran.
//
// It is internal because it is test support shared by this module's
// packages, not API.
package realtool

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// LogEnv names the environment variable holding the file skips are
// appended to; unset, skips are not recorded.
const LogEnv = "CBC_SKIP_LOG"

// Find returns the path of the program name: the file named by the
// environment variable env when env is not "" and set, else name looked up
// in PATH. When neither has it the test is Missing, the message ending
// with hint (how to get the program).
func Find(t testing.TB, name, env, hint string) string {
	t.Helper()
	if p, ok := FromEnv(t, name, env, hint); ok {
		return p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		how := hint
		if env != "" {
			how += "; or set " + env + " to its path"
		}
		Missing(t, name, fmt.Sprintf("%s not found in PATH (%s)", name, how))
	}
	return p
}

// FromEnv returns the path held by the environment variable env and true
// when it is set and names an existing file, or "" and false when it is
// unset (or env is ""): the caller then looks elsewhere, e.g. builds the
// tool from its pinned tools module. A path naming no file makes the test
// Missing: a wrong explicit path is a mistake, not a reason to look on.
func FromEnv(t testing.TB, name, env, hint string) (string, bool) {
	t.Helper()
	if env == "" {
		return "", false
	}
	p := os.Getenv(env)
	if p == "" {
		return "", false
	}
	if _, err := os.Stat(p); err != nil {
		Missing(t, name, fmt.Sprintf("%s: %v (%s)", env, err, hint))
	}
	return p, true
}

// Dir returns the absolute directory named by the environment variable
// env, or def when env is unset, once each of files (relative to it)
// exists; otherwise the test is Missing, name being what the directory
// provides and hint how to fill it.
func Dir(t testing.TB, name, env, def, hint string, files ...string) string {
	t.Helper()
	dir := os.Getenv(env)
	if dir == "" {
		dir = def
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(abs, f)); err != nil {
			what := "no " + f
			if !errors.Is(err, fs.ErrNotExist) {
				what = err.Error()
			}
			Missing(t, name, fmt.Sprintf("%s not installed in %s: %s (%s; or set %s)", name, abs, what, hint, env))
		}
	}
	return abs
}

// Missing ends a test whose real tool name is unavailable for reason: it
// is skipped and the skip recorded, or, when CI is set, it fails.
func Missing(t testing.TB, name, reason string) {
	t.Helper()
	if inCI() {
		t.Fatalf("realtool: CI is set and %s is unavailable: %s", name, reason)
	}
	skip(t, name, reason, fmt.Sprintf("realtool: skipping, %s is unavailable: %s (with CI=true this fails)", name, reason))
}

// Skip skips a test that needs the real tool name on purpose (-short, an
// explicit opt-out named in reason): the skip is recorded, and it is not
// a failure even when CI is set.
func Skip(t testing.TB, name, reason string) {
	t.Helper()
	skip(t, name, reason, fmt.Sprintf("realtool: skipping %s on purpose: %s", name, reason))
}

func skip(t testing.TB, name, reason, msg string) {
	t.Helper()
	if err := record(t.Name(), name, reason); err != nil {
		// The summary would hide this skip: fail rather than mislead.
		t.Errorf("realtool: recording the skip in $%s: %v", LogEnv, err)
	}
	t.Skip(msg)
}

// inCI reports whether CI is set to anything but a false value: CI
// systems set CI=true, and .ci/run does.
func inCI() bool {
	v := os.Getenv("CI")
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	return err != nil || b
}

// record appends "package test: tool: reason" to $CBC_SKIP_LOG, if set.
// Test binaries of several packages append to the file at once: each
// line is a single O_APPEND write, which keeps lines whole.
func record(test, name, reason string) error {
	path := os.Getenv(LogEnv)
	if path == "" {
		return nil
	}
	reason, _, cut := strings.Cut(reason, "\n") // build output follows
	if cut {
		reason += " …"
	}
	line := fmt.Sprintf("%s %s: %s: %s\n", pkg(), test, name, reason)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line)
	return errors.Join(err, f.Close())
}

// pkg names the package under test: go test runs a test binary in its
// package's directory, shown relative to the module root ("./e2e").
func pkg() string {
	wd, err := os.Getwd()
	if err != nil {
		return "?"
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return wd
		}
		dir = parent
	}
}

// Built returns the tool the environment variable env names, else builds
// it with the repository's pinned tools/<name>/build.sh into a directory of
// the test's (not with -short: the build takes minutes cold), else the test
// is Missing. hint says how to get the tool.
func Built(t testing.TB, name, env, hint string) string {
	t.Helper()
	if bin, ok := FromEnv(t, name, env, hint); ok {
		return bin
	}
	if testing.Short() {
		Missing(t, name, "-short: not building it from tools/"+name+" ("+hint+")")
	}
	script, err := toolScript(name)
	if err != nil {
		Missing(t, name, fmt.Sprintf("%v (%s)", err, hint))
	}
	dir := t.TempDir()
	if out, err := exec.Command("sh", script, dir).CombinedOutput(); err != nil {
		Missing(t, name, fmt.Sprintf("building it with tools/%s/build.sh: %v (%s)\n%s", name, err, hint, out))
	}
	return filepath.Join(dir, name)
}

// toolScript finds tools/<name>/build.sh in the working directory or above
// it (a test runs in its package's directory).
func toolScript(name string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "tools", name, "build.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no tools/%s/build.sh above the test's directory", name)
		}
		dir = parent
	}
}

// FreePorts reserves n distinct loopback ports and releases them for a
// tool to bind (a collision with another process is possible but rare).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}
