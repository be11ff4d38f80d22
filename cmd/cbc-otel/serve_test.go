package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cbc-otel/cbc-otel/internal/oteltest"
)

// served is a running `cbc-otel serve`.
type served struct {
	cmd    *exec.Cmd
	addr   string
	stderr *oteltest.SyncBuffer
	exited chan struct{}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startServed(t *testing.T, args ...string) *served {
	t.Helper()
	addr := freeAddr(t)
	return startBin(t, addr, append([]string{"serve", "--web.listen-address", addr, "--follow.poll-interval", "20ms", "--tracker.grace", "200ms"}, args...)...)
}

// startBin runs the built binary with args, its listen address addr, and
// kills it when the test ends (its stderr logged if the test failed).
func startBin(t *testing.T, addr string, args ...string) *served {
	t.Helper()
	s := &served{addr: addr, stderr: new(oteltest.SyncBuffer), exited: make(chan struct{})}
	s.cmd = exec.Command(wrapperBin, args...)
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			s.cmd.Process.Kill()
			<-s.exited
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", args[0], s.stderr)
		}
	})
	return s
}

// stop sends SIGTERM and returns the exit code.
func (s *served) stop(t *testing.T) int {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop after SIGTERM")
	}
	return s.cmd.ProcessState.ExitCode()
}

// metric sums a family's series by one label ("" sums everything).
func (s *served) metric(name, label string) (map[string]float64, error) {
	resp, err := http.Get("http://" + s.addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return sumFamily(resp.Body, name, label)
}

// sumFamily sums a family of a text exposition by one label ("" sums
// everything).
func sumFamily(r io.Reader, name, label string) (map[string]float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	mf := fams[name]
	if mf == nil {
		return out, nil
	}
	for _, m := range mf.Metric {
		key := ""
		for _, l := range m.Label {
			if l.GetName() == label {
				key = l.GetValue()
			}
		}
		out[key] += value(m)
	}
	return out, nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// poll calls f every 20 ms until it is true or the deadline passes.
func poll(t *testing.T, timeout time.Duration, what string, f func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, detail := f()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v: %s", what, timeout, detail)
		}
		<-tick.C
	}
}

// recording is a simulated session's stdout and its ground truth.
type recording struct {
	lines  [][]byte
	runs   map[string]float64 // workflow runs by status
	agents float64
	tokens float64
}

// record runs simulate on the given scenarios and keeps what it wrote.
func record(t *testing.T, seed int, scenarios ...string) recording {
	t.Helper()
	dir := t.TempDir()
	var in bytes.Buffer
	for i, sc := range scenarios {
		fmt.Fprintf(&in, `{"type":"user","message":{"role":"user","content":"[[SCENARIO:%s]] %d"}}`+"\n", sc, i)
	}
	exp := filepath.Join(dir, "expect.ndjson")
	cmd := exec.Command(wrapperBin, "simulate", "--speed", "0", "--noise", "200", "--agents", "5", "--seed", fmt.Sprint(seed), "--expect", exp)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("simulate: %v", err)
	}
	rec := recording{lines: bytes.SplitAfter(out, []byte("\n")), runs: map[string]float64{}}
	b, err := os.ReadFile(exp)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var r struct {
			Kind, Status string
			Tokens       float64
			Agents       []json.RawMessage
		}
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		if r.Kind == "workflow" {
			rec.runs[r.Status]++
			rec.tokens += r.Tokens
			rec.agents += float64(len(r.Agents))
		}
	}
	return rec
}

// split returns the stream cut just before its first task_notification, so
// that the first part leaves a workflow open.
func (r recording) split() (head, tail []byte) {
	for i, l := range r.lines {
		if bytes.Contains(l, []byte(`"task_notification"`)) {
			return bytes.Join(r.lines[:i], nil), bytes.Join(r.lines[i:], nil)
		}
	}
	return bytes.Join(r.lines, nil), nil
}

func (r recording) all() []byte { return bytes.Join(r.lines, nil) }

// matches reports how serve's totals differ from want ("" if equal).
func (s *served) matches(want recording) string { return want.differs(s.metric) }

// differs reports how the totals metric reads differ from r's ("" if
// equal).
func (r recording) differs(metric func(name, label string) (map[string]float64, error)) string {
	want := r
	runs, err := metric("cbc_workflow_runs_total", "status")
	if err != nil {
		return err.Error()
	}
	var diffs []string
	for _, st := range []string{"completed", "failed", "stopped", "abandoned"} {
		if runs[st] != want.runs[st] {
			diffs = append(diffs, fmt.Sprintf("%s %v want %v", st, runs[st], want.runs[st]))
		}
	}
	agents, _ := metric("cbc_workflow_agents_total", "")
	tokens, _ := metric("cbc_workflow_tokens_total", "")
	if agents[""] != want.agents || tokens[""] != want.tokens {
		diffs = append(diffs, fmt.Sprintf("agents %v want %v, tokens %v want %v", agents[""], want.agents, tokens[""], want.tokens))
	}
	return strings.Join(diffs, "; ")
}

