//go:build chaos

package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Helpers of sections 4 (hostile strings), 5 and 6, prefixed c5 so that
// they cannot collide with the helpers of the other sections' files in
// this package.

var c5ServingRE = regexp.MustCompile(`msg="serving metrics" addr=(\S+)`)

// c5WaitAddr polls a wrapper's stderr (info level or below) for the address
// its metrics server bound: tests listen on 127.0.0.1:0.
func c5WaitAddr(t testing.TB, stderr *syncBuffer, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if m := c5ServingRE.FindSubmatch(stderr.Bytes()); m != nil {
			return string(m[1])
		}
		time.Sleep(20 * time.Millisecond) // polling a log with a deadline, not synchronising on time
	}
	t.Fatalf("no \"serving metrics\" line within %v; stderr:\n%s", within, c5Tail(stderr.Bytes(), 2000))
	return ""
}

// c5Tail is the end of b, for failure messages.
func c5Tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// c5Get fetches url with client and returns status and body.
func c5Get(client *http.Client, url string) (int, []byte, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, b, err
}

// c5PollScrape scrapes url until cond holds for the body or within passes.
func c5PollScrape(t testing.TB, url string, within time.Duration, cond func(body string) bool) string {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		if code, b, err := c5Get(http.DefaultClient, url); err == nil && code == http.StatusOK {
			last = string(b)
			if cond(last) {
				return last
			}
		}
		time.Sleep(50 * time.Millisecond) // polling a scrape with a deadline
	}
	t.Fatalf("scrape of %s never met its condition within %v; last body:\n%s", url, within, c5Tail([]byte(last), 3000))
	return ""
}

// c5SumSeries sums the samples of a metric family in a text scrape.
func c5SumSeries(body, name string) float64 {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		rest := l[len(name):]
		if strings.HasPrefix(rest, "{") {
			rest = rest[strings.LastIndexByte(rest, '}')+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(f[0], &v); err == nil {
			sum += v
		}
	}
	return sum
}

// c5Stop asks a process to stop with SIGTERM and waits for it, killing it
// after within.
func c5Stop(t testing.TB, cmd *exec.Cmd, within time.Duration) {
	t.Helper()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		// run forwards the SIGTERM to its child and returns the child's
		// status, 128+15, when the child had not exited on its own first.
		var ee *exec.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 128+int(syscall.SIGTERM)) {
			t.Errorf("%s after SIGTERM: %v", cmd.Path, err)
		}
	case <-time.After(within):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("%s did not stop within %v of SIGTERM", cmd.Path, within)
	}
}

// c5OTLP is an in-process OTLP receiver (gRPC and HTTP/protobuf on
// 127.0.0.1) that keeps every request it gets, as received.
type c5OTLP struct {
	collectortrace.UnimplementedTraceServiceServer
	mu   sync.Mutex
	reqs []*collectortrace.ExportTraceServiceRequest
	raw  [][]byte

	GRPCAddr, HTTPAddr string
}

// c5StartOTLP starts both receivers; they stop with the test.
func c5StartOTLP(t testing.TB) *c5OTLP {
	t.Helper()
	r := &c5OTLP{}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, r)
	go gs.Serve(gl)
	t.Cleanup(gs.Stop)
	r.GRPCAddr = gl.Addr().String()

	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" {
			http.NotFound(w, req)
			return
		}
		b, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var m collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.keep(&m, b)
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	})}
	go hs.Serve(hl)
	t.Cleanup(func() { hs.Close() })
	r.HTTPAddr = hl.Addr().String()
	return r
}

// Export is the gRPC TraceService method.
func (r *c5OTLP) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	r.keep(req, b)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *c5OTLP) keep(m *collectortrace.ExportTraceServiceRequest, raw []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, m)
	r.raw = append(r.raw, raw)
}

// take returns and forgets what was received so far.
func (r *c5OTLP) take() ([]*collectortrace.ExportTraceServiceRequest, []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reqs, raw := r.reqs, bytes.Join(r.raw, nil)
	r.reqs, r.raw = nil, nil
	return reqs, raw
}

// c5Spans counts the spans of some requests.
func c5Spans(reqs []*collectortrace.ExportTraceServiceRequest) int {
	n := 0
	for _, q := range reqs {
		for _, rs := range q.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				n += len(ss.Spans)
			}
		}
	}
	return n
}

// c5ReadDir concatenates the regular files of dir (a state directory).
func c5ReadDir(t testing.TB, dir string) (b []byte, files int) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, f...)
		files++
	}
	return b, files
}
