// Package oteltest holds the test helpers of the packages that run the
// sinks (telemetry, cmd/cbc-otel): an OTLP gRPC span receiver, a clean
// OTel environment, a log buffer safe for servers' goroutines.
package oteltest

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// ClearEnv blanks, for the rest of the test, the OTel variables the SDK
// reads from the process environment (and ours), so that the developer's
// own cannot leak in. t.Setenv: never in parallel tests.
func ClearEnv(t testing.TB) {
	t.Helper()
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "TRACEPARENT", "TRACESTATE"} {
		t.Setenv(k, "")
	}
	for _, v := range []string{"ENDPOINT", "PROTOCOL", "HEADERS", "CERTIFICATE", "CLIENT_CERTIFICATE", "CLIENT_KEY", "COMPRESSION", "TIMEOUT", "INSECURE"} {
		t.Setenv("OTEL_EXPORTER_OTLP_"+v, "")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_"+v, "")
	}
}

// Receiver is an OTLP gRPC receiver that keeps what it is sent.
type Receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu      sync.Mutex
	reqs    []*collectortrace.ExportTraceServiceRequest
	headers []metadata.MD
	at      []time.Time // when each request arrived
}

// Export implements the trace service.
func (o *Receiver) Export(ctx context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reqs = append(o.reqs, req)
	o.headers = append(o.headers, md)
	o.at = append(o.at, time.Now())
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// Received returns what arrived so far: the requests, the headers of each
// and when each arrived.
func (o *Receiver) Received() ([]*collectortrace.ExportTraceServiceRequest, []metadata.MD, []time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.reqs), slices.Clone(o.headers), slices.Clone(o.at)
}

// StartReceiver serves a Receiver on a loopback port until the test ends;
// it returns the receiver and its host:port.
func StartReceiver(t testing.TB) (*Receiver, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	o := new(Receiver)
	collectortrace.RegisterTraceServiceServer(srv, o)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return o, lis.Addr().String()
}

// SyncBuffer is a log destination safe for the server's goroutines.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// BlackHole accepts connections and never answers (nor closes them until
// the test ends): a collector that is up but unresponsive.
func BlackHole(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return lis.Addr().String()
}

// RefusedAddr is an address nobody listens on: listened on, then closed.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// HTTPGet GETs url within 5 s and returns the body; anything but 200 fails
// the test.
func HTTPGet(t testing.TB, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}
