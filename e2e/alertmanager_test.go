package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/cbc-otel/cbc-otel/dashboards"
	"github.com/cbc-otel/cbc-otel/internal/realtool"
)

// requireAlertmanager returns Debian's Alertmanager (0.25), or the binary
// $ALERTMANAGER_BIN names (an upstream build is called alertmanager).
func requireAlertmanager(t *testing.T) string {
	t.Helper()
	return realtool.Find(t, "prometheus-alertmanager", "ALERTMANAGER_BIN", "apt-get install -y --no-install-recommends prometheus-alertmanager")
}

// amExample is the routing dashboards/README.md recommends.
const amExample = "../dashboards/alertmanager.example.yml"

// TestAlertsReachTheirReceivers sends the mixin's alerts (rendered from
// dashboards/mixin/config.yaml, every window and `for` scaled by 1/60)
// from a real Prometheus to a real Alertmanager running
// dashboards/alertmanager.example.yml, its receivers' URLs pointed at a
// webhook server of the test and its group timings shortened. Prometheus
// scrapes three targets on 127.0.0.1:
//
//   - `demo --live`, whose scripted failures burn the budget far past the
//     page's threshold (the test computes the ratio over both scaled
//     windows from the demo's own series): for 10 s of that, no alert is
//     even pending (but the exporter-down one, on a slow scrape) and no
//     receiver hears anything, since every rule leaves demo="true" out;
//   - then `run -- simulate` fed failed workflows: CbcWorkflowSLOBurnRatePage
//     (severity critical) reaches the pager receiver;
//   - and `run --tracker.stall-after 1s` over a fake CLI that starts a workflow run
//     and then says nothing: CbcWorkflowStalled (warning) reaches tickets.
//
// Every notification of the pager holds critical alerts only, every one of
// tickets warning ones, and none names the demo or its workflows.
func TestAlertsReachTheirReceivers(t *testing.T) {
	promBin := requirePrometheus(t)
	amBin := requireAlertmanager(t)
	bin := promBuildCLI(t)
	start := time.Now()

	sink := newWebhookSink(t)
	amCfg := alertmanagerTestConfig(t, amExample, sink.url)
	dir := t.TempDir()
	amCfgPath := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(amCfgPath, amCfg, 0o600); err != nil {
		t.Fatal(err)
	}
	amAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(realtool.FreePorts(t, 1)[0]))
	// --cluster.listen-address= : no gossip port (9094 by default), no peers.
	startDaemon(t, "alertmanager", amBin, []string{
		"--config.file=" + amCfgPath,
		"--storage.path=" + filepath.Join(dir, "am-data"),
		"--web.listen-address=" + amAddr,
		"--cluster.listen-address=",
		"--log.level=warn",
	}, "http://"+amAddr+"/-/ready")

	mixinCfg, err := os.ReadFile("../dashboards/mixin/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mc, err := dashboards.ParseMixinConfig(mixinCfg)
	if err != nil {
		t.Fatal(err)
	}
	ro := mc.Options().Rules
	ro.WindowScale = 1.0 / 60
	rules, err := dashboards.RenderRules(ro)
	if err != nil {
		t.Fatal(err)
	}
	rulesPath := filepath.Join(dir, "rules.yml")
	if err := os.WriteFile(rulesPath, rules, 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	demoAddr, demo, demoExited := startLiveDemo(t, bin)
	ports := realtool.FreePorts(t, 2)
	failAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	stallAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	failing := startScrapedWrapper(t, ctx, bin, failAddr, "--dialect", "cbc", "--speed", "0", "--noise", "0")
	failing.out.drain()
	stall := startStallingWrapper(t, ctx, bin, stallAddr, "e2e-stuck")

	prom := startPrometheusConfig(t, promBin, dir, fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q]
alerting:
  alertmanagers:
    - static_configs:
        - targets: [%q]
scrape_configs:
  - job_name: cbc-otel
    static_configs:
      - targets: [%q, %q, %q]
`, rulesPath, amAddr, demoAddr, failAddr, stallAddr))
	promPoll(t, 30*time.Second, "Prometheus scrapes the demo and both wrappers", func() (bool, string) {
		v, err := prom.scalar(`sum(up{job="cbc-otel"})`)
		return err == nil && v == 3, fmt.Sprint(v, err)
	})
	// The first evaluations may precede the first scrape (then
	// CbcOtelExporterAbsent is pending): start from a clean slate.
	promPoll(t, 15*time.Second, "no alert pending once every target is scraped", func() (bool, string) {
		as, err := prom.alerts()
		return err == nil && len(as) == 0, fmt.Sprint(as, err)
	})

	// Phase 1: the demo alone. Its error ratio over the page's scaled
	// windows (5s and 1m) must be above 14.4 × (1 − target) for 10
	// consecutive seconds, with no alert pending or firing and nothing
	// received all along.
	threshold := 14.4 * (1 - mc.SLOTarget)
	demoBurn := func(w string) string {
		return fmt.Sprintf(`sum(rate(cbc_workflow_runs_total{demo="true", status=~"failed|abandoned"}[%s])) / sum(rate(cbc_workflow_runs_total{demo="true", status=~"completed|failed|abandoned"}[%s]))`, w, w)
	}
	burning := 0
	promPoll(t, 60*time.Second, "the demo burning past the page's threshold for 10 s", func() (bool, string) {
		select {
		case <-demoExited:
			t.Fatalf("demo --live exited by itself (%v)", demo.ProcessState)
		default:
		}
		as, err := prom.alerts()
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			// One scrape slower than its 1 s timeout on a loaded machine
			// makes the exporter-down alert pending (up has no demo label);
			// firing, it would reach a receiver and fail the test below.
			if a.Labels["alertname"] != dashboards.AlertExporterDown || a.State != "pending" {
				t.Fatalf("alert on the demo's series alone: %v", a)
			}
		}
		if n := sink.all(); len(n) != 0 {
			t.Fatalf("notifications on the demo's series alone: %+v", n)
		}
		short, err1 := prom.scalar(demoBurn("5s"))
		long, err2 := prom.scalar(demoBurn("1m"))
		if err1 == nil && err2 == nil && short > threshold && long > threshold {
			burning++
		} else {
			burning = 0
		}
		return burning >= 40, fmt.Sprintf("demo error ratio 5s %v (%v), 1m %v (%v), threshold %v", short, err1, long, err2, threshold)
	})
	demoWorkflows, err := prom.byLabel(`group by (workflow) (cbc_workflow_runs_total{demo="true"})`, "workflow")
	if err != nil || len(demoWorkflows) == 0 {
		t.Fatalf("the demo's workflows: %v (%v)", demoWorkflows, err)
	}
	phase1 := time.Since(start)

	// Phase 2: real failures and a real stall.
	send := func(w io.Writer, line string) {
		if _, err := io.WriteString(w, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(failing.stdin, `{"type":"control_request","request_id":"init","request":{"subtype":"initialize"}}`)
	driverDone := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				driverDone <- nil
				return
			case <-tick.C:
			}
			if _, err := fmt.Fprintf(failing.stdin, `{"type":"user","message":{"role":"user","content":"[[SCENARIO:failed]] turn %d"}}`+"\n", n); err != nil {
				driverDone <- err
				return
			}
		}
	}()
	defer close(stop)
	send(stall.stdin, "go")

	promPoll(t, 60*time.Second, "the page at pager and the stall at tickets", func() (bool, string) {
		select {
		case err := <-driverDone:
			t.Fatalf("driving failed workflows: %v", err)
		default:
		}
		if e := misrouted(sink.all(), demoWorkflows); len(e) > 0 {
			t.Fatalf("%s", strings.Join(e, "\n"))
		}
		page := sink.firing("pager", dashboards.AlertSLOPage, "")
		stalled := sink.firing("tickets", dashboards.AlertWorkflowStalled, "e2e-stuck")
		as, _ := prom.alerts()
		var states []string
		for _, a := range as {
			states = append(states, a.Labels["alertname"]+"="+a.State)
		}
		return page && stalled, fmt.Sprintf("page at pager %v, stall at tickets %v; Prometheus alerts %v; notifications %+v", page, stalled, states, sink.all())
	})

	for _, e := range misrouted(sink.all(), demoWorkflows) {
		t.Error(e)
	}
	t.Logf("demo alone for %v (no alert, no notification), then page and stall delivered %v later; %d notifications",
		phase1.Round(time.Second), (time.Since(start) - phase1).Round(time.Second), len(sink.all()))
}

// misrouted says what went wrong in ns: an alert whose severity is not
// its receiver's (critical → pager, warning → tickets), or one about the
// demo (its label, or one of its workflows).
func misrouted(ns []amNotification, demoWorkflows map[string]float64) []string {
	want := map[string]string{"pager": dashboards.SeverityCritical, "tickets": dashboards.SeverityWarning}
	var errs []string
	for _, n := range ns {
		for _, a := range n.Alerts {
			if sev := a.Labels["severity"]; sev != want[n.Receiver] {
				errs = append(errs, fmt.Sprintf("%s (severity %q) reached %s", a.Labels["alertname"], sev, n.Receiver))
			}
			if _, ok := demoWorkflows[a.Labels["workflow"]]; ok || a.Labels["demo"] != "" {
				errs = append(errs, fmt.Sprintf("an alert on the demo's series reached %s: %v", n.Receiver, a.Labels))
			}
		}
	}
	return errs
}

// alertmanagerTestConfig is the Alertmanager configuration at path with
// every webhook URL pointed at base/<receiver name> and the route's
// group_wait, group_interval and repeat_interval shortened for a test;
// everything else (the routing tree, the matchers) is the file's. It
// fails the test unless the file routes to pager, tickets and blackhole.
func alertmanagerTestConfig(t *testing.T, path, base string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	route, ok := cfg["route"].(map[string]any)
	if !ok {
		t.Fatalf("%s: no route", path)
	}
	route["group_wait"], route["group_interval"], route["repeat_interval"] = "1s", "1s", "1h"
	recvs, _ := cfg["receivers"].([]any)
	var names []string
	for _, r := range recvs {
		r := r.(map[string]any)
		name, _ := r["name"].(string)
		names = append(names, name)
		hooks, _ := r["webhook_configs"].([]any)
		for _, h := range hooks {
			h.(map[string]any)["url"] = base + "/" + name
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"blackhole", "pager", "tickets"}) {
		t.Fatalf("%s: receivers %v, want blackhole, pager, tickets", path, names)
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// amNotification is the part of an Alertmanager webhook payload the test
// reads.
type amNotification struct {
	Receiver string `json:"receiver"`
	Status   string `json:"status"`
	Alerts   []struct {
		Status string            `json:"status"`
		Labels map[string]string `json:"labels"`
	} `json:"alerts"`
}

// webhookSink is an HTTP server on 127.0.0.1 standing in for every
// receiver: Alertmanager posts to /<receiver name>.
type webhookSink struct {
	url string
	mu  sync.Mutex
	got []amNotification
}

func newWebhookSink(t *testing.T) *webhookSink {
	t.Helper()
	s := &webhookSink{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n amNotification
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
			t.Errorf("webhook %s: %v", r.URL.Path, err)
		}
		if p := strings.TrimPrefix(r.URL.Path, "/"); p != n.Receiver {
			t.Errorf("webhook %s got a notification for receiver %q", r.URL.Path, n.Receiver)
		}
		s.mu.Lock()
		s.got = append(s.got, n)
		s.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *webhookSink) all() []amNotification {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// firing reports whether receiver got alertname firing (for workflow,
// unless that is "").
func (s *webhookSink) firing(receiver, alertname, workflow string) bool {
	for _, n := range s.all() {
		for _, a := range n.Alerts {
			if n.Receiver == receiver && a.Status == "firing" && a.Labels["alertname"] == alertname &&
				(workflow == "" || a.Labels["workflow"] == workflow) {
				return true
			}
		}
	}
	return false
}

// stallingWrapper is `cbc-otel run --tracker.stall-after 1s` over a fake CLI (sh)
// that, once the test writes a line to its stdin, starts a workflow run
// and then only echoes stdin: the run falls silent.
type stallingWrapper struct {
	stdin io.WriteCloser
}

func startStallingWrapper(t *testing.T, ctx context.Context, bin, target, workflow string) stallingWrapper {
	t.Helper()
	started := fmt.Sprintf(`{"type":"system","subtype":"task_started","task_id":"w1","run_id":"r1","task_type":"local_workflow","workflow_name":%q,"session_id":"s"}`, workflow)
	cmd := exec.CommandContext(ctx, bin, "run", "--tracker.stall-after", "1s", "--web.listen-address", target,
		"--", "sh", "-c", `read -r _ && printf '%s\n' "$STARTED" && exec cat`)
	cmd.Env = append(os.Environ(), "STARTED="+started)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &promLockedBuffer{}
	cmd.Stdout, cmd.Stderr = io.Discard, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("stalling wrapper stderr:\n%s", logs.String())
		}
	})
	return stallingWrapper{stdin: stdin}
}

// TestAlertmanagerRoutesEveryAlert asks Alertmanager 0.25's own routing
// code (amtool config routes test) where dashboards/alertmanager.example.yml,
// unchanged, sends each alert of the mixin with its labels: critical to
// pager, warning to tickets, info to blackhole (the one receiver
// TestAlertsReachTheirReceivers cannot watch, having no URL).
func TestAlertmanagerRoutesEveryAlert(t *testing.T) {
	amtool := realtool.Find(t, "amtool", "AMTOOL_BIN", "apt-get install -y --no-install-recommends prometheus-alertmanager")
	rf, err := dashboards.Rules(dashboards.RuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{dashboards.SeverityCritical: "pager", dashboards.SeverityWarning: "tickets", dashboards.SeverityInfo: "blackhole"}
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			args := []string{"config", "routes", "test", "--config.file=" + amExample, "alertname=" + r.Alert}
			for k, v := range r.Labels {
				args = append(args, k+"="+v)
			}
			out, err := exec.Command(amtool, args...).Output()
			if got := strings.TrimSpace(string(out)); err != nil || got != want[r.Labels["severity"]] {
				t.Errorf("%s (severity %q) routed to %q (%v), want %q", r.Alert, r.Labels["severity"], got, err, want[r.Labels["severity"]])
			}
		}
	}
	if n < 10 {
		t.Fatalf("%d alerts routed; the mixin has more", n)
	}
}
