package e2e

import (
	"net/http"
	"os/exec"
	"testing"
	"time"
)

// startDaemon runs bin with args (a server of the Prometheus family:
// Prometheus, the Pushgateway, Alertmanager), waits until GET ready answers
// 200, and kills it when the test ends. It returns the server's output,
// which is also logged if the test failed.
func startDaemon(t *testing.T, name, bin string, args []string, ready string) *promLockedBuffer {
	t.Helper()
	logs := &promLockedBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("%s log:\n%s", name, logs.String())
		}
	})
	client := &http.Client{Timeout: 2 * time.Second}
	promPoll(t, 30*time.Second, name+" ready", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("%s exited:\n%s", name, logs.String())
		default:
		}
		resp, err := client.Get(ready)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return logs
}
