package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/internal/testbin"
	"github.com/cbc-otel/cbc-otel/supervise/supervisetest"
	"github.com/cbc-otel/cbc-otel/tap"
)

// wrapperBin is the cbc-otel binary built once by TestMain for the
// end-to-end cases; testExe is this test binary, which plays the child.
var wrapperBin, testExe string

func TestMain(m *testing.M) {
	if dir := os.Getenv(fakeCLIEnv); dir != "" {
		os.Exit(fakeCLI(dir))
	}
	if mode := supervisetest.Mode(); mode != "" {
		os.Exit(supervisetest.RunChild(mode, os.Args[1:]))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	// The wrappers the tests start must not append to the CI's own step
	// summary; TestE2EStepSummary sets its own.
	os.Unsetenv("GITHUB_STEP_SUMMARY")
	os.Unsetenv("GITHUB_OUTPUT") // nor to its step outputs
	dir, err := os.MkdirTemp("", "cbc-otel-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	wrapperBin = filepath.Join(dir, "cbc-otel")
	if _, err := testbin.Build(context.Background(), wrapperBin); err != nil {
		fmt.Fprintln(os.Stderr, "building cbc-otel:", err)
		return 1
	}
	if testExe, err = os.Executable(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// --- in-process -----------------------------------------------------------

func TestRunConfigValidate(t *testing.T) {
	ok := defaultRunConfig()
	ok.command = []string{"cat"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("default config with a command: %v", err)
	}
	for name, mutate := range map[string]func(*runConfig){
		"no command":     func(c *runConfig) { c.command = nil },
		"kill timeout":   func(c *runConfig) { c.killTimeout = 0 },
		"drain timeout":  func(c *runConfig) { c.drainTimeout = -time.Second },
		"log level":      func(c *runConfig) { c.logLevel = "verbose" },
		"tap queue tiny": func(c *runConfig) { c.tapQueue = 10 },
	} {
		c := ok
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
}

// testRunner returns a runner that neither touches the test process's
// signals nor watches its parent.
func testRunner(sigs <-chan os.Signal) runner {
	return runner{
		signals:      func() (<-chan os.Signal, func()) { return sigs, func() {} },
		consumerWait: 10 * time.Second,
	}
}

// childArgs wraps the fake child. No metrics endpoint: tests run side by
// side and would contend for the default port.
func childArgs(flags ...string) []string {
	return append(append([]string{"--web.listen-address="}, flags...), "--", testExe)
}

func TestRunUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{nil, exitUsage},
		{[]string{"--"}, exitUsage},
		{[]string{"--nope", "--", "true"}, exitUsage},
		{[]string{"--kill-timeout=-1s", "--", "true"}, exitUsage},
		{[]string{"--log.level=loud", "--", "true"}, exitUsage},
		{[]string{"-h"}, exitOK},
	} {
		var out, errb bytes.Buffer
		r := testRunner(nil)
		if code := r.run(context.Background(), tc.args, stdio{in: strings.NewReader(""), out: &out, err: &errb}); code != tc.code {
			t.Errorf("run %q = %d, want %d (stderr %q)", tc.args, code, tc.code, errb.String())
		}
		if out.Len() != 0 {
			t.Errorf("run %q wrote %q to stdout, which belongs to the child", tc.args, out.String())
		}
		if errb.Len() == 0 {
			t.Errorf("run %q explained nothing on stderr", tc.args)
		}
	}
}

// In-process, through the real taps and the ingest pipeline: bytes pass,
// the exit code is the child's, the counts are logged at debug (the
// unterminated last line counts as a line).
func TestRunInProcess(t *testing.T) {
	t.Setenv(supervisetest.EnvMode, "cat")
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	in := "one\ntwo\r\nthree"
	var out, errb bytes.Buffer
	r := testRunner(nil)
	code := r.run(context.Background(), childArgs("--log.level=debug"), stdio{in: strings.NewReader(in), out: &out, err: &errb})
	if code != 0 || out.String() != in {
		t.Fatalf("run = %d, out %q; stderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"source=stdout lines=3 bytes=14", "source=stdin lines=3 bytes=14"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
}

// A telemetry consumer that is stuck neither slows nor breaks the pipe nor
// changes the exit status: all bytes pass, the taps count the drops, and run
// gives up waiting for the consumer.
func TestRunStuckConsumer(t *testing.T) {
	t.Setenv(supervisetest.EnvMode, "cat")
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	in := supervisetest.Pattern(16 << 20)
	release := make(chan struct{})
	type stats struct{ outIn, outDropped, inIn, inDropped int64 }
	got := make(chan stats, 1)
	r := testRunner(nil)
	r.consumerWait = time.Millisecond
	r.consume = func(stdout, stdin *tap.Tap, _ *slog.Logger) {
		<-release // stuck until the test is done with run
		var s stats
		s.outIn, s.outDropped, _ = stdout.Stats()
		s.inIn, s.inDropped, _ = stdin.Stats()
		got <- s
	}
	h := sha256.New()
	var errb bytes.Buffer
	code := r.run(context.Background(), childArgs("--tap-queue=65536"), stdio{in: bytes.NewReader(in), out: h, err: &errb})
	close(release)
	if code != 0 {
		t.Fatalf("run = %d; stderr:\n%s", code, errb.String())
	}
	if want := sha256.Sum256(in); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("output differs from input")
	}
	s := <-got
	n := int64(len(in))
	if s.outIn != n || s.inIn != n || s.outDropped < n-(64<<10) || s.inDropped < n-(64<<10) {
		t.Fatalf("tap stats %+v: want %d tapped, all but the queue dropped", s, n)
	}
}

// --- end to end: the built binary -----------------------------------------

// wrapper returns the command `cbc-otel run FLAGS -- <test binary>` whose
// child behaves as mode.
func wrapper(mode string, flags ...string) *exec.Cmd {
	cmd := exec.Command(wrapperBin, append([]string{"run"}, childArgs(flags...)...)...)
	cmd.Env = supervisetest.Env(mode)
	return cmd
}

// exitCode waits for cmd with a failsafe deadline and returns its exit code.
func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("wait: %v", err)
		}
		if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return cmd.ProcessState.ExitCode()
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the wrapper did not exit")
		return -1
	}
}

func start(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
}

// lines reads lines from r with a failsafe deadline per line.
type lines struct {
	t *testing.T
	c chan string
}

func readLines(t *testing.T, r io.Reader) *lines {
	l := &lines{t: t, c: make(chan string, 100)}
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			l.c <- s.Text()
		}
		close(l.c)
	}()
	return l
}

