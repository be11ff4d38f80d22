package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/internal/ghoutput"
)

// stepOutputNames are the outputs run writes, in order (docs/json.md,
// "Step outputs").
var stepOutputNames = []string{"cbc-cost-usd", "cbc-tokens-input", "cbc-tokens-output", "cbc-tokens-cache-read", "cbc-tokens-cache-creation",
	"cbc-runs-completed", "cbc-runs-failed", "cbc-runs-stopped", "cbc-runs-abandoned", "cbc-runs-total", "cbc-runs-json"}

// stepOutputRun runs `run` with env added to the environment (without the
// test's own GITHUB_OUTPUT), flags, stdin and the command, and returns
// its exit status and stderr.
func stepOutputRun(t *testing.T, env []string, stdin []byte, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(wrapperBin, append([]string{"run", "--web.listen-address="}, args...)...)
	cmd.Env = append(withoutEnv(withoutEnv(withoutEnv(os.Environ(), "GITHUB_OUTPUT"), "GITHUB_STEP_SUMMARY"), "TRACEPARENT"), env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if args[len(args)-1] == "cat" && !bytes.Equal(stdin, stdout.Bytes()) {
		t.Errorf("the passthrough changed the stream")
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// readOutputs parses the file as the runner does and returns the outputs
// after the prefix the file held before, by name; a name set twice fails.
func readOutputs(t *testing.T, path, before string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), before) {
		t.Fatalf("the file's earlier content is gone:\n%s", b)
	}
	all, err := ghoutput.Parse(string(b))
	if err != nil {
		t.Fatalf("the runner would fail on the file: %v\n%s", err, b)
	}
	prior, _ := ghoutput.Parse(before)
	if !slices.Equal(all[:len(prior)], prior) {
		t.Errorf("the earlier outputs read back as %+v, want %+v", all[:len(prior)], prior)
	}
	got := map[string]string{}
	var names []string
	for _, o := range all[len(prior):] {
		if _, dup := got[o.Name]; dup {
			t.Errorf("output %s set twice", o.Name)
		}
		got[o.Name] = o.Value
		names = append(names, o.Name)
	}
	if !slices.Equal(names, stepOutputNames) {
		t.Errorf("outputs %q, want exactly %q:\n%s", names, stepOutputNames, b)
	}
	return got
}

// summaryTotals sums a --summary-file: workflow runs by status, and the
// cost and tokens by type of every run and session line.
type summaryTotals struct {
	status  map[string]int
	names   []string
	cost    float64
	costAny bool
	tokens  map[string]int64
}

func readSummaryTotals(t *testing.T, path string) summaryTotals {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := summaryTotals{status: map[string]int{}, tokens: map[string]int64{}}
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var v struct {
			Kind     string           `json:"kind"`
			Workflow string           `json:"workflow"`
			Status   string           `json:"status"`
			Cost     *float64         `json:"cost_usd"`
			Tokens   map[string]int64 `json:"tokens_by_type"`
		}
		if err := json.Unmarshal(l, &v); err != nil {
			t.Fatal(err)
		}
		if v.Kind == "workflow" {
			s.status[v.Status]++
			s.names = append(s.names, v.Workflow)
		}
		if v.Cost != nil {
			s.cost += *v.Cost
			s.costAny = true
		}
		for k, n := range v.Tokens {
			s.tokens[strings.ReplaceAll(k, "_", "-")] += n
		}
	}
	return s
}

// checkRuns holds the runs outputs to the --summary-file's workflow runs.
func checkRuns(t *testing.T, got map[string]string, s summaryTotals) {
	t.Helper()
	total := 0
	for _, st := range []string{"completed", "failed", "stopped", "abandoned"} {
		total += s.status[st]
		if want := strconv.Itoa(s.status[st]); got["cbc-runs-"+st] != want {
			t.Errorf("cbc-runs-%s=%q, --summary-file says %s", st, got["cbc-runs-"+st], want)
		}
	}
	if got["cbc-runs-total"] != strconv.Itoa(total) || total == 0 {
		t.Errorf("cbc-runs-total=%q, --summary-file says %d", got["cbc-runs-total"], total)
	}
	var runs []struct {
		Workflow string `json:"workflow"`
		Status   string `json:"status"`
	}
	if err := json.Unmarshal([]byte(got["cbc-runs-json"]), &runs); err != nil {
		t.Fatalf("cbc-runs-json: %v: %q", err, got["cbc-runs-json"])
	}
	var names []string
	for _, r := range runs {
		names = append(names, r.Workflow)
	}
	if !slices.Equal(names, s.names) {
		t.Errorf("cbc-runs-json names %q, --summary-file says %q", names, s.names)
	}
}

