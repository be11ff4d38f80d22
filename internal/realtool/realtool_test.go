package realtool

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fakeT is a testing.TB that keeps how a helper ended the test. Skip and
// Fatal end the goroutine, as the real ones do, so that code after them
// does not run; the embedded nil TB makes any other method panic.
type fakeT struct {
	testing.TB
	skipped, fatal, errors []string
}

func (f *fakeT) Helper()      {}
func (f *fakeT) Name() string { return "TestFake/sub" }

func (f *fakeT) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeT) Skip(args ...any) {
	f.skipped = append(f.skipped, fmt.Sprint(args...))
	runtime.Goexit()
}

func (f *fakeT) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

func (f *fakeT) Fatalf(format string, args ...any) {
	f.fatal = append(f.fatal, fmt.Sprintf(format, args...))
	runtime.Goexit()
}

// call runs f with a fresh fakeT in its own goroutine and returns the fake
// and what f returned ("" when the test ended first).
func call(f func(testing.TB) string) (*fakeT, string) {
	ft := &fakeT{}
	var got string
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = f(ft)
	}()
	<-done
	return ft, got
}

// env is the environment of one case; every test sets all of it, so the
// CI and CBC_SKIP_LOG of the `make test` running this test do not leak in.
func env(t *testing.T, ci, path string) (logFile string) {
	t.Helper()
	logFile = filepath.Join(t.TempDir(), "skips")
	t.Setenv("CI", ci)
	t.Setenv(LogEnv, logFile)
	t.Setenv("PATH", path)
	t.Setenv("REALTOOL_TEST_BIN", "")
	return logFile
}

// executable writes an executable named name into dir.
func executable(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

func TestFind(t *testing.T) {
	binDir := t.TempDir()
	onPath := executable(t, binDir, "sometool")
	viaEnv := executable(t, t.TempDir(), "other-name")
	for _, c := range []struct {
		name       string
		ci         string
		path       string // PATH
		envValue   string // REALTOOL_TEST_BIN
		want       string // returned path; "" when the test must end
		skipped    bool
		fatal      bool
		logPattern string // in the skip log; "" for an empty log
	}{
		{name: "env var wins over PATH", path: binDir, envValue: viaEnv, want: viaEnv},
		{name: "PATH", path: binDir, want: onPath},
		{name: "missing: skipped and recorded", path: t.TempDir(), skipped: true,
			logPattern: "./internal/realtool TestFake/sub: sometool: sometool not found in PATH (apt-get install sometool; or set REALTOOL_TEST_BIN to its path)\n"},
		{name: "env var naming no file: skipped, not looked up in PATH", path: binDir, envValue: "/nonexistent/tool", skipped: true,
			logPattern: "TestFake/sub: sometool: REALTOOL_TEST_BIN: stat /nonexistent/tool"},
		{name: "CI=true: missing fails, nothing recorded", ci: "true", path: t.TempDir(), fatal: true},
		{name: "CI=1 is CI too", ci: "1", path: t.TempDir(), fatal: true},
		{name: "CI=false is not CI", ci: "false", path: t.TempDir(), skipped: true, logPattern: "sometool not found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			logFile := env(t, c.ci, c.path)
			t.Setenv("REALTOOL_TEST_BIN", c.envValue)
			ft, got := call(func(tb testing.TB) string {
				return Find(tb, "sometool", "REALTOOL_TEST_BIN", "apt-get install sometool")
			})
			if got != c.want {
				t.Errorf("Find = %q, want %q", got, c.want)
			}
			if (len(ft.skipped) > 0) != c.skipped || (len(ft.fatal) > 0) != c.fatal || len(ft.errors) > 0 {
				t.Errorf("skipped %q, fatal %q, errors %q; want skipped %v, fatal %v", ft.skipped, ft.fatal, ft.errors, c.skipped, c.fatal)
			}
			if c.skipped && !strings.Contains(ft.skipped[0], "with CI=true this fails") {
				t.Errorf("the skip does not say CI would fail: %q", ft.skipped[0])
			}
			if c.fatal && !strings.Contains(ft.fatal[0], "apt-get install sometool") {
				t.Errorf("the failure does not say how to get the tool: %q", ft.fatal[0])
			}
			log := readLog(t, logFile)
			if c.logPattern == "" && log != "" || !strings.Contains(log, c.logPattern) || strings.Count(log, "\n") > 1 {
				t.Errorf("skip log %q, want one line with %q", log, c.logPattern)
			}
		})
	}
}

