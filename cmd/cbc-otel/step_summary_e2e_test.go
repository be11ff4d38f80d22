package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stepSummaryRun runs `run -- simulate` over a completed and a failed
// workflow run with env added to the environment, and returns the
// wrapper's exit status and stderr.
func stepSummaryRun(t *testing.T, env []string, flags ...string) (int, string) {
	t.Helper()
	in := `{"type":"control_request","request_id":"init","request":{"subtype":"initialize"}}` + "\n" +
		`{"type":"user","message":{"role":"user","content":"[[SCENARIO:completed]] one"}}` + "\n" +
		`{"type":"user","message":{"role":"user","content":"[[SCENARIO:failed]] two"}}` + "\n"
	args := append(append([]string{"run", "--web.listen-address="}, flags...), "--", wrapperBin, "simulate", "--speed", "0")
	cmd := exec.Command(wrapperBin, args...)
	cmd.Env = append(withoutEnv(os.Environ(), "GITHUB_STEP_SUMMARY"), env...)
	cmd.Stdin = strings.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

func withoutEnv(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// TestE2EStepSummary: with GITHUB_STEP_SUMMARY set, run appends a Markdown
// table of the runs it saw to that file at exit and keeps what the file
// held; --summary.step-file wins over the variable; a file it cannot write is
// logged and leaves the child's exit status as it was.
func TestE2EStepSummary(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "summary.md")
	const before = "## an earlier step\n\nits own text\n"
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stderr := stepSummaryRun(t, []string{"GITHUB_STEP_SUMMARY=" + path})
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if !strings.HasPrefix(got, before) {
		t.Fatalf("the file's earlier content is gone:\n%s", got)
	}
	section := got[len(before):]
	for _, want := range []string{"\n## cbc-otel\n", "| workflow | status | duration | agents | tokens |", "| sim-review | ✅ completed |", "| sim-review-fail | ❌ failed |",
		"**Total:** 2 workflow runs (1 completed, 1 failed)"} {
		if !strings.Contains(section, want) {
			t.Errorf("the section lacks %q:\n%s", want, section)
		}
	}
	if n := strings.Count(section, "\n| ") - 1; n != 2 {
		t.Errorf("%d table rows, want 2:\n%s", n, section)
	}

	// The flag wins: the variable's file is left alone.
	flagPath := filepath.Join(dir, "flag.md")
	if code, stderr := stepSummaryRun(t, []string{"GITHUB_STEP_SUMMARY=" + path}, "--summary.step-file", flagPath); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if b2, _ := os.ReadFile(path); !bytes.Equal(b2, b) {
		t.Errorf("--summary.step-file given, yet $GITHUB_STEP_SUMMARY's file changed")
	}
	if fb, err := os.ReadFile(flagPath); err != nil || !strings.Contains(string(fb), "❌ failed") {
		t.Errorf("--summary.step-file's file: %v\n%s", err, fb)
	}

	// A variable naming a directory: logged, the exit status is the child's.
	code, stderr = stepSummaryRun(t, []string{"GITHUB_STEP_SUMMARY=" + dir})
	if code != 0 || !strings.Contains(stderr, "step summary") {
		t.Errorf("exit %d, want 0 with the failure logged; stderr:\n%s", code, stderr)
	}
}
