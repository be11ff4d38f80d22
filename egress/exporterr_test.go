package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// logBuffer is a log destination safe for the exporter's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the log lines that contain s.
func (l *logBuffer) lines(s string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

func newTestLogger(w *logBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestCause(t *testing.T) {
	unauth := status.Error(codes.Unauthenticated, "missing bearer token")
	refusedGRPC := status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`)
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"refused", fmt.Errorf("traces export: %w", &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}), "connection refused"},
		{"dns", &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "nosuch.invalid", IsNotFound: true}}}, "DNS: no such host nosuch.invalid"},
		{"tls unknown authority", &url.Error{Op: "Post", URL: "https://x", Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}, "TLS: certificate signed by unknown authority"},
		{"http 401", errors.New(`traces export: failed to send to http://127.0.0.1:9/v1/traces: 401 Unauthorized (body: {"error":"invalid API key"})`), `HTTP 401 Unauthorized, body: {"error":"invalid API key"}`},
		{"http 404 empty", errors.New(`traces export: failed to send to http://h/v1/traces: 404 Not Found (body: (empty))`), `HTTP 404 Not Found, body: (empty)`},
		{"http logs", errors.New(`failed to send logs to http://h/v1/logs: 400 Bad Request (body: refused)`), `HTTP 400 Bad Request, body: refused`},
		{"http metrics", errors.New(`failed to upload metrics: failed to send metrics to http://h/v1/metrics: 503 Service Unavailable (body: later)`), `HTTP 503 Service Unavailable, body: later`},
		{"http retryable", fmt.Errorf("%w: %w", context.DeadlineExceeded, errors.New("retry-able request failure: body: overloaded")), "timed out retrying; last error: collector busy or unavailable (HTTP 429, 502, 503 or 504), body: overloaded"},
		{"push 401", errors.New(`metrics: push to http://gw:9091: unexpected status code 401 while pushing to http://gw:9091/metrics/job/x: go away`), "HTTP 401, body: go away"},
		{"grpc code", fmt.Errorf("traces export: %w", unauth), "gRPC Unauthenticated: missing bearer token"},
		{"grpc refused", refusedGRPC, "gRPC Unavailable: connection refused"},
		{"grpc refused after retries", fmt.Errorf("traces export: %w", fmt.Errorf("%w: %w", context.DeadlineExceeded, refusedGRPC)), "timed out retrying; last error: gRPC Unavailable: connection refused"},
		{"grpc tls", status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`), "gRPC Unavailable: TLS: certificate signed by unknown authority"},
		{"timeout", fmt.Errorf("traces export: %w", context.DeadlineExceeded), "timeout: no answer in time"},
		{"other", errors.New("traces export: disk \x1b[31mfull\n\tnow"), "disk [31mfull now"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Cause(c.err); got != c.want {
				t.Errorf("Cause(%q)\n got %q\nwant %q", c.err, got, c.want)
			}
		})
	}
}

// A body quoted in a cause is one bounded line, whatever the server sent.
func TestCauseBodyBounded(t *testing.T) {
	body := strings.Repeat("<p>\r\nno\x00 ", 500)
	got := Cause(errors.New("failed to send to http://h/v1/traces: 500 Internal Server Error (body: " + body + ")"))
	if !strings.HasPrefix(got, "HTTP 500 Internal Server Error, body: <p> no ") || strings.ContainsAny(got, "\r\n\x00") {
		t.Errorf("cause %q: want the status and a sanitized excerpt", got)
	}
	if n := len([]rune(got)); n > 220 {
		t.Errorf("cause is %d runes long: want it bounded", n)
	}
}

// fakeClock is the reporter's clock in tests: time moves when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }
func (c *fakeClock) String() string          { return c.t.Format(time.TimeOnly) }
func newFakeClock() *fakeClock               { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func refused() error                         { return fmt.Errorf("dial: %w", syscall.ECONNREFUSED) }
func countLines(l *logBuffer, s string) int  { return len(l.lines(s)) }
func lastLine(l *logBuffer, s string) string { ls := l.lines(s); return ls[len(ls)-1] }
func mustContain(t *testing.T, s string, w ...string) {
	t.Helper()
	for _, x := range w {
		if !strings.Contains(s, x) {
			t.Errorf("%q lacks %q", s, x)
		}
	}
}

// A collector that stays down is said once, then at most once per
// interval with what happened since; a recovery is said at info, once.
func TestReporterRateLimit(t *testing.T) {
	var logs logBuffer
	clk := newFakeClock()
	r := newExportReporter(newTestLogger(&logs), clk.now, 30*time.Second, "http://c:4318/v1/traces", ProtocolHTTP)

	for range 100 {
		r.exportFailed(refused(), 5)
		clk.advance(100 * time.Millisecond) // 10 s in all
	}
	if n := countLines(&logs, "trace export failed"); n != 1 {
		t.Fatalf("100 failures in 10 s gave %d lines, want 1:\n%s", n, logs.String())
	}
	mustContain(t, lastLine(&logs, "trace export failed"), "level=WARN", "endpoint=http://c:4318/v1/traces", "protocol=http/protobuf", `cause="connection refused"`, "spans_lost=5")

	clk.advance(25 * time.Second) // 35 s after the first line
	r.exportFailed(refused(), 5)
	if n := countLines(&logs, "trace export failed"); n != 2 {
		t.Fatalf("after the interval: %d lines, want 2:\n%s", n, logs.String())
	}
	// The 99 failures held back and this one.
	mustContain(t, lastLine(&logs, "trace export failed"), "failures=100", "spans_lost=500", "since=35s")

	r.exportOK()
	r.exportOK()
	if n := countLines(&logs, "trace export recovered"); n != 1 {
		t.Fatalf("recovery said %d times, want once:\n%s", n, logs.String())
	}
	mustContain(t, lastLine(&logs, "trace export recovered"), "level=INFO", "endpoint=http://c:4318/v1/traces")

	// Flapping within the interval: neither a failure nor a recovery line.
	clk.advance(time.Second)
	r.attemptFailed(refused())
	r.exportOK()
	if n := countLines(&logs, "level="); n != 3 {
		t.Fatalf("flap within the interval: %d lines, want still 3:\n%s", n, logs.String())
	}
	clk.advance(30 * time.Second)
	r.attemptFailed(status.Error(codes.Unavailable, "connection refused"))
	mustContain(t, lastLine(&logs, "trace export failed"), "retrying=true", `cause="gRPC Unavailable: connection refused"`, "failures=2")
	if got := r.lastCause(); got != "gRPC Unavailable: connection refused" {
		t.Errorf("lastCause = %q", got)
	}
}

// unauthenticatedGRPC is a collector that refuses every call: what a
// missing or wrong token gets.
func unauthenticatedGRPC(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
		return nil, status.Error(codes.Unauthenticated, "missing bearer token")
	}))
	collectortrace.RegisterTraceServiceServer(srv, &grpcReceiver{r: &receiver{got: make(chan export, 1)}})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return "http://" + lis.Addr().String()
}

// unauthorizedHTTP answers 401 with a JSON body.
func unauthorizedHTTP(t *testing.T) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"code":16,"message":"invalid API key"}`)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// untrustedTLS is a collector whose certificate the exporter does not
// trust (no OTEL_EXPORTER_OTLP_CERTIFICATE).
func untrustedTLS(protocol string) func(*testing.T) string {
	return func(t *testing.T) string {
		t.Helper()
		if protocol == ProtocolHTTP {
			ts := httptest.NewUnstartedServer(http.NotFoundHandler())
			ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshakes are the point
			ts.StartTLS()
			t.Cleanup(ts.Close)
			return ts.URL
		}
		_, _, cert, _ := selfSigned(t, "127.0.0.1")
		r := startReceiver(t, ProtocolGRPC, receiverOpts{tls: &tls.Config{Certificates: []tls.Certificate{cert}}})
		return "https://" + r.addr
	}
}

func refusedEndpoint(t *testing.T) string { return "http://" + closedPort(t) }

// Each failure is said at once, at warn, with the endpoint, the protocol
// and the cause in words; the loss at the end says the same.
func TestExportFailureSaid(t *testing.T) {
	for _, c := range []struct {
		name, protocol string
		endpoint       func(*testing.T) string
		cause          string   // how the cause begins
		more           []string // also on the line
	}{
		{"refused http", ProtocolHTTP, refusedEndpoint, "connection refused", nil},
		{"refused grpc", ProtocolGRPC, refusedEndpoint, "gRPC Unavailable: connection refused", []string{"retrying=true"}},
		{"401 http", ProtocolHTTP, unauthorizedHTTP, "HTTP 401 Unauthorized, body: {", []string{"invalid API key"}},
		{"unauthenticated grpc", ProtocolGRPC, unauthenticatedGRPC, "gRPC Unauthenticated: missing bearer token", []string{"spans_lost=1"}},
		{"dns http", ProtocolHTTP, func(*testing.T) string { return "http://nosuch.invalid:4318" }, "DNS: ", []string{"nosuch.invalid"}},
		{"dns grpc", ProtocolGRPC, func(*testing.T) string { return "http://nosuch.invalid:4317" }, "gRPC Unavailable: DNS: ", nil},
		{"tls http", ProtocolHTTP, untrustedTLS(ProtocolHTTP), "TLS: certificate signed by unknown authority", nil},
		{"tls grpc", ProtocolGRPC, untrustedTLS(ProtocolGRPC), "gRPC Unavailable: TLS: ", []string{"certificate"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			setOTelEnv(t, nil)
			var logs logBuffer
			ep := c.endpoint(t)
			p := setupOrFail(t, Config{Endpoint: ep, Protocol: c.protocol, ExportTimeout: 500 * time.Millisecond, Logger: newTestLogger(&logs)})
			exportOne(t, p)
			lines := logs.lines("trace export failed")
			if len(lines) != 1 {
				t.Fatalf("%d failure lines, want 1:\n%s", len(lines), logs.String())
			}
			where := strings.TrimSuffix(ep, "/")
			if c.protocol == ProtocolHTTP {
				where += "/v1/traces"
			}
			t.Log(lines[0])
			mustContain(t, lines[0], append([]string{"level=WARN", "endpoint=" + where, "protocol=" + c.protocol, `cause="` + c.cause}, c.more...)...)

			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_ = p.Shutdown(ctx)
			losses := p.Losses()
			if len(losses) != 1 || losses[0].Items != 1 {
				t.Fatalf("Losses = %+v, want the one span", losses)
			}
			mustContain(t, losses[0].String(), "1 spans dropped, not delivered to "+where+" ("+c.protocol+"): ")
			if !strings.Contains(losses[0].Cause, c.cause) {
				t.Errorf("loss cause %q lacks %q", losses[0].Cause, c.cause)
			}
		})
	}
}

// The summary of a loss counts every span lost, as Dropped does, and says
// why.
func TestLossSummary(t *testing.T) {
	setOTelEnv(t, nil)
	p := setupOrFail(t, Config{Endpoint: refusedEndpoint(t), Protocol: ProtocolHTTP, QueueSize: 64, BatchInterval: 10 * time.Millisecond})
	sink := feedProvider(t, p, "../testdata/corpus/claude-code-2.1.328/complete.ndjson")
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	losses := p.Losses()
	if len(losses) != 1 {
		t.Fatalf("Losses = %+v", losses)
	}
	l := losses[0]
	if l.Items != 7 || float64(l.Items) != sink.Dropped() || l.ExportErrors < 1 || l.Protocol != ProtocolHTTP {
		t.Errorf("loss %+v: want the 7 spans of the recording, as Dropped says (%v)", l, sink.Dropped())
	}
	mustContain(t, l.String(), "7 spans dropped, not delivered to http://", "/v1/traces (http/protobuf): connection refused")

	// Nothing lost, nothing to say.
	rcv := startReceiver(t, ProtocolGRPC, receiverOpts{})
	ok := setupOrFail(t, Config{Endpoint: rcv.addr, Protocol: ProtocolGRPC})
	exportOne(t, ok)
	if err := ok.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := ok.Losses(); len(got) != 0 {
		t.Errorf("Losses of a healthy export = %+v", got)
	}
}

// A gRPC collector that is down at shutdown: the exporter would retry it
// until the deadline, but a collector that has failed is given only
// FailedCollectorWait (issue 29.2), and the summary knows the cause from the
// attempts.
func TestLossAbandonedSaysCause(t *testing.T) {
	setOTelEnv(t, nil)
	var logs logBuffer
	p := setupOrFail(t, Config{Endpoint: refusedEndpoint(t), Protocol: ProtocolGRPC, Logger: newTestLogger(&logs)})
	_, span := p.TracerProvider().Tracer("test").Start(context.Background(), "op")
	span.End()
	const deadline = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	t0 := time.Now()
	_ = p.Shutdown(ctx)
	if took := time.Since(t0); took > deadline/3 {
		t.Errorf("Shutdown took %v of its %v for a collector refusing connections", took, deadline)
	}
	l := p.Losses()
	if len(l) != 1 {
		t.Fatalf("Losses = %+v", l)
	}
	mustContain(t, l[0].String(), "1 spans dropped, not delivered to http://127.0.0.1:", "(grpc): gRPC Unavailable: connection refused; 1 abandoned at exit, the collector having failed")
}
