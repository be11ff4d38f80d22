package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// startPrometheusWithRules is startPrometheus (prom_helpers_test.go) with
// a rule file loaded and rules evaluated every second: the same 1 s scrape
// of target, readiness wait and cleanup.
func startPrometheusWithRules(t *testing.T, bin, target string, rules []byte) *prometheusServer {
	t.Helper()
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yml")
	if err := os.WriteFile(rulesPath, rules, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: cbc-otel
    metrics_path: /metrics
    static_configs:
      - targets: [%q]
`, rulesPath, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	port := promFreePort(t)
	logs := &promLockedBuffer{}
	cmd := exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	})
	p := &prometheusServer{base: fmt.Sprintf("http://127.0.0.1:%d", port), logs: logs}
	promPoll(t, 30*time.Second, "prometheus ready", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("prometheus exited:\n%s", logs.String())
		default:
		}
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	return p
}

// promAlert is one element of /api/v1/alerts.
type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	Value       string            `json:"value"`
}

// alerts returns the active (pending or firing) alerts.
func (p *prometheusServer) alerts() ([]promAlert, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/api/v1/alerts", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("alerts: %w: %s", err, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("alerts: %s", r.Error)
	}
	return r.Data.Alerts, nil
}

// ruleHealth returns the health of every loaded rule ("ok", "err",
// "unknown") by name, with the last error, from /api/v1/rules.
func (p *prometheusServer) ruleHealth() (map[string]string, error) {
	resp, err := http.Get(p.base + "/api/v1/rules")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, g := range r.Data.Groups {
		for _, rl := range g.Rules {
			out[rl.Name] = rl.Health + " " + rl.LastError
		}
	}
	return out, nil
}
