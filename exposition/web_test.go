package exposition

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestServeTelemetryPath: the metrics move to the path; /metrics is then
// 404, /healthz and /readyz stay.
func TestServeTelemetryPath(t *testing.T) {
	addr := startServer(t, Options{Gatherer: testRegistry(t, "flow", "completed"), TelemetryPath: "/x/metrics"})
	c := &http.Client{Timeout: 5 * time.Second}
	for path, want := range map[string]int{"/x/metrics": 200, "/metrics": 404, "/healthz": 200, "/readyz": 200} {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		code, body := status(t, c, req)
		if code != want {
			t.Errorf("GET %s: %d, want %d", path, code, want)
		}
		if path == "/x/metrics" && !strings.Contains(body, "cbc_otel_build_info") {
			t.Errorf("GET %s lacks the metrics:\n%s", path, body)
		}
	}
}

func TestCheckTelemetryPath(t *testing.T) {
	for p, ok := range map[string]bool{"/metrics": true, "/a/b": true, "metrics": false, "": false, "/": false, "/healthz": false, "/readyz": false, "/{x}": false} {
		if err := CheckTelemetryPath(p); (err == nil) != ok {
			t.Errorf("CheckTelemetryPath(%q) = %v", p, err)
		}
	}
	if _, err := Listen(Options{Addr: "127.0.0.1:0", Gatherer: prometheus.NewRegistry(), TelemetryPath: "/healthz"}); err == nil {
		t.Error("Listen accepted /healthz as the telemetry path")
	}
}

// blockingGatherer holds every Gather until release is closed, saying on
// entered that one began.
type blockingGatherer struct {
	entered chan struct{}
	release chan struct{}
}

func (g blockingGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.entered <- struct{}{}
	<-g.release
	return nil, nil
}

// TestServeMaxRequests: with 2 scrapes held in the gatherer, a third gets
// 503 at once; the two held ones then succeed.
func TestServeMaxRequests(t *testing.T) {
	g := blockingGatherer{entered: make(chan struct{}), release: make(chan struct{})}
	addr := startServer(t, Options{Gatherer: g, MaxRequests: 2})
	c := &http.Client{Timeout: 10 * time.Second}
	codes := make(chan int, 2)
	for range 2 {
		go func() {
			resp, err := c.Get("http://" + addr + "/metrics")
			if err != nil {
				codes <- -1
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	for range 2 {
		select {
		case <-g.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("scrapes did not reach the gatherer")
		}
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	if code, _ := status(t, c, req); code != http.StatusServiceUnavailable {
		t.Errorf("third parallel scrape: %d, want 503", code)
	}
	close(g.release)
	for range 2 {
		if code := <-codes; code != 200 {
			t.Errorf("held scrape: %d, want 200", code)
		}
	}
}
