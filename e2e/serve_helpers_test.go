package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cbc-otel/cbc-otel/internal/promfam"
	"github.com/cbc-otel/cbc-otel/internal/realtool"
)

// serveProc is a running `cbc-otel serve`.
type serveProc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *promLockedBuffer
	exited chan error
}

// startServe starts serve on a free loopback port with args; it is killed
// when the test ends if still running. The grace window is widened: the
// tests assert exact counts, and on a loaded 2-core machine the simulators'
// late error flips can reach serve more than the default 5 s after the
// stopped notification (which then, correctly, leaves those agents
// abandoned).
func startServe(t *testing.T, bin string, args ...string) *serveProc {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", realtool.FreePorts(t, 1)[0])
	p := &serveProc{addr: addr, stderr: &promLockedBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, append([]string{"serve", "--web.listen-address", addr, "--log.level", "info", "--tracker.grace", "60s"}, args...)...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting serve: %v", err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-p.exited:
			p.exited <- err
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// kill9 kills serve with SIGKILL and waits for it.
func (p *serveProc) kill9(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGKILL)
	err := <-p.exited
	p.exited <- err
}

// stop sends SIGTERM and returns the exit code.
func (p *serveProc) stop(t *testing.T) int {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not stop after SIGTERM; stderr:\n%s", p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// scrape returns /metrics as families, or an error while serve is not up.
func (p *serveProc) scrape() (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// ready reports /readyz = 200.
func (p *serveProc) ready() bool {
	resp, err := http.Get("http://" + p.addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// byLabel sums a counter family (or a histogram's counts) by one label.
func byLabel(fams map[string]*dto.MetricFamily, name, label string) map[string]float64 {
	return promfam.ByLabel(fams, name, label)
}

func total(m map[string]float64) float64 { return promfam.Total(m) }

// serveTruth is the sum of several --expect files.
type serveTruth struct {
	promTruth
	workflows int
}

func sumTruth(t *testing.T, paths []string, turns []int) serveTruth {
	t.Helper()
	st := serveTruth{promTruth: promTruth{runs: map[string]float64{}, agents: map[string]float64{}}}
	for i, p := range paths {
		tr := promReadExpect(t, p, turns[i])
		for k, v := range tr.runs {
			st.runs[k] += v
		}
		for k, v := range tr.agents {
			st.agents[k] += v
		}
		st.tokens += tr.tokens
		st.toolUses += tr.toolUses
		st.workflows += turns[i]
	}
	return st
}

// compare reports how serve's /metrics differs from the truth ("" if not).
func (st serveTruth) compare(fams map[string]*dto.MetricFamily) string {
	var diffs []string
	runs := promNonZero(byLabel(fams, "cbc_workflow_runs_total", "status"))
	agents := promNonZero(byLabel(fams, "cbc_workflow_agents_total", "state"))
	want := promNonZero(st.runs)
	for _, k := range promKeys(runs, want) {
		if runs[k] != want[k] {
			diffs = append(diffs, fmt.Sprintf("runs{status=%s} %v, want %v", k, runs[k], want[k]))
		}
	}
	wantA := promNonZero(st.agents)
	for _, k := range promKeys(agents, wantA) {
		if agents[k] != wantA[k] {
			diffs = append(diffs, fmt.Sprintf("agents{state=%s} %v, want %v", k, agents[k], wantA[k]))
		}
	}
	if v := total(byLabel(fams, "cbc_workflow_tokens_total", "")); v != st.tokens {
		diffs = append(diffs, fmt.Sprintf("tokens %v, want %v", v, st.tokens))
	}
	if v := total(byLabel(fams, "cbc_workflow_tool_uses_total", "")); v != st.toolUses {
		diffs = append(diffs, fmt.Sprintf("tool uses %v, want %v", v, st.toolUses))
	}
	if v := total(byLabel(fams, "cbc_workflow_runs_started_total", "")); v != float64(st.workflows) {
		diffs = append(diffs, fmt.Sprintf("runs started %v, want %d", v, st.workflows))
	}
	if v := total(byLabel(fams, "cbc_workflow_duration_seconds", "")); v != float64(st.workflows) {
		diffs = append(diffs, fmt.Sprintf("duration observations %v, want %d", v, st.workflows))
	}
	if v := total(byLabel(fams, "cbc_workflow_runs_active", "")); v != 0 {
		diffs = append(diffs, fmt.Sprintf("runs active %v, want 0", v))
	}
	return strings.Join(diffs, "; ")
}

// userTurns writes a stdin file for simulate: one user message per
// scenario.
func userTurns(t *testing.T, dir, name string, scenarios []string) string {
	t.Helper()
	var b strings.Builder
	for i, sc := range scenarios {
		fmt.Fprintf(&b, `{"type":"user","message":{"role":"user","content":"[[SCENARIO:%s]] turn %d"}}`+"\n", sc, i)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// wrapper is a `cbc-otel run --spool.dir DIR -- cbc-otel simulate ...`
// whose stdin is a file of user turns (EOF ends the session).
func spoolingWrapper(t *testing.T, bin, spoolDir, stdinPath, expect string, simArgs ...string) *exec.Cmd {
	t.Helper()
	in, err := os.Open(stdinPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	args := append([]string{"run", "--spool.dir", spoolDir, "--", bin, "simulate", "--expect", expect}, simArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Stdin = in
	cmd.Stdout = nil // /dev/null: the consumer does not matter here
	cmd.Stderr = &promLockedBuffer{}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the wrapper: %v", err)
	}
	return cmd
}
