package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/cbc-otel/cbc-otel/internal/oteltest"
)

// spoolWrapper starts `cbc-otel run --spool.dir dir -- sh -c script` with
// a fast spool heartbeat, in its own process group.
func spoolWrapper(t *testing.T, dir, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(wrapperBin, "run", "--spool.dir", dir, "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "CBC_OTEL_TEST_SPOOL_HEARTBEAT=100ms")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = new(oteltest.SyncBuffer)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	return cmd
}

// A live wrapper whose child is quiet for longer than --follow.idle-timeout (an
// SDK session between turns) is not finalized: its heartbeat keeps the
// .open file fresh, and what the child writes later is counted. A killed
// wrapper's .open file goes idle and is finalized (its open run
// abandoned), and kept on disk.
func TestServeQuietWrapperVersusKilled(t *testing.T) {
	rec := record(t, 22, "completed", "failed")
	dir := t.TempDir()
	data := t.TempDir()
	head, tail := rec.split()
	os.WriteFile(filepath.Join(data, "head"), head, 0o600)
	os.WriteFile(filepath.Join(data, "tail"), tail, 0o600)
	s := startServed(t, "--spool.dir", dir, "--follow.idle-timeout", "1s")

	w := spoolWrapper(t, dir, "cat "+filepath.Join(data, "head")+"; sleep 3; cat "+filepath.Join(data, "tail"))
	s.waitMetric(t, "cbc_workflow_runs_active", "", "", 1)
	if err := w.Wait(); err != nil {
		t.Fatalf("wrapper: %v\n%s", err, w.Stderr)
	}
	s.waitFor(t, rec, "the quiet wrapper's whole stream")
	s.waitMetric(t, "cbc_otel_follow_streams_finalized_total", "reason", "complete", 1)
	if m, _ := s.metric("cbc_otel_follow_streams_finalized_total", "reason"); m["idle"] != 0 {
		t.Fatalf("a live wrapper's spool file was finalized as idle: %v", m)
	}

	k := spoolWrapper(t, dir, "cat "+filepath.Join(data, "head")+"; exec sleep 60")
	s.waitMetric(t, "cbc_workflow_runs_active", "", "", 1)
	syscall.Kill(-k.Process.Pid, syscall.SIGKILL)
	s.waitMetric(t, "cbc_otel_follow_streams_finalized_total", "reason", "idle", 1)
	s.waitMetric(t, "cbc_workflow_runs_total", "status", "abandoned", 1)
	left := remaining(t, dir)
	if len(left) != 1 || !strings.HasSuffix(left[0], ".cbcspool.open") {
		t.Fatalf("spool files left %v, want the killed wrapper's .open file, kept", left)
	}
}

// The answer to initialize (account token, e-mail) never reaches the spool
// file; the rest of the stream does, and serve's counts are exact with no
// line rejected.
func TestRunSpoolDropsControlResponse(t *testing.T) {
	const canary = "sk-ant-CANARY-0123456789"
	rec := record(t, 23, "completed", "mixed")
	data := t.TempDir()
	resp := `{"type":"control_response","response":{"subtype":"success","request_id":"init-1","response":{"account":{"email":"` +
		canary + `@example.com","token":"` + canary + `"}}}}` + "\n"
	all := append([]byte(resp), rec.all()...)
	os.WriteFile(filepath.Join(data, "out"), all, 0o600)
	dir := t.TempDir()
	cmd := exec.Command(wrapperBin, "run", "--spool.dir", dir, "--", "cat", filepath.Join(data, "out"))
	out, err := cmd.Output()
	if err != nil || !bytes.Equal(out, all) {
		t.Fatalf("passthrough changed (%v)", err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) != 1 {
		t.Fatalf("spool files %v", files)
	}
	b, _ := os.ReadFile(files[0])
	if bytes.Contains(b, []byte(canary)) || bytes.Contains(b, []byte("control_response")) {
		t.Fatal("the initialize answer reached the spool file")
	}
	if want := append([]byte("\x1ecbcspool 1\n"), rec.all()...); !bytes.Equal(b, want) {
		t.Fatalf("spool file is not the stream without the control_response (%d bytes, want %d)", len(b), len(want))
	}
	s := startServed(t, "--spool.dir", dir)
	s.waitFor(t, rec, "totals of the spooled stream")
	s.waitMetric(t, "cbc_otel_follow_streams_finalized_total", "reason", "complete", 1)
	if m, _ := s.metric("cbc_otel_lines_rejected_total", "reason"); m["invalid_json"] != 0 || m["bad_shape"] != 0 {
		t.Fatalf("lines rejected: %v", m)
	}
}

// remaining lists the spool files left in dir, sorted.
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
