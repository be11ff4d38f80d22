package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWorkflowAllowEverySubcommand: every subcommand with
// --metrics.max-workflows takes --metrics.workflow-allow and refuses a bad
// regexp as a usage error in one line; replay's metrics file shows a
// rejected name under "other", counted.
func TestWorkflowAllowEverySubcommand(t *testing.T) {
	subs := map[string]func(context.Context, []string, stdio) int{
		"run": cmdRun, "replay": cmdReplay, "demo": cmdDemo, "serve": cmdServe,
	}
	for sub, cmd := range subs {
		args := map[string][]string{
			"run":    {"--web.listen-address=", "--metrics.workflow-allow", "(", "--", "true"},
			"replay": {"--metrics.workflow-allow", "(", "-"},
			"demo":   {"--web.listen-address=", "--metrics.workflow-allow", "("},
			"serve":  {"--web.listen-address=", "--spool.dir", t.TempDir(), "--metrics.workflow-allow", "("},
		}[sub]
		var errb bytes.Buffer
		if code := cmd(context.Background(), args, stdio{in: strings.NewReader(""), out: io.Discard, err: &errb}); code != exitUsage {
			t.Errorf("%s %q: exit %d, want %d (stderr %q)", sub, args, code, exitUsage, errb.String())
		}
		if msg := strings.TrimSpace(errb.String()); !strings.Contains(msg, "--metrics.workflow-allow: error parsing regexp") || strings.Contains(msg, "\n") {
			t.Errorf("%s: stderr %q, want one line naming the flag", sub, msg)
		}
	}

	var stream strings.Builder
	for i, name := range []string{"review", "review-2", "tidy-up-7f3a"} {
		fmt.Fprintf(&stream, `{"type":"system","subtype":"task_started","task_id":"t%d","run_id":"r%d","task_type":"local_workflow","workflow_name":%q,"session_id":"s1"}`+"\n", i, i, name)
	}
	file := filepath.Join(t.TempDir(), "m.prom")
	var errb bytes.Buffer
	args := []string{"--metrics.file", file, "--metrics.workflow-allow", "review", "-"}
	if code := cmdReplay(context.Background(), args, stdio{in: strings.NewReader(stream.String()), out: io.Discard, err: &errb}); code != exitOK {
		t.Fatalf("replay %q: exit %d, stderr %q", args, code, errb.String())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`cbc_workflow_runs_started_total{workflow="review"} 1`,
		`cbc_workflow_runs_started_total{workflow="other"} 2`,
		"cbc_otel_workflow_labels_disallowed_total 2",
		"cbc_otel_workflow_labels_overflow_total 0",
	} {
		if !strings.Contains(string(b), want+"\n") {
			t.Errorf("metrics file lacks %q", want)
		}
	}
}