func appendFile(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

func (s *served) waitFor(t *testing.T, want recording, what string) {
	t.Helper()
	poll(t, 20*time.Second, what, func() (bool, string) {
		d := s.matches(want)
		return d == "", d
	})
}

func (s *served) waitMetric(t *testing.T, name, label, key string, want float64) {
	t.Helper()
	poll(t, 20*time.Second, fmt.Sprintf("%s{%s=%q} = %v", name, label, key, want), func() (bool, string) {
		m, err := s.metric(name, label)
		if err != nil {
			return false, err.Error()
		}
		return m[key] == want, fmt.Sprint(m)
	})
}

// A file written by `cbc ... | tee`: followed as it grows, finalized after
// the idle timeout; a restart after SIGTERM does not count it again.
func TestServeTeeFileIdleAndRestart(t *testing.T) {
	rec := record(t, 1, "completed", "failed", "mixed")
	dir, state := t.TempDir(), t.TempDir()
	f := filepath.Join(dir, "session.ndjson")
	head, tail := rec.split()
	appendFile(t, f, head)
	s := startServed(t, "--follow.glob", filepath.Join(dir, "*.ndjson"), "--state.dir", state, "--follow.idle-timeout", "700ms")
	s.waitMetric(t, "cbc_workflow_runs_active", "", "", 1)
	appendFile(t, f, tail)
	s.waitFor(t, rec, "totals of the tee'd file")
	s.waitMetric(t, "cbc_otel_follow_streams_finalized_total", "reason", "idle", 1)
	if code := s.stop(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	// The same state: totals restored, the file not read again.
	s2 := startServed(t, "--follow.glob", filepath.Join(dir, "*.ndjson"), "--state.dir", state, "--follow.idle-timeout", "700ms")
	poll(t, 10*time.Second, "ready", func() (bool, string) {
		resp, err := http.Get("http://" + s2.addr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	if d := s2.matches(rec); d != "" {
		t.Fatalf("after a restart: %s", d)
	}
	if m, _ := s2.metric("cbc_otel_follow_streams", ""); m[""] != 0 {
		t.Fatalf("the finished file is followed again: %v", m)
	}
	// The runs page lists none of them, and says where they are counted.
	n := 0.0
	for _, v := range rec.runs {
		n += v
	}
	resp, err := http.Get("http://" + s2.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"No workflow run has finished since this process started.", fmt.Sprintf("%.0f workflow runs finished before the last restart: counted in /metrics", n)} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the runs page after a restart lacks %q", want)
		}
	}
}

// A state directory that cannot be written is an error at start (exit 1),
// not a silent loss at the first checkpoint.
func TestServeStateDirReadOnly(t *testing.T) {
	state := t.TempDir()
	if err := os.Chmod(state, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(state, 0o700) })
	if os.Geteuid() == 0 {
		state = "/proc" // root writes anywhere else
	}
	cmd := exec.Command(wrapperBin, "serve", "--follow.glob", filepath.Join(t.TempDir(), "*"), "--state.dir", state, "--web.listen-address", freeAddr(t))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != exitFailure || !strings.Contains(stderr.String(), "not writable") {
		t.Fatalf("exit %d (%v), stderr %q; want 1 and a clear message", code, err, stderr.String())
	}
}

func TestServeUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--follow.glob", "[", "--web.listen-address", ""},
		{"--spool.dir", "x", "--push.gateway", "http://h:1"},
		{"--spool.dir", "x", "--follow.idle-timeout", "0s"},
		{"--spool.dir", "x", "extra"},
	} {
		cmd := exec.Command(wrapperBin, append([]string{"serve"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != exitUsage {
			t.Errorf("serve %q: exit %d, want 2; stderr %s", args, code, stderr.String())
		}
	}
}

// run --spool.dir: the spool file is complete when the wrapper exits; with
// a missing directory the passthrough still works and the failure is
// logged; telemetry output flags without --spool.process are refused.
func TestRunSpoolDir(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(wrapperBin, "run", "--spool.dir", dir, "--", "sh", "-c", "echo '{\"a\":1}'; printf '\\036odd\\n'")
	out, err := cmd.Output()
	if err != nil || string(out) != "{\"a\":1}\n\x1eodd\n" {
		t.Fatalf("passthrough %q, %v", out, err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) != 1 || !strings.HasSuffix(files[0], ".cbcspool") {
		t.Fatalf("spool files %v", files)
	}
	b, _ := os.ReadFile(files[0])
	if want := "\x1ecbcspool 1\n{\"a\":1}\n\x1estdout \x1eodd\n"; string(b) != want {
		t.Fatalf("spool file %q, want %q", b, want)
	}

	cmd = exec.Command(wrapperBin, "run", "--spool.dir", filepath.Join(dir, "missing"), "--", "echo", "hi")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	if err != nil || string(out) != "hi\n" || !strings.Contains(stderr.String(), "not spooled") {
		t.Fatalf("missing spool dir: out %q err %v stderr %q", out, err, stderr.String())
	}

	cmd = exec.Command(wrapperBin, "run", "--spool.dir", dir, "--otlp.endpoint", "localhost:4317", "--", "true")
	cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != exitUsage {
		t.Fatalf("--otlp.endpoint without --spool.process: exit %d", code)
	}
}

// serve says at start what would otherwise go unnoticed: a directory to
// follow that does not exist, and (only when spool files are followed) an
// idle timeout shorter than the writers' heartbeat.
func TestServeWarnsAtStart(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name      string
		args      []string
		missing   bool
		heartbeat bool
		noState   bool
	}{
		{"missing spool dir", []string{"--spool.dir", filepath.Join(dir, "nosuch")}, true, false, true},
		{"plain files, short idle timeout", []string{"--follow.glob", filepath.Join(dir, "*.ndjson"), "--follow.idle-timeout", "1s"}, false, false, true},
		{"spool dir, short idle timeout", []string{"--spool.dir", dir, "--follow.idle-timeout", "1s"}, false, true, true},
		{"state dir", []string{"--spool.dir", dir, "--state.dir", t.TempDir()}, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServed(t, tc.args...)
			s.waitLog(t, "following")
			got := s.stderr.String()
			if strings.Contains(got, "does not exist") != tc.missing {
				t.Errorf("missing-directory warning: %v, want %v:\n%s", !tc.missing, tc.missing, got)
			}
			if strings.Contains(got, "heartbeat") != tc.heartbeat {
				t.Errorf("heartbeat warning: %v, want %v:\n%s", !tc.heartbeat, tc.heartbeat, got)
			}
			// Without a state directory: one warn line, before "following",
			// saying what a restart does.
			head, _, _ := strings.Cut(got, "msg=following")
			want := 0
			if tc.noState {
				want = 1
			}
			if n := strings.Count(head, "level=WARN msg=\"no --state.dir: "); n != want {
				t.Errorf("no-state-dir warnings before following: %d, want %d:\n%s", n, want, got)
			}
			if tc.noState && !strings.Contains(head, "read again from the start, its runs counted again, and every counter restarts at zero") {
				t.Errorf("the no-state-dir warning does not say what a restart does:\n%s", got)
			}
			resp, err := http.Get("http://" + s.addr + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if notReady := resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "no such directory"); notReady != tc.missing {
				t.Errorf("/readyz: %d %q; want 503 with the reason only while a directory is missing", resp.StatusCode, body)
			}
		})
	}
}

// waitLog waits until serve's stderr holds msg.
func (s *served) waitLog(t *testing.T, msg string) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for !strings.Contains(s.stderr.String(), msg) {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("serve never logged %q:\n%s", msg, s.stderr)
		}
	}
}

// TestServeMemoryLimit: serve's soft Go memory limit is derived from its
// flags (32 MiB + --follow.memory-per-file × --follow.max-files), none
// with --follow.memory-per-file 0, and GOMEMLIMIT wins over both; read
// from outside, as the Go runtime reports it on /metrics.
func TestServeMemoryLimit(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	for _, tc := range []struct {
		name string
		env  string
		args []string
		want float64
	}{
		{"default: 256 files", "", nil, 56 * mib},
		{"1024 files", "", []string{"--follow.max-files", "1024"}, 128 * mib},
		{"per file set", "", []string{"--follow.max-files", "10", "--follow.memory-per-file", "1048576"}, 42 * mib},
		{"off", "", []string{"--follow.memory-per-file", "0"}, math.MaxInt64},
		{"GOMEMLIMIT wins", "GOMEMLIMIT=100MiB", []string{"--follow.max-files", "1024"}, 100 * mib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := freeAddr(t)
			env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOMEMLIMIT=") })
			if tc.env != "" {
				env = append(env, tc.env)
			}
			s := &served{addr: addr, stderr: new(oteltest.SyncBuffer), exited: make(chan struct{})}
			s.cmd = exec.Command(wrapperBin, append([]string{"serve", "--web.listen-address", addr, "--follow.glob", filepath.Join(t.TempDir(), "*.ndjson")}, tc.args...)...)
			s.cmd.Env, s.cmd.Stderr = env, s.stderr
			if err := s.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { s.cmd.Wait(); close(s.exited) }()
			defer func() {
				if code := s.stop(t); code != 0 {
					t.Errorf("exit %d after SIGTERM; stderr:\n%s", code, s.stderr)
				}
			}()
			var got float64
			poll(t, 10*time.Second, "go_gc_gomemlimit_bytes on /metrics", func() (bool, string) {
				m, err := s.metric("go_gc_gomemlimit_bytes", "")
				if err != nil {
					return false, err.Error()
				}
				v, ok := m[""]
				got = v
				return ok, "not exposed"
			})
			if got != tc.want {
				t.Fatalf("go_gc_gomemlimit_bytes %.0f, want %.0f", got, tc.want)
			}
		})
	}
}

// TestServeMemoryPerFileNegative: a negative --follow.memory-per-file is a
// usage error.
func TestServeMemoryPerFileNegative(t *testing.T) {
	_, ok, code := parseServeArgs([]string{"--follow.glob", "x", "--follow.memory-per-file", "-1"}, new(strings.Builder))
	if ok || code != exitUsage {
		t.Fatalf("ok %v code %d, want a usage error", ok, code)
	}
}
