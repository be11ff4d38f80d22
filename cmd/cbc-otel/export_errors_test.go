package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/internal/oteltest"
)

// exportRecording is a recording whose replay makes 7 spans.
const exportRecording = "../../testdata/corpus/claude-code-2.1.328/complete.ndjson"

// unauthorizedCollector answers every OTLP/HTTP export 401 with a JSON body.
func unauthorizedCollector(t *testing.T) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"invalid api key"}`)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestReplayUndelivered: replay exits 3 when any span it made was not
// delivered, and says at the default log level where and why, once as the
// export fails and once at exit with the count; a healthy collector gets
// exit 0 and silence. An explicit --log.level error silences the lines,
// not the status.
func TestReplayUndelivered(t *testing.T) {
	for _, c := range []struct {
		name     string
		endpoint func(t *testing.T) (endpoint, where string)
		protocol string
		flags    []string
		code     int
		want     []string // on stderr; none: stderr empty
	}{
		{
			name: "refused http", protocol: "http/protobuf", code: exitUndelivered,
			endpoint: func(t *testing.T) (string, string) {
				a := oteltest.RefusedAddr(t)
				return "http://" + a, "http://" + a + "/v1/traces"
			},
			want: []string{
				`level=WARN msg="trace export failed" endpoint=%s protocol=http/protobuf cause="connection refused" spans_lost=7`,
				`level=WARN msg="7 spans dropped, not delivered to %s (http/protobuf): connection refused" count=7 export_errors=1`,
			},
		},
		{
			name: "refused grpc", protocol: "grpc", code: exitUndelivered,
			// The exporter retries a refused connection until the flush
			// deadline: keep that short.
			flags: []string{"--traces.flush-timeout=300ms"},
			endpoint: func(t *testing.T) (string, string) {
				a := "http://" + oteltest.RefusedAddr(t)
				return a, a
			},
			want: []string{
				`level=WARN msg="trace export failed" endpoint=%s protocol=grpc cause="gRPC Unavailable: connection refused" retrying=true`,
				// Whether the retrying export gives up before the flush
				// deadline (the spans count as failed) or is cut by it (they
				// are also said to be abandoned at the deadline) is a race
				// of two timers: both tell the 7 spans and the cause.
				`level=WARN msg="7 spans dropped, not delivered to %s (grpc): gRPC Unavailable: connection refused`,
			},
		},
		{
			name: "401 http", protocol: "http/protobuf", code: exitUndelivered,
			endpoint: func(t *testing.T) (string, string) {
				u := unauthorizedCollector(t)
				return u, u + "/v1/traces"
			},
			want: []string{
				`msg="trace export failed" endpoint=%s protocol=http/protobuf cause="HTTP 401 Unauthorized, body: {\"error\":\"invalid api key\"}"`,
				`msg="7 spans dropped, not delivered to %s (http/protobuf): HTTP 401 Unauthorized, body: {\"error\":\"invalid api key\"}"`,
			},
		},
		{
			name: "refused, --log.level error", protocol: "http/protobuf", code: exitUndelivered,
			flags: []string{"--log.level=error"},
			endpoint: func(t *testing.T) (string, string) {
				return "http://" + oteltest.RefusedAddr(t), ""
			},
		},
		{
			name: "healthy grpc", protocol: "grpc", code: exitOK,
			endpoint: func(t *testing.T) (string, string) {
				_, addr := oteltest.StartReceiver(t)
				return addr, ""
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			oteltest.ClearEnv(t)
			ep, where := c.endpoint(t)
			args := append([]string{"replay", "--summary.json", "--otlp.endpoint", ep, "--otlp.protocol", c.protocol}, c.flags...)
			args = append(args, exportRecording)
			var out, errb bytes.Buffer
			code := realMain(context.Background(), args, stdio{in: strings.NewReader(""), out: &out, err: &errb})
			if code != c.code {
				t.Errorf("replay = %d, want %d; stderr:\n%s", code, c.code, errb.String())
			}
			if !strings.Contains(out.String(), `"kind":"stats"`) {
				t.Errorf("replay printed no runs: %q", out.String())
			}
			if len(c.want) == 0 && errb.Len() > 0 {
				t.Errorf("stderr: want nothing, got\n%s", errb.String())
			}
			for _, w := range c.want {
				if w = fmt.Sprintf(w, where); !strings.Contains(errb.String(), w) {
					t.Errorf("stderr lacks\n%s\ngot:\n%s", w, errb.String())
				}
			}
		})
	}
}

// TestRunKeepsChildStatusWhenExportFails: run's status is the child's
// whatever becomes of the telemetry; the losses are said on stderr, spans
// and push alike, one line each.
func TestRunKeepsChildStatusWhenExportFails(t *testing.T) {
	oteltest.ClearEnv(t)
	rec, err := os.ReadFile(exportRecording)
	if err != nil {
		t.Fatal(err)
	}
	otlp, gw := oteltest.RefusedAddr(t), oteltest.RefusedAddr(t)
	for _, c := range []struct {
		name   string
		status int
	}{
		{"child fails", 7},
		{"child succeeds", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := []string{"--web.listen-address=", "--otlp.endpoint", "http://" + otlp, "--otlp.protocol", "http/protobuf",
				"--push.gateway", "http://" + gw, "--", "sh", "-c", fmt.Sprintf("cat; exit %d", c.status)}
			r := testRunner(nil)
			code := r.run(context.Background(), args, stdio{in: bytes.NewReader(rec), out: &out, err: &errb})
			if code != c.status {
				t.Errorf("run = %d, want the child's %d; stderr:\n%s", code, c.status, errb.String())
			}
			if !bytes.Equal(out.Bytes(), rec) {
				t.Errorf("stdout differs from the child's")
			}
			for _, w := range []string{
				fmt.Sprintf(`msg="7 spans dropped, not delivered to http://%s/v1/traces (http/protobuf): connection refused"`, otlp),
				fmt.Sprintf(`level=ERROR msg="flushing metrics: push not delivered to http://%s (Pushgateway): connection refused"`, gw),
			} {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr lacks\n%s\ngot:\n%s", w, errb.String())
				}
			}
		})
	}
}
