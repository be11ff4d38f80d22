package exposition

import (
	"crypto/tls"
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
	for p, ok := range map[string]bool{
		"/metrics": true, "/a/b": true, "/debug/metrics": true, "/debug/pprofx": true,
		"metrics": false, "": false, "/": false, "/healthz": false, "/readyz": false, "/{x}": false,
		"/debug/pprof": false, "/debug/pprof/": false, "/debug/pprof/heap": false,
	} {
		if err := CheckTelemetryPath(p); (err == nil) != ok {
			t.Errorf("CheckTelemetryPath(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"/healthz", "/debug/pprof/"} {
		if _, err := Listen(Options{Addr: "127.0.0.1:0", Gatherer: prometheus.NewRegistry(), TelemetryPath: p, EnablePprof: true}); err == nil {
			t.Errorf("Listen accepted %s as the telemetry path", p)
		}
	}
	// Handler alone, without Listen's check: a refused path is a panic, even
	// one the mux would take (pprof off, nothing else at /debug/pprof/heap).
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Handler accepted /debug/pprof/heap as the telemetry path")
			}
		}()
		Handler(Options{Gatherer: prometheus.NewRegistry(), TelemetryPath: "/debug/pprof/heap"})
	}()
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

// TestServePprof: /debug/pprof is 404 unless EnablePprof; enabled, the
// index, a named profile and the symbol lookup are served; behind a web
// config with basic auth they are refused (401) without the credentials,
// like /metrics.
func TestServePprof(t *testing.T) {
	c := &http.Client{Timeout: 10 * time.Second}
	get := func(c *http.Client, url, user, pass string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		return status(t, c, req)
	}
	paths := []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline", "/debug/pprof/symbol"}

	off := startServer(t, Options{Gatherer: testRegistry(t, "flow", "completed")})
	for _, p := range paths {
		if code, _ := get(c, "http://"+off+p, "", ""); code != http.StatusNotFound {
			t.Errorf("pprof off: %s: %d, want 404", p, code)
		}
	}

	on := startServer(t, Options{Gatherer: testRegistry(t, "flow", "completed"), EnablePprof: true})
	want := map[string]string{
		"/debug/pprof/":                  "goroutine",
		"/debug/pprof/heap?debug=1":      "heap profile",
		"/debug/pprof/goroutine?debug=1": "goroutine profile",
		"/debug/pprof/cmdline":           "",
		"/debug/pprof/symbol":            "num_symbols",
	}
	for _, p := range paths {
		if code, body := get(c, "http://"+on+p, "", ""); code != 200 || !strings.Contains(body, want[p]) {
			t.Errorf("pprof on: %s: %d, want 200 with %q", p, code, want[p])
		}
	}
	// The other routes are unchanged beside it.
	if code, body := get(c, "http://"+on+"/metrics", "", ""); code != 200 || !strings.Contains(body, "cbc_otel_build_info") {
		t.Errorf("/metrics beside pprof: %d", code)
	}

	cfgPath, pool := writeTLSConfig(t)
	auth := startServer(t, Options{Gatherer: testRegistry(t, "flow", "completed"), EnablePprof: true, WebConfigFile: cfgPath})
	tc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for _, p := range paths {
		for _, cred := range [][2]string{{"", ""}, {testUser, "wrong"}} {
			if code, body := get(tc, "https://"+auth+p, cred[0], cred[1]); code != http.StatusUnauthorized || strings.Contains(body, want[p]) && want[p] != "" {
				t.Errorf("pprof behind basic auth as %q/%q: %s: %d, want 401", cred[0], cred[1], p, code)
			}
		}
		if code, body := get(tc, "https://"+auth+p, testUser, testPass); code != 200 || !strings.Contains(body, want[p]) {
			t.Errorf("pprof with the credentials: %s: %d, want 200", p, code)
		}
	}
}

// TestServePprofCPUProfile: a CPU profile of a second is served as a
// protobuf profile (gzip), the form `go tool pprof` reads.
func TestServePprofCPUProfile(t *testing.T) {
	addr := startServer(t, Options{Gatherer: testRegistry(t, "flow", "completed"), EnablePprof: true})
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/debug/pprof/profile?seconds=1", nil)
	code, body := status(t, &http.Client{Timeout: 30 * time.Second}, req)
	if code != 200 || !strings.HasPrefix(body, "\x1f\x8b") {
		t.Errorf("CPU profile: %d, %d bytes, want 200 and a gzip'd profile", code, len(body))
	}
}
