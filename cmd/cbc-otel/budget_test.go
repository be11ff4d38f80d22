package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/supervise/supervisetest"
)

// budgetSession runs the fake CLI (supervisetest.BudgetCLI) under the
// wrapper with flags, plays the SDK: a user line per turn (turns of them),
// reading stdout up to each turn's result; then, with end "stopped", reads
// on until the stopped notification and the interrupted turn's result, and
// with "eof" reads to EOF before it closes stdin (the child must end first). It
// returns what the SDK read, what the CLI wrote, the wrapper's stderr and
// exit code.
func budgetSession(t *testing.T, mode string, turns int, end string, flags ...string) (sdkSaw, cliWrote []byte, stderr string, code int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cliOut := filepath.Join(dir, "cli.out")
	args := append(append([]string{"run", "--log.level", "warn"}, flags...), "--", exe)
	cmd := exec.Command(wrapperBin, args...)
	cmd.Env = append(supervisetest.Env(mode), supervisetest.EnvBudgetOut+"="+cliOut)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	var saw bytes.Buffer
	r := bufio.NewReader(io.TeeReader(outR, &saw))
	readUntil := func(prefix string) {
		t.Helper()
		for {
			l, err := r.ReadString('\n')
			if strings.HasPrefix(l, prefix) {
				return
			}
			if err != nil {
				t.Fatalf("stdout ended before %s: %v\nstderr: %s", prefix, err, errb.String())
			}
		}
	}
	for range turns {
		if _, err := io.WriteString(in, `{"type":"user","message":{"role":"user","content":"go on"}}`+"\n"); err != nil {
			t.Fatal(err)
		}
		readUntil(`{"type":"result"`)
	}
	if end == "stopped" {
		readUntil(`{"type":"system","subtype":"task_notification"`)
		readUntil(`{"type":"result"`)
	}
	if end == "eof" {
		io.Copy(io.Discard, r)
	}
	in.Close()
	io.Copy(io.Discard, r)
	err = cmd.Wait()
	code = 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	cliWrote, err = os.ReadFile(cliOut)
	if err != nil {
		t.Fatal(err)
	}
	return saw.Bytes(), cliWrote, errb.String(), code
}

var budgetResponse = regexp.MustCompile(`(?m)^\{"type":"control_response","response":\{"subtype":"success","request_id":"cbc-otel-budget-[0-9a-f]{16}"\}\}\n`)

