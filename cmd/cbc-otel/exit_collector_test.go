package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/cbc-otel/cbc-otel/internal/oteltest"
)

// slowGRPC is an OTLP/gRPC receiver that answers each export after delay.
type slowGRPC struct {
	collectortrace.UnimplementedTraceServiceServer
	delay time.Duration
}

func (s slowGRPC) Export(ctx context.Context, _ *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// slowCollector answers OTLP exports over protocol after delay.
func slowCollector(t *testing.T, protocol string, delay time.Duration) string {
	t.Helper()
	if protocol == "grpc" {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		collectortrace.RegisterTraceServiceServer(srv, slowGRPC{delay: delay})
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		return lis.Addr().String()
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
		}
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(ts.Close)
	return strings.TrimPrefix(ts.URL, "http://")
}

// Issue 29.2: the reader of the CLI's stdout sees EOF when the child closes
// it, whatever the exporters do; a collector that has failed (refused, no
// such host) costs the exit at most FailedCollectorWait (well under 1 s);
// only an unresponsive one (a black hole, one slower than the flush
// timeout) holds the exit, up to --traces.flush-timeout, and the exit line
// says how long it waited. For gRPC and OTLP/HTTP. Bounds have slack: the
// machine is shared.
func TestE2ECollectorNeverDelaysEOF(t *testing.T) {
	oteltest.ClearEnv(t)
	const flush = 4 * time.Second
	rec, err := os.ReadFile(exportRecording)
	if err != nil {
		t.Fatal(err)
	}
	type kind int
	const (
		failed kind = iota
		unresponsive
	)
	for _, proto := range []string{"grpc", "http/protobuf"} {
		for _, tc := range []struct {
			name string
			addr func(t *testing.T) string
			kind kind
		}{
			{"refused", func(t *testing.T) string { return oteltest.RefusedAddr(t) }, failed},
			{"dns failure", func(*testing.T) string { return "nonexistent.invalid:4317" }, failed},
			{"black hole", func(t *testing.T) string { return oteltest.BlackHole(t) }, unresponsive},
			{"slow", func(t *testing.T) string { return slowCollector(t, proto, 2*flush) }, unresponsive},
		} {
			t.Run(strings.ReplaceAll(proto, "/", "-")+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				cmd := exec.Command(wrapperBin, "run", "--web.listen-address=", "--traces.flush-timeout", flush.String(),
					"--otlp.protocol", proto, "--otlp.endpoint", "http://"+tc.addr(t), "--", "cat")
				cmd.Stdin = bytes.NewReader(rec)
				var errb bytes.Buffer
				cmd.Stderr = &errb
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				t0 := time.Now()
				start(t, cmd)
				got, err := io.ReadAll(out)
				eof := time.Since(t0)
				if err != nil || !bytes.Equal(got, rec) {
					t.Fatalf("stdout: %d of %d bytes, %v", len(got), len(rec), err)
				}
				if code := exitCode(t, cmd); code != 0 {
					t.Fatalf("exit %d; stderr:\n%s", code, errb.String())
				}
				exit := time.Since(t0)
				t.Logf("EOF after %v, exit after %v; stderr:\n%s", eof, exit, errb.String())
				if eof > flush/4 {
					t.Errorf("the reader saw EOF after %v: it waited for the collector (flush timeout %v)", eof, flush)
				}
				switch tc.kind {
				case failed:
					if exit > flush/4 {
						t.Errorf("exit after %v: a failed collector must cost well under the flush timeout %v", exit, flush)
					}
					if !strings.Contains(errb.String(), "the collector having failed") && !strings.Contains(errb.String(), "spans dropped") {
						t.Errorf("the exit does not say the spans were lost:\n%s", errb.String())
					}
				case unresponsive:
					if exit < flush*3/4 || exit > flush+5*time.Second {
						t.Errorf("exit after %v: an unresponsive collector holds the exit up to the flush timeout %v, no less, not much more", exit, flush)
					}
					if !strings.Contains(errb.String(), "(the exit waited ") {
						t.Errorf("the exit line does not say the exit waited for the collector:\n%s", errb.String())
					}
				}
			})
		}
	}
}

// Issue 29.2: the reader sees EOF when the child closes its stdout, not
// when the wrapper exits: here the child lives on (until its stdin ends)
// after closing it.
func TestE2EStdoutEOFWhenChildClosesIt(t *testing.T) {
	cmd := wrapper("closestdout")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	start(t, cmd)
	stderr := readLines(t, errR)
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(out)
		got <- b
	}()
	select {
	case b := <-got:
		if string(b) != "bye\n" {
			t.Fatalf("stdout %q", b)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no EOF on stdout 20s after the child closed it (the wrapper still runs, its child too)")
	}
	if l := stderr.next(); l != "closed" {
		t.Fatalf("child said %q", l)
	}
	stdin.Close() // now the child exits
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