func TestFromEnvUnsetLeavesTheChoiceToTheCaller(t *testing.T) {
	logFile := env(t, "true", t.TempDir())
	ft, got := call(func(tb testing.TB) string {
		p, ok := FromEnv(tb, "jaeger", "REALTOOL_TEST_BIN", "tools/jaeger/build.sh")
		return fmt.Sprintf("%q %v", p, ok)
	})
	if got != `"" false` || len(ft.skipped)+len(ft.fatal)+len(ft.errors) > 0 || readLog(t, logFile) != "" {
		t.Errorf("FromEnv = %s (skipped %q, fatal %q), want \"\" false and nothing else", got, ft.skipped, ft.fatal)
	}
}

func TestSkipIsRecordedAndNeverFails(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Run("CI="+ci, func(t *testing.T) {
			logFile := env(t, ci, t.TempDir())
			ft, _ := call(func(tb testing.TB) string {
				Skip(tb, "jaeger", "-short\nsecond line")
				return ""
			})
			if len(ft.skipped) != 1 || len(ft.fatal) > 0 {
				t.Errorf("skipped %q, fatal %q", ft.skipped, ft.fatal)
			}
			if log, want := readLog(t, logFile), "./internal/realtool TestFake/sub: jaeger: -short …\n"; log != want {
				t.Errorf("skip log %q, want %q", log, want)
			}
		})
	}
}

func TestSkipWithoutLog(t *testing.T) {
	env(t, "", t.TempDir())
	t.Setenv(LogEnv, "")
	ft, _ := call(func(tb testing.TB) string { Missing(tb, "helm", "none"); return "" })
	if len(ft.skipped) != 1 || len(ft.errors) > 0 {
		t.Errorf("skipped %q, errors %q", ft.skipped, ft.errors)
	}
}

func TestUnwritableLogFails(t *testing.T) {
	env(t, "", t.TempDir())
	t.Setenv(LogEnv, filepath.Join(t.TempDir(), "no", "such", "dir", "skips"))
	ft, _ := call(func(tb testing.TB) string { Missing(tb, "helm", "none"); return "" })
	if len(ft.errors) != 1 || len(ft.skipped) != 1 {
		t.Errorf("errors %q, skipped %q: want the lost record reported, then the skip", ft.errors, ft.skipped)
	}
}

func TestDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "node_modules", "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "node_modules", "a", "package.json"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, envValue string
		files          []string
		want           string
		skipped        bool
	}{
		{name: "from the env var", envValue: dir, files: []string{"node_modules/a/package.json"}, want: dir},
		{name: "a file missing", envValue: dir, files: []string{"node_modules/a/package.json", "node_modules/b/package.json"}, skipped: true},
		{name: "default when unset", files: []string{"realtool.go"}, want: mustAbs(t, ".")},
	} {
		t.Run(c.name, func(t *testing.T) {
			logFile := env(t, "", t.TempDir())
			t.Setenv("REALTOOL_TEST_DIR", c.envValue)
			ft, got := call(func(tb testing.TB) string {
				return Dir(tb, "npm packages", "REALTOOL_TEST_DIR", ".", "npm ci", c.files...)
			})
			if got != c.want || (len(ft.skipped) > 0) != c.skipped {
				t.Errorf("Dir = %q, skipped %q; want %q, skipped %v", got, ft.skipped, c.want, c.skipped)
			}
			if log := readLog(t, logFile); c.skipped != strings.Contains(log, "npm packages not installed in "+dir) {
				t.Errorf("skip log %q", log)
			}
		})
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The build script of a pinned tool is found from a test's directory, and
// FreePorts gives distinct loopback ports.
func TestToolScriptAndFreePorts(t *testing.T) {
	p, err := toolScript("jaeger")
	if err != nil || !strings.HasSuffix(p, filepath.Join("tools", "jaeger", "build.sh")) {
		t.Errorf("toolScript(jaeger) = %q, %v", p, err)
	}
	if _, err := toolScript("nosuch"); err == nil {
		t.Error("toolScript(nosuch) found a script")
	}
	ports := FreePorts(t, 4)
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Errorf("ports %v: want 4 distinct", ports)
		}
		seen[p] = true
	}
}