func (l *lines) next() string {
	l.t.Helper()
	select {
	case s, ok := <-l.c:
		if !ok {
			l.t.Fatal("stream ended while waiting for a line")
		}
		return s
	case <-time.After(30 * time.Second):
		l.t.Fatal("no line within 30s")
		return ""
	}
}

func TestE2EExitCodes(t *testing.T) {
	dir := t.TempDir()
	noExec := filepath.Join(dir, "noexec")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cmd  *exec.Cmd
		code int
	}{
		{"exit 0", wrapper("exit:0"), 0},
		{"exit 1", wrapper("exit:1"), 1},
		{"exit 7", wrapper("exit:7"), 7},
		{"SIGKILL", wrapper("killself:9"), 137},
		{"SIGTERM", wrapper("killself:15"), 143},
		{"not found", exec.Command(wrapperBin, "run", "--", filepath.Join(dir, "missing")), 127},
		{"not found in PATH", exec.Command(wrapperBin, "run", "--", "cbc-otel-no-such-command"), 127},
		{"not executable", exec.Command(wrapperBin, "run", "--", noExec), 126},
		{"no command", exec.Command(wrapperBin, "run"), 2},
		{"bad flag", exec.Command(wrapperBin, "run", "--bogus", "--", "true"), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			tc.cmd.Stdout, tc.cmd.Stderr = &out, &errb
			start(t, tc.cmd)
			if code := exitCode(t, tc.cmd); code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, errb.String())
			}
			if out.Len() != 0 {
				t.Fatalf("stdout %q: the wrapper must never write to stdout", out.String())
			}
		})
	}
}