// The cap passed at the second turn's result ($1.2 > $1): the wrapper
// interrupts the session as an SDK does; the run ends stopped with reason
// budget in --summary-file, the step summary and the metrics; the SDK sees
// every byte the CLI wrote but the answer to the interrupt; the exit status
// is the CLI's own.
func TestBudgetStopsSession(t *testing.T) {
	dir := t.TempDir()
	summary, step, prom, traces := filepath.Join(dir, "runs.jsonl"), filepath.Join(dir, "step.md"), filepath.Join(dir, "m.prom"), filepath.Join(dir, "traces.jsonl")
	saw, wrote, stderr, code := budgetSession(t, "budgetcli", 2, "stopped", "--budget.max-cost-usd", "1",
		"--summary-file", summary, "--step-summary", step, "--metrics-file", prom, "--traces-file", traces, "--summary")
	if code != 0 {
		t.Errorf("exit %d, want the CLI's 0; stderr: %s", code, stderr)
	}
	resp := budgetResponse.FindAll(wrote, -1)
	if len(resp) != 1 {
		t.Fatalf("the CLI answered %d budget interrupts, want 1:\n%s", len(resp), wrote)
	}
	if want := bytes.Replace(wrote, resp[0], nil, 1); !bytes.Equal(saw, want) {
		t.Errorf("the SDK saw:\n%s\nwant what the CLI wrote less the answer:\n%s", saw, want)
	}
	if n := strings.Count(stderr, "budget: the session's spend passed --budget.max-cost-usd"); n != 1 {
		t.Errorf("%d log lines about the stop, want 1:\n%s", n, stderr)
	}
	if !strings.Contains(stderr, "spend_usd=1.2") || !strings.Contains(stderr, "source=result") || strings.Contains(stderr, "SIGINT") {
		t.Errorf("log: %s", stderr)
	}
	b, err := os.ReadFile(summary)
	if err != nil {
		t.Fatal(err)
	}
	var run struct{ Status, StopReason string }
	found := false
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatal(err)
		}
		if m["kind"] == "workflow" {
			found = true
			run.Status, _ = m["status"].(string)
			run.StopReason, _ = m["stop_reason"].(string)
		}
	}
	if !found || run.Status != "stopped" || run.StopReason != "budget" {
		t.Errorf("summary file: status %q stop_reason %q:\n%s", run.Status, run.StopReason, b)
	}
	// The spend against the cap beside the stop: the figure it weighed.
	if md, _ := os.ReadFile(step); !bytes.Contains(md, []byte("stopped (budget)")) ||
		!regexp.MustCompile(`\*\*Budget \\\(--budget\.max-cost-usd\\\):\*\* \\\$1\.2\d{3} of \\\$1\.0000 \\\(12\d%: over\\\)\n`).Match(md) {
		t.Errorf("step summary:\n%s", md)
	}
	if !regexp.MustCompile(`\nbudget \(--budget\.max-cost-usd\): \$1\.2\d{3} of \$1\.0000 \(12\d%: over\)\n`).MatchString(stderr) {
		t.Errorf("--summary lacks the spend against the cap:\n%s", stderr)
	}
	if tr, _ := os.ReadFile(traces); !regexp.MustCompile(`"name":"invoke_workflow spend".*\{"key":"cbc.stop.reason","value":\{"stringValue":"budget"\}\}`).Match(tr) {
		t.Errorf("no span with cbc.stop.reason budget:\n%s", tr)
	}
	if !strings.Contains(stderr, "stop reason: budget") {
		t.Errorf("--summary lacks the stop reason:\n%s", stderr)
	}
	if m, _ := os.ReadFile(prom); !regexp.MustCompile(`(?m)^cbc_budget_stops_total(\{[^}]*\})? 1$`).Match(m) {
		t.Errorf("metrics file has no cbc_budget_stops_total 1:\n%s", m)
	}
}

// A CLI that does not acknowledge the interrupt gets SIGINT after
// --budget.stop-timeout; the wrapper exits with its status (130).
func TestBudgetEscalatesToSIGINT(t *testing.T) {
	_, _, stderr, code := budgetSession(t, "budgetcli:deaf", 2, "eof", "--budget.max-cost-usd", "1", "--budget.stop-timeout", "200ms")
	if code != 130 {
		t.Errorf("exit %d, want 130 (the CLI's own, from its SIGINT handler)", code)
	}
	if !strings.Contains(stderr, "did not acknowledge the interrupt within --budget.stop-timeout 200ms") || !strings.Contains(stderr, "sending SIGINT") {
		t.Errorf("stderr: %s", stderr)
	}
}

// Without the flag, and with a cap never reached, not one byte changes.
func TestBudgetNotReachedByteExact(t *testing.T) {
	for name, flags := range map[string][]string{
		"no flag":         nil,
		"cap not reached": {"--budget.max-cost-usd", "5"},
		"cost 0":          {"--budget.max-cost-usd", "0.1"},
	} {
		t.Run(name, func(t *testing.T) {
			mode := "budgetcli"
			if name == "cost 0" {
				mode = "budgetcli:free" // CodeBuddy's total_cost_usd 0 never trips the cap
			}
			saw, wrote, stderr, code := budgetSession(t, mode, 4, "", flags...)
			if code != 0 || !bytes.Equal(saw, wrote) || strings.Contains(stderr, "budget") {
				t.Errorf("exit %d; saw == wrote: %v; stderr: %s", code, bytes.Equal(saw, wrote), stderr)
			}
		})
	}
}