func closeTo(a, b float64) bool { return math.Abs(a-b) <= 1e-12*max(1, math.Abs(b)) }

// TestE2EStepOutputs: with GITHUB_OUTPUT set, run appends the session's
// spend and runs by status to that file at exit, in GitHub's format, after
// what the file held; each value is what --summary-file and the metrics
// say of the same stream; --step-output wins over the variable; a file it
// cannot write is logged and leaves the child's exit status alone.
func TestE2EStepOutputs(t *testing.T) {
	dir := t.TempDir()
	const before = "earlier=1\nnotes<<EOF\na\nb\nEOF\n"

	// Result lines only (the recorded Claude Code): the cost and tokens
	// are what cbc_cost_usd_total and cbc_model_tokens_total count.
	var rec []byte
	for _, name := range []string{"complete", "fail"} {
		b, err := os.ReadFile(filepath.Join("../../testdata/corpus/claude-code-2.1.328", name+".ndjson"))
		if err != nil {
			t.Fatal(err)
		}
		rec = append(rec, b...)
	}
	out, summary, prom := filepath.Join(dir, "out1"), filepath.Join(dir, "s1.jsonl"), filepath.Join(dir, "m1.prom")
	if err := os.WriteFile(out, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, stderr := stepOutputRun(t, []string{"GITHUB_OUTPUT=" + out}, rec, "--summary-file", summary, "--metrics-file", prom, "--", "cat"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	got := readOutputs(t, out, before)
	m := promValues(t, prom)
	var cost float64
	tokens := map[string]float64{}
	for k, v := range m {
		if strings.HasPrefix(k, "cbc_cost_usd_total{") {
			cost += v
		}
		for _, typ := range []string{"input", "output", "cache_read", "cache_creation"} {
			if strings.HasPrefix(k, "cbc_model_tokens_total{") && strings.Contains(k, `type="`+typ+`"`) {
				tokens[strings.ReplaceAll(typ, "_", "-")] += v
			}
		}
	}
	if c, err := strconv.ParseFloat(got["cbc-cost-usd"], 64); err != nil || cost == 0 || !closeTo(c, cost) {
		t.Errorf("cbc-cost-usd=%q, cbc_cost_usd_total says %v", got["cbc-cost-usd"], cost)
	}
	for typ, n := range tokens {
		if got["cbc-tokens-"+typ] != strconv.FormatFloat(n, 'f', -1, 64) {
			t.Errorf("cbc-tokens-%s=%q, cbc_model_tokens_total says %v", typ, got["cbc-tokens-"+typ], n)
		}
	}
	if len(tokens) != 4 || tokens["input"] == 0 {
		t.Errorf("tokens by type in the metrics: %v", tokens)
	}
	checkRuns(t, got, readSummaryTotals(t, summary))

	// The CLI's telemetry joined (the simulator writes total_cost_usd 0):
	// the cost and tokens are the --summary-file's runs and sessions, and
	// the step summary's total; the flag wins over the variable.
	in := `{"type":"control_request","request_id":"init","request":{"subtype":"initialize"}}` + "\n"
	for _, sc := range []string{"completed", "failed", "mixed"} {
		in += fmt.Sprintf(`{"type":"user","message":{"role":"user","content":"[[SCENARIO:%s]] go"},"parent_tool_use_id":null,"session_id":""}`+"\n", sc)
	}
	envOut, flagOut, md := filepath.Join(dir, "env-out"), filepath.Join(dir, "out2"), filepath.Join(dir, "step.md")
	summary = filepath.Join(dir, "s2.jsonl")
	if code, stderr := stepOutputRun(t, []string{"GITHUB_OUTPUT=" + envOut}, []byte(in), "--join-cli-telemetry", "--step-output", flagOut,
		"--summary-file", summary, "--step-summary", md, "--", wrapperBin, "simulate", "--dialect", "claude", "--speed", "0"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if _, err := os.Stat(envOut); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--step-output given, yet $GITHUB_OUTPUT's file was written: %v", err)
	}
	got = readOutputs(t, flagOut, "")
	s := readSummaryTotals(t, summary)
	if c, err := strconv.ParseFloat(got["cbc-cost-usd"], 64); err != nil || !s.costAny || !closeTo(c, s.cost) {
		t.Errorf("cbc-cost-usd=%q, --summary-file's runs and sessions cost %v", got["cbc-cost-usd"], s.cost)
	}
	for typ, n := range s.tokens {
		if got["cbc-tokens-"+typ] != strconv.FormatInt(n, 10) {
			t.Errorf("cbc-tokens-%s=%q, --summary-file says %d", typ, got["cbc-tokens-"+typ], n)
		}
	}
	checkRuns(t, got, s)
	if b, err := os.ReadFile(md); err != nil || !strings.Contains(string(b), fmt.Sprintf(", $%.4f\n", s.cost)) {
		t.Errorf("the step summary's total is not $%.4f: %v\n%s", s.cost, err, b)
	}

	// A variable naming a directory: logged, the exit status is the child's.
	code, stderr := stepOutputRun(t, []string{"GITHUB_OUTPUT=" + dir}, rec, "--", "cat")
	if code != 0 || !strings.Contains(stderr, "step outputs") {
		t.Errorf("exit %d, want 0 with the failure logged; stderr:\n%s", code, stderr)
	}
}

// TestE2EStepOutputsNoCost: a CLI that writes total_cost_usd 0 and no
// modelUsage (CodeBuddy, and the simulator in its dialect) reports no
// cost: its cost and tokens are empty, never 0, while its runs are
// counted.
func TestE2EStepOutputsNoCost(t *testing.T) {
	in := `{"type":"control_request","request_id":"init","request":{"subtype":"initialize"}}` + "\n" +
		`{"type":"user","message":{"role":"user","content":"[[SCENARIO:completed]] one"}}` + "\n" +
		`{"type":"user","message":{"role":"user","content":"[[SCENARIO:failed]] two"}}` + "\n"
	out, summary := filepath.Join(t.TempDir(), "out"), filepath.Join(t.TempDir(), "s.jsonl")
	if code, stderr := stepOutputRun(t, nil, []byte(in), "--step-output", out, "--summary-file", summary, "--", wrapperBin, "simulate", "--speed", "0"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	got := readOutputs(t, out, "")
	for _, name := range stepOutputNames[:5] {
		if got[name] != "" {
			t.Errorf("%s=%q, want empty (no cost reported)", name, got[name])
		}
	}
	checkRuns(t, got, readSummaryTotals(t, summary))
}

// TestE2EStepOutputsHostileName: a workflow name written to end an output
// and start others (newlines, a heredoc, a delimiter's prefix, CR) reaches
// cbc-runs-json as --summary-file has it (the decoder made its controls
// spaces), and the file read as the runner reads it holds our outputs and
// no other.
func TestE2EStepOutputsHostileName(t *testing.T) {
	rec, err := os.ReadFile(exportRecording)
	if err != nil {
		t.Fatal(err)
	}
	const hostile = "x\ncbc-cost-usd=999\nEOF\nghadelimiter_00\ncbc-runs-failed<<EOF\n7\nEOF\r\nevil=1\n"
	name, _ := json.Marshal(hostile)
	n := bytes.Count(rec, []byte(`"workflow_name":"mock-review"`))
	rec = bytes.ReplaceAll(rec, []byte(`"workflow_name":"mock-review"`), []byte(`"workflow_name":`+string(name)))
	if n == 0 {
		t.Fatal("the recording names no workflow_name mock-review")
	}
	out, summary := filepath.Join(t.TempDir(), "out"), filepath.Join(t.TempDir(), "s.jsonl")
	if code, stderr := stepOutputRun(t, nil, rec, "--step-output", out, "--summary-file", summary, "--", "cat"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	got := readOutputs(t, out, "")
	s := readSummaryTotals(t, summary)
	checkRuns(t, got, s)
	if len(s.names) != 1 || !strings.Contains(s.names[0], "cbc-runs-failed<<EOF 7 EOF") {
		t.Errorf("the run's name is %q: the hostile name did not reach the outputs", s.names)
	}
	if got["cbc-runs-failed"] != "0" || got["cbc-cost-usd"] == "999" {
		t.Errorf("the name set outputs: %q", got)
	}
}