// Nothing of cbc-otel's own reaches stdout, even with debug logging.
func TestE2EOwnOutputOnlyOnStderr(t *testing.T) {
	cmd := wrapper("stdio", "--log.level=debug")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start(t, cmd)
	if code := exitCode(t, cmd); code != 0 || out.String() != "out" {
		t.Fatalf("exit %d, stdout %q", code, out.String())
	}
	if !strings.HasPrefix(errb.String(), "err") && !strings.Contains(errb.String(), "err") || !strings.Contains(errb.String(), "level=DEBUG") {
		t.Fatalf("stderr %q: want the child's and the debug logs", errb.String())
	}
}

// roundTrip pipes gen's output through `cbc-otel run -- cat` and compares
// hashes without keeping either side in memory; mid runs once all input is
// written, before stdin is closed, while the wrapper is still alive.
func roundTrip(t *testing.T, gen func(io.Writer) error, mid func(pid int)) {
	t.Helper()
	cmd := wrapper("cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	start(t, cmd)
	inHash := make(chan []byte, 1)
	go func() {
		h := sha256.New()
		if err := gen(io.MultiWriter(stdin, h)); err != nil {
			t.Error(err)
		}
		if mid != nil {
			mid(cmd.Process.Pid)
		}
		stdin.Close()
		inHash <- h.Sum(nil)
	}()
	h := sha256.New()
	n, err := io.Copy(h, stdout)
	if err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d; stderr %q", code, errb.String())
	}
	if want := <-inHash; !bytes.Equal(h.Sum(nil), want) {
		t.Fatalf("output (%d bytes) differs from input", n)
	}
}

func TestE2ERoundTrip(t *testing.T) {
	for name, data := range map[string][]byte{
		"empty":        nil,
		"no newline":   []byte(`{"a":1}`),
		"crlf nul":     []byte("a\r\n\x00b\r\n\x00"),
		"invalid utf8": {0xff, 0xfe, 0xc3, 0x28, '\n', 0xe2, 0x82},
		"binary 5 MiB": supervisetest.Pattern(5<<20 + 3),
	} {
		t.Run(name, func(t *testing.T) {
			roundTrip(t, func(w io.Writer) error { _, err := w.Write(data); return err }, nil)
		})
	}
}

// vmHWM returns the peak resident set of pid in KiB.
func vmHWM(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, errors.New("no VmHWM")
}

// One 300 MiB line, generated on the fly, passes byte-exact while the
// wrapper's peak RSS stays far below the line's size.
func TestE2EHugeLineBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("300 MiB through the wrapper; skipped with -short")
	}
	const size = 300 << 20
	roundTrip(t, func(w io.Writer) error {
		block := bytes.Repeat([]byte(`{"k":"v\u00e9\u0000"},`), 1<<20/20)
		for n := 0; n < size; n += len(block) {
			if _, err := w.Write(block); err != nil {
				return err
			}
		}
		_, err := w.Write([]byte("\n"))
		return err
	}, func(pid int) {
		kib, err := vmHWM(pid)
		if err != nil {
			t.Errorf("reading the wrapper's VmHWM: %v", err)
			return
		}
		t.Logf("wrapper VmHWM after a %d MiB line: %d KiB", size>>20, kib)
		if kib > 64<<10 {
			t.Errorf("wrapper VmHWM %d KiB > 64 MiB: memory grows with the line", kib)
		}
	})
}

