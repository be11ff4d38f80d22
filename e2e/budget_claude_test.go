package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestClaudeCodeBudgetCap: the real Claude Code under `cbc-otel run
// --budget.max-cost-usd`, against the Messages API stand-in, driven over
// stream-json as an SDK drives it. The workflow of the "interrupt" scenario
// would hang forever; the main turn's result (its total_cost_usd: what the
// stand-in served so far at list price) passes the cap, so the wrapper
// interrupts the session itself. The SDK sees the run stop, never the
// wrapper's request nor its answer; the run ends stopped with reason
// budget in the summary and the metrics; the exit status is the CLI's.
func TestClaudeCodeBudgetCap(t *testing.T) {
	cli := claudeBin(t)
	bin := promBuildCLI(t)
	api := startMockAnthropic(t, true)
	dir := t.TempDir()
	summary, metrics := filepath.Join(dir, "summary.ndjson"), filepath.Join(dir, "metrics.prom")
	const capUSD = 0.0001 // below any response the stand-in serves
	r := runClaude(t, bin, cli, api, claudeOpts{scenario: "interrupt", wrapped: true, budget: true, env: joinModelEnv,
		runArgs: []string{"--web.listen-address=", "--tracker.grace=1s", "--log.level", "warn", "--summary.file", summary,
			"--metrics.file", metrics, "--budget.max-cost-usd", strconv.FormatFloat(capUSD, 'f', -1, 64), "--budget.stop-timeout", "20s"}})
	if t.Failed() {
		t.FailNow()
	}
	if r.exitCode != 0 {
		t.Errorf("exit %d, want the CLI's 0; stderr:\n%s", r.exitCode, r.stderr)
	}
	if r.notification["status"] != "stopped" {
		t.Errorf("the workflow's notification: %v, want stopped", r.notification)
	}

	// What the SDK saw: no control_response but the one to its initialize,
	// and not a trace of the wrapper's request id.
	var firstCost float64
	results, off, firstAt := 0, 0, -1
	for _, l := range bytes.SplitAfter(r.stdout, []byte("\n")) {
		off += len(l)
		if len(l) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("stdout line not JSON: %s", sdkTrunc(l, 300))
		}
		if m["type"] == "control_response" {
			if resp, _ := m["response"].(map[string]any); resp["request_id"] != "init" {
				t.Errorf("the SDK got a control_response it never asked for: %s", sdkTrunc(l, 300))
			}
		}
		if m["type"] == "result" {
			results++
			if results == 1 {
				firstCost, _ = m["total_cost_usd"].(float64)
				firstAt = off - len(l)
			}
		}
	}
	if bytes.Contains(r.stdout, []byte("cbc-otel-budget-")) {
		t.Errorf("the wrapper's request id reached the SDK")
	}
	t.Logf("the SDK saw %d bytes, %d results; first result total_cost_usd %v; served: %+v", len(r.stdout), results, firstCost, requestShape(api.requests()))
	if firstAt >= 0 {
		t.Logf("what the SDK saw from the first result on:\n%s", sdkTrunc(r.stdout[firstAt:], 8000))
	}
	// The first result's cost is what the stand-in served the main
	// conversation at list price (its agents wait for that result).
	var main joinCost
	for _, q := range api.requests() {
		if q.Kind == "main" && q.Status == 200 {
			main.add(t, q)
		}
	}
	if d := firstCost - main.USD; d > 1e-9 || d < -1e-9 {
		t.Errorf("first result total_cost_usd %v, the stand-in served the main conversation $%v at list price", firstCost, main.USD)
	}

	// The stop, as the wrapper tells it: once, at the first result's cost,
	// from the result lines, with the session's id.
	logLine := regexp.MustCompile(`budget: the session's spend passed --budget.max-cost-usd; interrupting it" spend_usd=([0-9.e-]+) max_cost_usd=[0-9.e-]+ source=result request_id=cbc-otel-budget-[0-9a-f]{16} session_id=(\S+)`)
	m := logLine.FindAllStringSubmatch(r.stderr, -1)
	if len(m) != 1 {
		t.Fatalf("%d budget log lines, want 1; stderr:\n%s", len(m), r.stderr)
	}
	if spend, _ := strconv.ParseFloat(m[0][1], 64); spend != firstCost || spend <= capUSD {
		t.Errorf("spend_usd %v, want the first result's total_cost_usd %v (> cap %v)", spend, firstCost, capUSD)
	}
	if m[0][2] != r.notification["session_id"] {
		t.Errorf("interrupt session_id %s, the session is %v", m[0][2], r.notification["session_id"])
	}
	if strings.Contains(r.stderr, "SIGINT") {
		t.Errorf("escalated to SIGINT: the CLI did not acknowledge the interrupt:\n%s", r.stderr)
	}

	runs, _ := sdkSummaryRuns(t, summary)
	if len(runs) != 1 || runs[0]["status"] != "stopped" || runs[0]["stop_reason"] != "budget" {
		t.Errorf("summary runs %v, want one stopped with stop_reason budget", runs)
	}
	met := sdkMetricsFile(t, metrics)
	if met["cbc_budget_stops_total"] != 1 || met["cbc_interrupts_total"] != 1 {
		t.Errorf("metrics: cbc_budget_stops_total %v, cbc_interrupts_total %v, want 1 and 1", met["cbc_budget_stops_total"], met["cbc_interrupts_total"])
	}
	if d := os.Getenv("CBC_E2E_KEEP"); d != "" {
		os.WriteFile(filepath.Join(d, "budget-stdout.ndjson"), r.stdout, 0o644)
		os.WriteFile(filepath.Join(d, "budget-stderr.txt"), []byte(r.stderr), 0o644)
	}
}

