package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/internal/realtool"
	"github.com/cbc-otel/cbc-otel/internal/testbin"
)

// requirePrometheus returns the prometheus binary. Without it the test
// skips locally and fails in CI, which installs it.
func requirePrometheus(t *testing.T) string {
	t.Helper()
	return realtool.Find(t, "prometheus", "", "apt-get install -y --no-install-recommends prometheus")
}

// promBuildCLI builds ./cmd/cbc-otel into a temporary directory, or
// returns $CBC_OTEL_BIN when set (a binary built once, e.g. by make build).
func promBuildCLI(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("CBC_OTEL_BIN"); b != "" {
		return b
	}
	bin, err := testbin.Build(t.Context(), filepath.Join(t.TempDir(), "cbc-otel"))
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// promLockedBuffer collects a child's stderr for failure messages.
type promLockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *promLockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *promLockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// prometheusServer is a real Prometheus scraping one target every second.
type prometheusServer struct {
	base string // http://127.0.0.1:PORT
	logs *promLockedBuffer
}

// startPrometheus runs Prometheus with a 1 s scrape of target (host:port)
// and waits until it is ready. It is killed when the test ends.
func startPrometheus(t *testing.T, bin, target string) *prometheusServer {
	t.Helper()
	return startPrometheusWithRules(t, bin, target, nil)
}

// startPrometheusWithRules is startPrometheus with a rule file loaded (when
// rules is not nil) and evaluated every second; extra are more flags (e.g.
// --enable-feature=exemplar-storage).
func startPrometheusWithRules(t *testing.T, bin, target string, rules []byte, extra ...string) *prometheusServer {
	t.Helper()
	dir := t.TempDir()
	ruleFiles := ""
	if rules != nil {
		rulesPath := filepath.Join(dir, "rules.yml")
		if err := os.WriteFile(rulesPath, rules, 0o600); err != nil {
			t.Fatal(err)
		}
		ruleFiles = fmt.Sprintf("rule_files:\n  - %q\n", rulesPath)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
%sscrape_configs:
  - job_name: cbc-otel
    metrics_path: /metrics
    static_configs:
      - targets: [%q]
`, ruleFiles, target)
	return startPrometheusConfig(t, bin, dir, cfg, extra...)
}

// startPrometheusConfig runs Prometheus with the configuration cfg (its
// file and data under dir) and more flags extra, and waits until it is
// ready. It is killed when the test ends.
func startPrometheusConfig(t *testing.T, bin, dir, cfg string, extra ...string) *prometheusServer {
	t.Helper()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(realtool.FreePorts(t, 1)[0]))
	logs := startDaemon(t, "prometheus", bin, append([]string{
		"--config.file=" + cfgPath,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}, extra...), "http://"+addr+"/-/ready")
	return &prometheusServer{base: "http://" + addr, logs: logs}
}

// promSample is one element of an instant-vector result.
type promSample struct {
	Metric map[string]string
	Value  float64
}

// api GETs path from Prometheus's HTTP API and decodes the "data" of a
// successful answer into data.
func (p *prometheusServer) api(path string, data any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("%s: %w: %s", path, err, body)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: %s", path, r.Error)
	}
	if err := json.Unmarshal(r.Data, data); err != nil {
		return fmt.Errorf("%s: %w: %s", path, err, r.Data)
	}
	return nil
}

// query runs an instant query and returns its vector (or scalar, as one
// sample without labels).
func (p *prometheusServer) query(q string) ([]promSample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.api("/api/v1/query?query="+url.QueryEscape(q), &data); err != nil {
		return nil, err
	}
	parse := func(v []any) (float64, error) {
		if len(v) != 2 {
			return 0, fmt.Errorf("bad value %v", v)
		}
		s, _ := v[1].(string)
		return strconv.ParseFloat(s, 64)
	}
	switch data.ResultType {
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &vec); err != nil {
			return nil, err
		}
		out := make([]promSample, 0, len(vec))
		for _, e := range vec {
			f, err := parse(e.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, promSample{Metric: e.Metric, Value: f})
		}
		return out, nil
	case "scalar":
		var v []any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return nil, err
		}
		f, err := parse(v)
		return []promSample{{Value: f}}, err
	}
	return nil, fmt.Errorf("query %q: result type %s", q, data.ResultType)
}

// byLabel runs q and maps the value of label to the sample value.
func (p *prometheusServer) byLabel(q, label string) (map[string]float64, error) {
	s, err := p.query(q)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, e := range s {
		out[e.Metric[label]] = e.Value
	}
	return out, nil
}

// scalar runs q, which must return exactly one sample.
func (p *prometheusServer) scalar(q string) (float64, error) {
	s, err := p.query(q)
	if err != nil {
		return 0, err
	}
	if len(s) != 1 {
		return math.NaN(), fmt.Errorf("query %q: %d samples, want 1", q, len(s))
	}
	return s[0].Value, nil
}

// poll calls f every 250 ms until it reports true or timeout passes; the
// last detail goes into the failure message.
func promPoll(t *testing.T, timeout time.Duration, what string, f func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	detail := ""
	for {
		ok, d := f()
		if ok {
			return
		}
		detail = d
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v: %s", what, timeout, detail)
		}
		<-tick.C
	}
}

// promLineStream reads a child's stdout line by line on its own goroutine, so
// the child never blocks on a full pipe and the test can wait with a
// deadline.
type promLineStream struct {
	lines chan []byte
}

func newPromLineStream(r io.Reader) *promLineStream {
	s := &promLineStream{lines: make(chan []byte, 1024)}
	go func() {
		defer close(s.lines)
		br := bufio.NewReaderSize(r, 1<<20)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				s.lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	return s
}

// next returns the next line, or fails the test at the deadline or EOF.
func (s *promLineStream) next(t *testing.T, deadline time.Time, stderr fmt.Stringer) []byte {
	t.Helper()
	select {
	case line, ok := <-s.lines:
		if !ok {
			t.Fatalf("wrapper stdout ended early; stderr:\n%s", stderr)
		}
		return line
	case <-time.After(time.Until(deadline)):
		t.Fatalf("no stdout line before the deadline; stderr:\n%s", stderr)
	}
	return nil
}

// drain discards the rest of the stream in the background.
func (s *promLineStream) drain() {
	go func() {
		for range s.lines {
		}
	}()
}

// scrapedWrapper is `cbc-otel run --web.listen-address target -- cbc-otel
// simulate ARGS...`, driven through its stdin by the test while Prometheus
// scrapes it.
type scrapedWrapper struct {
	stdin  io.WriteCloser
	out    *promLineStream
	stderr *promLockedBuffer
	exited chan error // receives Wait's result once; put it back after reading
}

// startScrapedWrapper starts the wrapper; the test's cleanup closes its
// stdin and kills it if it has not exited 10 s later.
func startScrapedWrapper(t *testing.T, ctx context.Context, bin, target string, simArgs ...string) *scrapedWrapper {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, append([]string{"run", "--web.listen-address", target, "--", bin, "simulate"}, simArgs...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w := &scrapedWrapper{stdin: stdin, stderr: &promLockedBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting cbc-otel run: %v", err)
	}
	go func() { w.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case err := <-w.exited:
			w.exited <- err
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("cbc-otel stderr:\n%s", w.stderr.String())
		}
	})
	w.out = newPromLineStream(stdout)
	return w
}

// waitScraped waits until prom scrapes the wrapper (up == 1), failing at
// once if the wrapper exits first.
func (w *scrapedWrapper) waitScraped(t *testing.T, prom *prometheusServer) {
	t.Helper()
	promPoll(t, 30*time.Second, "Prometheus scrapes the wrapper's /metrics", func() (bool, string) {
		select {
		case err := <-w.exited:
			w.exited <- err
			t.Fatalf("cbc-otel run exited early (%v); stderr:\n%s", err, w.stderr.String())
		default:
		}
		v, err := prom.scalar(`up{job="cbc-otel"}`)
		if err != nil {
			return false, err.Error()
		}
		return v == 1, fmt.Sprintf("up = %v; wrapper stderr: %s", v, w.stderr.String())
	})
}
