// The secrets test of the threat model: canaries placed in every field that
// may carry a secret or untrusted text never leave the process with default
// settings (metrics, traces file, summary, spool, debug logs), and with the
// preview opt-in only the opted-in fields appear, in the traces alone.
package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	canaryToken   = "CANARY-JWT-eyJhbGciOi"
	canaryEmail   = "canary.user@example.invalid"
	canaryPrompt  = "CANARY-PROMPT-SOURCE"
	canaryPreview = "CANARY-PREVIEW-TEXT"
	canaryResult  = "CANARY-RESULT-TEXT"
	canarySummary = "CANARY-SUMMARY-TEXT"
)

// canaryStream is a Claude Code-shaped session whose secret and untrusted
// fields hold canaries.
func canaryStream() string {
	lines := []map[string]any{
		{"type": "control_response", "response": map[string]any{"subtype": "success", "request_id": "init", "response": map[string]any{
			"account": map[string]any{"token": canaryToken, "email": canaryEmail, "enterpriseId": canaryToken}}}},
		{"type": "system", "subtype": "init", "session_id": "s1"},
		{"type": "system", "subtype": "task_started", "task_id": "w1", "run_id": "r1", "task_type": "local_workflow", "workflow_name": "canary-wf",
			"prompt": "export const meta = {}; // " + canaryPrompt, "description": "d", "session_id": "s1"},
		{"type": "system", "subtype": "task_progress", "task_id": "w1", "run_id": "r1", "usage": map[string]any{"total_tokens": 5, "tool_uses": 0, "duration_ms": 10},
			"workflow_progress": []any{
				map[string]any{"type": "workflow_phase", "index": 1, "title": "P"},
				map[string]any{"type": "workflow_agent", "index": 1, "label": "a", "phaseIndex": 1, "agentId": "x", "state": "done",
					"startedAt": 1796205994923, "durationMs": 5, "tokens": 5, "promptPreview": canaryPreview, "resultPreview": canaryResult},
			}},
		{"type": "system", "subtype": "task_updated", "task_id": "w1", "run_id": "r1", "patch": map[string]any{"status": "completed", "end_time": 1796205995000}},
		{"type": "system", "subtype": "task_notification", "task_id": "w1", "run_id": "r1", "status": "completed", "summary": canarySummary,
			"usage": map[string]any{"total_tokens": 5, "tool_uses": 0, "duration_ms": 77}},
	}
	var b strings.Builder
	for _, l := range lines {
		j, _ := json.Marshal(l)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestE2ESecretsNeverLeave(t *testing.T) {
	allCanaries := []string{canaryToken, canaryEmail, canaryPrompt, canaryPreview, canaryResult, canarySummary}
	for _, tc := range []struct {
		name     string
		optIn    bool
		inTraces []string // canaries allowed in the traces file
	}{
		{"default", false, nil},
		{"previews opted in", true, []string{canaryPreview, canaryResult, canarySummary}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			stream := filepath.Join(dir, "stream.ndjson")
			if err := os.WriteFile(stream, []byte(canaryStream()), 0o600); err != nil {
				t.Fatal(err)
			}
			metricsFile, tracesFile := filepath.Join(dir, "m.prom"), filepath.Join(dir, "t.jsonl")
			summaryFile := filepath.Join(dir, "s.ndjson")
			args := []string{"run", "--web.listen-address=", "--log.level=debug", "--summary.waterfall",
				"--metrics.file", metricsFile, "--traces.file", tracesFile, "--summary.file", summaryFile}
			if tc.optIn {
				args = append(args, "--traces.capture-previews")
			}
			cmd := exec.Command(wrapperBin, append(args, "--", "cat", stream)...)
			var out, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("run: %v\n%s", err, stderr.String())
			}
			if out.String() != canaryStream() {
				t.Fatal("the passthrough changed the stream")
			}
			// The spool is raw stdout by design, but never the initialize
			// answer: the account block must not reach the shared volume.
			spoolDir := filepath.Join(dir, "spool")
			os.Mkdir(spoolDir, 0o700)
			if err := exec.Command(wrapperBin, "run", "--spool.dir", spoolDir, "--", "cat", stream).Run(); err != nil {
				t.Fatal(err)
			}
			spools, _ := filepath.Glob(filepath.Join(spoolDir, "*"))
			var spooled []byte
			for _, f := range spools {
				b, _ := os.ReadFile(f)
				spooled = append(spooled, b...)
			}
			outputs := map[string][]byte{"stderr (debug logs, summary)": stderr.Bytes(), "spool": spooled}
			for name, path := range map[string]string{"metrics file": metricsFile, "traces file": tracesFile, "summary file": summaryFile} {
				b, err := os.ReadFile(path)
				if err != nil || len(b) == 0 {
					t.Fatalf("%s not written: %v", name, err)
				}
				outputs[name] = b
			}
			for name, b := range outputs {
				for _, c := range allCanaries {
					allowed := name == "traces file" && slices.Contains(tc.inTraces, c)
					// The spool keeps the child's own stream (the workflow
					// prompt, previews, summary): only the account block is
					// kept out of it.
					if name == "spool" && c != canaryToken && c != canaryEmail {
						allowed = true
					}
					if got := bytes.Contains(b, []byte(c)); got && !allowed {
						t.Errorf("%s contains canary %q", name, c)
					} else if !got && allowed && name == "traces file" {
						t.Errorf("%s lacks the opted-in %q", name, c)
					}
				}
			}
		})
	}
}