// Lines are delivered as the child writes them (it waits for our reply
// before the next one).
func TestE2EStreaming(t *testing.T) {
	cmd := wrapper("pingpong")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	start(t, cmd)
	l := readLines(t, stdout)
	for i := 1; i <= 3; i++ {
		if got, want := l.next(), fmt.Sprintf("line %d", i); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		fmt.Fprintf(stdin, "ack %d\n", i)
	}
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// Every forwarded signal sent to the wrapper reaches the child.
func TestE2ESignalsForwarded(t *testing.T) {
	cmd := wrapper("sigreport")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	start(t, cmd)
	l := readLines(t, stdout)
	if got := l.next(); got != "ready" {
		t.Fatalf("got %q", got)
	}
	for _, s := range supervisetest.ForwardedSignals {
		if err := cmd.Process.Signal(s); err != nil {
			t.Fatal(err)
		}
		if got, want := l.next(), fmt.Sprintf("sig %d", s); got != want {
			t.Fatalf("sent %v to the wrapper; child said %q, want %q", s, got, want)
		}
	}
	stdin.Close()
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// A child that ignores SIGTERM is killed --kill-timeout after the wrapper
// is told to stop.
func TestE2EKillTimeout(t *testing.T) {
	cmd := wrapper("ignore-term", "--kill-timeout=300ms")
	stdout, _ := cmd.StdoutPipe()
	start(t, cmd)
	if got := readLines(t, stdout).next(); got != "ready" {
		t.Fatalf("got %q", got)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if code := exitCode(t, cmd); code != 137 {
		t.Fatalf("exit %d, want 137", code)
	}
}

func parsePids(t *testing.T, line string) (child, grandchild int) {
	t.Helper()
	if _, err := fmt.Sscanf(line, "child %d grandchild %d", &child, &grandchild); err != nil {
		t.Fatalf("parse %q: %v", line, err)
	}
	return child, grandchild
}

// A grandchild holding stdout neither hangs the wrapper nor survives it,
// whether the child exits by itself or the wrapper is stopped.
func TestE2EGrandchild(t *testing.T) {
	for _, tc := range []struct {
		mode string
		stop bool
		code int
	}{{"grandchild", false, 0}, {"grandchild-wait", true, 143}} {
		t.Run(tc.mode, func(t *testing.T) {
			cmd := wrapper(tc.mode, "--drain-timeout=300ms")
			stdout, _ := cmd.StdoutPipe()
			start(t, cmd)
			l := readLines(t, stdout)
			child, gc := parsePids(t, l.next())
			if got := l.next(); got != fmt.Sprintf("pid %d", gc) {
				t.Fatalf("got %q", got)
			}
			if tc.stop {
				cmd.Process.Signal(syscall.SIGTERM)
			}
			if code := exitCode(t, cmd); code != tc.code {
				t.Fatalf("exit %d, want %d", code, tc.code)
			}
			for _, pid := range []int{child, gc} {
				if !supervisetest.WaitGone(pid, 10*time.Second) {
					t.Errorf("process %d of the child's group survived the wrapper", pid)
				}
			}
		})
	}
}

// SIGKILL on the wrapper (no chance to clean up): Pdeathsig kills the child.
func TestE2EWrapperKilled(t *testing.T) {
	cmd := wrapper("sleeper")
	stdout, _ := cmd.StdoutPipe()
	start(t, cmd)
	var pid int
	if _, err := fmt.Sscanf(readLines(t, stdout).next(), "pid %d", &pid); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	exitCode(t, cmd)
	if !supervisetest.WaitGone(pid, 10*time.Second) {
		t.Fatalf("child %d survived its wrapper's SIGKILL", pid)
	}
}

// The wrapper's parent dies: the wrapper sees it (supervise.WatchParent),
// stops the child as on SIGTERM and exits.
func TestE2EParentDies(t *testing.T) {
	parent := exec.Command(testExe, wrapperBin, "run", "--", testExe)
	parent.Env = supervisetest.Env("spawn-wrapper:sleeper")
	stdout, _ := parent.StdoutPipe()
	stderr, _ := parent.StderrPipe()
	start(t, parent)
	var wpid, cpid int
	if _, err := fmt.Sscanf(readLines(t, stderr).next(), "wrapper %d", &wpid); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(readLines(t, stdout).next(), "pid %d", &cpid); err != nil {
		t.Fatal(err)
	}
	parent.Process.Kill()
	exitCode(t, parent)
	for what, pid := range map[string]int{"child": cpid, "wrapper": wpid} {
		if !supervisetest.WaitGone(pid, 20*time.Second) {
			t.Errorf("%s %d survived the death of the wrapper's parent", what, pid)
		}
	}
}

// The wrapper is started from a thread that exits while its process lives
// on (a Python or Java worker thread, a locked Go thread): the run goes on
// to the child's own end. Under PR_SET_PDEATHSIG the kernel took that
// thread's exit for the parent's death, and the wrapper stopped its child
// with SIGTERM (exit 143); the chaos suite's pinned starts found it.
func TestE2EStarterThreadExits(t *testing.T) {
	cmd := wrapper("pingpong")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out := readLines(t, stdout)
	// The child's first line means the wrapper has set itself up: the
	// thread exits after whatever watch of its parent the wrapper makes.
	first := make(chan string, 1)
	err = supervisetest.StartFromExitingThread(cmd, func() error {
		// Not out.next: t.Fatal belongs to the test's goroutine.
		select {
		case l, ok := <-out.c:
			if !ok {
				return errors.New("the wrapper's stdout ended before its first line")
			}
			first <- l
			return nil
		case <-time.After(30 * time.Second):
			return errors.New("no first line within 30 s")
		}
	}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	if got := <-first; got != "line 1" {
		t.Fatalf("first line %q", got)
	}
	for i := 1; i <= 3; i++ {
		if i > 1 {
			if got := out.next(); got != fmt.Sprintf("line %d", i) {
				t.Fatalf("got %q, want line %d; stderr %q", got, i, errb.String())
			}
		}
		fmt.Fprintf(stdin, "ack %d\n", i)
	}
	stdin.Close()
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d, want 0 (the child's); stderr %q", code, errb.String())
	}
}

// The consumer of our stdout goes away: the child sees SIGPIPE (or EPIPE
// when it ignores SIGPIPE) and the wrapper mirrors its status.
func TestE2EStdoutClosedEarly(t *testing.T) {
	for _, tc := range []struct {
		mode string
		code int
	}{{"yes", 141}, {"epipe", 3}, {"coreutils yes", 141}} {
		t.Run(tc.mode, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd := wrapper(tc.mode)
			if tc.mode == "coreutils yes" {
				// A Go child reinstalls its SIGPIPE handler whatever it
				// inherits; a C program keeps the inherited disposition, so
				// only it shows that the wrapper did not leave SIGPIPE
				// ignored (it would print an error and exit 1).
				yes, err := exec.LookPath("yes")
				if err != nil {
					t.Skip("no yes(1) here")
				}
				cmd = exec.Command(wrapperBin, "run", "--", yes)
			}
			cmd.Stdout = w // a real pipe: the wrapper's fd 1 gets EPIPE
			var errb bytes.Buffer
			cmd.Stderr = &errb
			start(t, cmd)
			w.Close()
			io.ReadFull(r, make([]byte, 1<<20))
			r.Close()
			if code := exitCode(t, cmd); code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, errb.String())
			}
		})
	}
}

// The examples of `run -h` are valid command lines: each parses and
// validates, and wraps a command.
func TestRunUsageExamples(t *testing.T) {
	shell := strings.NewReplacer(`"$@"`, "", `"$GITHUB_STEP_SUMMARY"`, "summary.md", `"Review the diff"`, "review")
	n := 0
	for line := range strings.Lines(runUsage) {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "exec "))
		if !strings.HasPrefix(line, "cbc-otel run ") {
			continue
		}
		n++
		args := strings.Fields(shell.Replace(line))[2:]
		cfg, ok, code := parseRunArgs(args, io.Discard)
		if !ok || len(cfg.command) == 0 || cfg.command[0] != "claude" {
			t.Errorf("example %q: ok %v, code %d, command %q", line, ok, code, cfg.command)
		}
	}
	if n < 3 {
		t.Errorf("%d examples in run's usage, want 3", n)
	}
}