// budgetDriver is a Claude Agent SDK application: one query() with
// streaming input, one user turn carrying the scenario marker; its input
// ends at the workflow's task_notification (so the CLI's stdin is open
// while the wrapper stops the session). Every message the SDK yields is
// written to OUT, one JSON line each; a thrown error is written to ERR.
const budgetDriver = `import fs from 'node:fs';
const [sdk, cli, cwd, out, errFile, scenario] = process.argv.slice(2);
const { query } = await import(sdk);
const w = fs.createWriteStream(out);
let wake = null, ended = false;
async function* prompt() {
  yield { type: 'user', message: { role: 'user', content: '[[SCENARIO:' + scenario + ']] Please run the workflow.' }, parent_tool_use_id: null, session_id: '' };
  while (!ended) await new Promise((r) => { wake = r; });
}
try {
  const q = query({ prompt: prompt(), options: { cwd, allowedTools: ['Workflow'], pathToClaudeCodeExecutable: cli, stderr: (d) => process.stderr.write(d) } });
  for await (const m of q) {
    w.write(JSON.stringify(m) + '\n');
    if (m.type === 'system' && m.subtype === 'task_notification') {
      ended = true;
      if (wake) wake();
    }
  }
} catch (e) {
  fs.writeFileSync(errFile, String(e));
}
await new Promise((r) => w.end(r));
`

// TestClaudeAgentSDKBudgetCap: the same stop under the Claude Agent SDK
// itself (its query() runs a script exec'ing the wrapper over the real
// Claude Code): what the SDK yields is the CLI's session, stopped, and the
// SDK raises no error; the wrapper's request and answer never reach it.
func TestClaudeAgentSDKBudgetCap(t *testing.T) {
	dir := sdkDir(t)
	cli := claudeBin(t)
	bin := promBuildCLI(t)
	api := startMockAnthropic(t, false)
	tmp := t.TempDir()
	f := func(n string) string { return filepath.Join(tmp, n) }
	for _, d := range []string{"home", "config", "work", "tmp"} {
		if err := os.MkdirAll(f(d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	script := fmt.Sprintf(`#!/bin/sh
exec %s run --web.listen-address= --tracker.grace=1s --log.level warn --summary.file %s --metrics.file %s --budget.max-cost-usd 0.0001 -- %s "$@" 2>>%s
`, sdkShq(bin), sdkShq(f("summary")), sdkShq(f("metrics")), sdkShq(cli), sdkShq(f("stderr")))
	if err := os.WriteFile(f("cli.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f("drive.mjs"), []byte(budgetDriver), 0o644); err != nil {
		t.Fatal(err)
	}
	sdkMJS := filepath.Join(dir, "node_modules/@anthropic-ai/claude-agent-sdk/sdk.mjs")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", f("drive.mjs"), sdkMJS, f("cli.sh"), f("work"), f("yielded"), f("error"), "interrupt")
	cmd.Env = append(claudeEnv(tmp, api.URL), joinModelEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t.Cleanup(func() {
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	if err := cmd.Run(); err != nil || ctx.Err() != nil {
		y, _ := os.ReadFile(f("yielded"))
		e, _ := os.ReadFile(f("stderr"))
		t.Fatalf("the SDK application: %v (%v); output:\n%s\nyielded:\n%s\nwrapper and CLI stderr:\n%s", err, ctx.Err(), out.String(), sdkTrunc(y, 6000), e)
	}
	if b, err := os.ReadFile(f("error")); err == nil {
		t.Errorf("the SDK raised: %s", b)
	}
	yielded := sdkJSONLines(t, f("yielded"))
	var status string
	var firstCost float64
	results := 0
	for _, m := range yielded {
		switch {
		case m["type"] == "system" && m["subtype"] == "task_notification":
			status, _ = m["status"].(string)
		case m["type"] == "result":
			results++
			if results == 1 {
				firstCost, _ = m["total_cost_usd"].(float64)
			}
		case m["type"] == "control_response":
			t.Errorf("the SDK yielded a control_response: %v", m)
		}
	}
	raw, _ := os.ReadFile(f("yielded"))
	if bytes.Contains(raw, []byte("cbc-otel-budget-")) {
		t.Errorf("the wrapper's request id reached the SDK")
	}
	t.Logf("the SDK yielded %d messages; the last ones:\n%s", len(yielded), sdkTrunc(raw[max(0, len(raw)-4000):], 4000))
	if status != "stopped" {
		t.Errorf("the workflow's notification status %q, want stopped", status)
	}
	stderr, _ := os.ReadFile(f("stderr"))
	logLine := regexp.MustCompile(`budget: the session's spend passed --budget.max-cost-usd; interrupting it" spend_usd=([0-9.e-]+) `)
	m := logLine.FindAllSubmatch(stderr, -1)
	if len(m) != 1 {
		t.Fatalf("%d budget log lines, want 1; stderr:\n%s", len(m), stderr)
	}
	if spend, _ := strconv.ParseFloat(string(m[0][1]), 64); spend != firstCost {
		t.Errorf("spend_usd %v, want the first result's total_cost_usd %v", spend, firstCost)
	}
	if bytes.Contains(stderr, []byte("SIGINT")) {
		t.Errorf("escalated to SIGINT:\n%s", stderr)
	}
	runs, _ := sdkSummaryRuns(t, f("summary"))
	if len(runs) != 1 || runs[0]["status"] != "stopped" || runs[0]["stop_reason"] != "budget" {
		t.Errorf("summary runs %v, want one stopped with stop_reason budget", runs)
	}
	if met := sdkMetricsFile(t, f("metrics")); met["cbc_budget_stops_total"] != 1 {
		t.Errorf("metrics: cbc_budget_stops_total %v, want 1", met["cbc_budget_stops_total"])
	}
}
