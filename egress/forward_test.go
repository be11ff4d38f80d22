package egress

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/cbc-otel/cbc-otel/clitelemetry"
	"github.com/cbc-otel/cbc-otel/internal/clicorpus"
)

// sink is an in-test OTLP receiver (gRPC or HTTP) keeping what arrives and
// the test header of each request.
type sink struct {
	collogspb.UnimplementedLogsServiceServer
	colmetricspb.UnimplementedMetricsServiceServer

	mu      sync.Mutex
	logs    []*collogspb.ExportLogsServiceRequest
	metrics []*colmetricspb.ExportMetricsServiceRequest
	headers []string
	paths   []string
	fail    bool // HTTP: answer 400
}

const testHeader = "x-cbc-test"

func (s *sink) Export(ctx context.Context, req *collogspb.ExportLogsServiceRequest) (*collogspb.ExportLogsServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logs = append(s.logs, req)
	s.headers = append(s.headers, strings.Join(md.Get(testHeader), ","))
	return &collogspb.ExportLogsServiceResponse{}, nil
}

// metricsServer adapts sink to the metrics service (both have Export).
type metricsServer struct {
	colmetricspb.UnimplementedMetricsServiceServer
	s *sink
}

func (m metricsServer) Export(ctx context.Context, req *colmetricspb.ExportMetricsServiceRequest) (*colmetricspb.ExportMetricsServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	m.s.metrics = append(m.s.metrics, req)
	m.s.headers = append(m.s.headers, strings.Join(md.Get(testHeader), ","))
	return &colmetricspb.ExportMetricsServiceResponse{}, nil
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paths = append(s.paths, r.URL.Path)
	s.headers = append(s.headers, r.Header.Get(testHeader))
	if s.fail {
		http.Error(w, "refused", http.StatusBadRequest)
		return
	}
	switch r.URL.Path {
	case "/v1/logs":
		m := &collogspb.ExportLogsServiceRequest{}
		err = proto.Unmarshal(b, m)
		s.logs = append(s.logs, m)
	case "/v1/metrics":
		m := &colmetricspb.ExportMetricsServiceRequest{}
		err = proto.Unmarshal(b, m)
		s.metrics = append(s.metrics, m)
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
}

func grpcSink(t *testing.T) (*sink, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	srv := grpc.NewServer()
	collogspb.RegisterLogsServiceServer(srv, s)
	colmetricspb.RegisterMetricsServiceServer(srv, metricsServer{s: s})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return s, ln.Addr().String()
}

func httpSink(t *testing.T) (*sink, string) {
	t.Helper()
	s := &sink{}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// cleanEnv empties the OTLP variables the test does not set.
func cleanEnv(t *testing.T) {
	for _, sig := range []string{"", "TRACES_", "LOGS_", "METRICS_"} {
		for _, v := range []string{"ENDPOINT", "HEADERS", "PROTOCOL", "COMPRESSION", "INSECURE", "CERTIFICATE"} {
			t.Setenv("OTEL_EXPORTER_OTLP_"+sig+v, "")
		}
	}
}

type logKey struct {
	trace, span, body, event string
	time, observed           uint64
	severity                 int32
	flags                    uint32
	attrs                    int
}

// TestForwarder forwards the corpus logs and metrics over gRPC and HTTP and
// checks what the in-test receiver gets: every record with its ids, body and
// resource, every point, the header from OTEL_EXPORTER_OTLP_HEADERS.
func TestForwarder(t *testing.T) {
	corpus := clicorpus.Load(t)
	var wantLogs []logKey
	wantPoints := 0
	var logReqs []*collogspb.ExportLogsServiceRequest
	var metricReqs []*colmetricspb.ExportMetricsServiceRequest
	for _, l := range corpus {
		switch l.Path {
		case "/v1/logs":
			m, err := clitelemetry.DecodeLogs(l.Body, clitelemetry.JSON)
			if err != nil {
				t.Fatal(err)
			}
			logReqs = append(logReqs, m)
			for _, rl := range clicorpus.List(clicorpus.Generic(t, l.Body), "resourceLogs") {
				for _, sl := range clicorpus.List(rl, "scopeLogs") {
					for _, r := range clicorpus.List(sl, "logRecords") {
						var event string
						for _, a := range clicorpus.List(r, "attributes") {
							if clicorpus.Str(a, "key") == "event.name" {
								event = clicorpus.Str(clicorpus.Obj(a, "value"), "stringValue")
							}
						}
						wantLogs = append(wantLogs, logKey{clicorpus.Str(r, "traceId"), clicorpus.Str(r, "spanId"), clicorpus.Str(clicorpus.Obj(r, "body"), "stringValue"), event,
							uint64(clicorpus.Num(r, "timeUnixNano")), uint64(clicorpus.Num(r, "observedTimeUnixNano")), int32(clicorpus.Num(r, "severityNumber")), uint32(clicorpus.Num(r, "flags")), len(clicorpus.List(r, "attributes"))})
					}
				}
			}
		case "/v1/metrics":
			m, err := clitelemetry.DecodeMetrics(l.Body, clitelemetry.JSON)
			if err != nil {
				t.Fatal(err)
			}
			metricReqs = append(metricReqs, m)
			wantPoints += clicorpus.Points(clicorpus.Generic(t, l.Body))
		}
	}
	if len(wantLogs) == 0 || wantPoints == 0 {
		t.Fatal("no log records or points in the corpus")
	}
	for _, tc := range []struct {
		name, protocol string
		grpc           bool
		// endpoint and tracesEnv are formats taking the sink's address.
		endpoint, tracesEnv string
	}{
		{"grpc host:port", ProtocolGRPC, true, "%s", ""},
		{"http traces URL flag", ProtocolHTTP, false, "%s/v1/traces", ""},
		{"http base URL flag", ProtocolHTTP, false, "%s", ""},
		{"http from the traces variable", ProtocolHTTP, false, "", "%s/v1/traces"},
		{"grpc from the traces variable", ProtocolGRPC, true, "", "http://%s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t)
			t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", testHeader+"=s3cret%20value")
			var s *sink
			var addr string
			if tc.grpc {
				s, addr = grpcSink(t)
			} else {
				s, addr = httpSink(t)
			}
			endpoint := ""
			if tc.endpoint != "" {
				endpoint = fmt.Sprintf(tc.endpoint, addr)
			}
			if tc.tracesEnv != "" {
				t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", fmt.Sprintf(tc.tracesEnv, addr))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			f, err := newForwarder(ctx, forwardConfig{Protocol: tc.protocol, Endpoint: endpoint, Env: func(string) string { return "" }})
			if err != nil || f == nil {
				t.Fatalf("NewForwarder: %v, %v", f, err)
			}
			for _, r := range logReqs {
				f.Logs(ctx, r)
			}
			for _, r := range metricReqs {
				f.Metrics(ctx, r)
			}
			if err := f.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if lr, mp := f.lost(); lr != 0 || mp != 0 {
				t.Errorf("losses: %d log records, %d points", lr, mp)
			}
			st := f.Stats()
			if st.LogRecords.Exported.Load() != int64(len(wantLogs)) || st.MetricPoints.Exported.Load() != int64(wantPoints) {
				t.Errorf("exported %d records, %d points; want %d, %d", st.LogRecords.Exported.Load(), st.MetricPoints.Exported.Load(), len(wantLogs), wantPoints)
			}

			s.mu.Lock()
			defer s.mu.Unlock()
			var got []logKey
			for _, req := range s.logs {
				for _, rl := range req.GetResourceLogs() {
					if !hasAttr(rl.GetResource().GetAttributes(), "service.name", "claude-code") {
						t.Errorf("log resource %v: no service.name=claude-code", rl.GetResource())
					}
					for _, sl := range rl.GetScopeLogs() {
						if sl.GetScope().GetName() != "com.anthropic.claude_code.events" {
							t.Errorf("log scope %q", sl.GetScope().GetName())
						}
						for _, r := range sl.GetLogRecords() {
							var event string
							for _, a := range r.GetAttributes() {
								if a.GetKey() == "event.name" {
									event = a.GetValue().GetStringValue()
								}
							}
							got = append(got, logKey{hex.EncodeToString(r.GetTraceId()), hex.EncodeToString(r.GetSpanId()), r.GetBody().GetStringValue(), event,
								r.GetTimeUnixNano(), r.GetObservedTimeUnixNano(), int32(r.GetSeverityNumber()), r.GetFlags(), len(r.GetAttributes())})
						}
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(wantLogs) {
				t.Errorf("log records:\n got %v\nwant %v", got, wantLogs)
			}
			points := 0
			for _, req := range s.metrics {
				for _, rm := range req.GetResourceMetrics() {
					if !hasAttr(rm.GetResource().GetAttributes(), "service.name", "claude-code") {
						t.Errorf("metric resource %v: no service.name=claude-code", rm.GetResource())
					}
					for _, sm := range rm.GetScopeMetrics() {
						for _, m := range sm.GetMetrics() {
							if sum := m.GetSum(); sum != nil && sum.GetAggregationTemporality() != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA {
								t.Errorf("%s: temporality %v, want delta", m.GetName(), sum.GetAggregationTemporality())
							}
						}
					}
				}
				points += clitelemetry.CountDataPoints(req.GetResourceMetrics())
			}
			if points != wantPoints {
				t.Errorf("%d points arrived, want %d", points, wantPoints)
			}
			for i, h := range s.headers {
				if h != "s3cret value" {
					t.Errorf("request %d: header %s = %q, want the one of OTEL_EXPORTER_OTLP_HEADERS", i, testHeader, h)
				}
			}
			for _, p := range s.paths {
				if p != "/v1/logs" && p != "/v1/metrics" {
					t.Errorf("HTTP request to %s", p)
				}
			}
		})
	}
}

func hasAttr(kvs []*commonpb.KeyValue, key, value string) bool {
	for _, kv := range kvs {
		if kv.GetKey() == key && kv.GetValue().GetStringValue() == value {
			return true
		}
	}
	return false
}

// TestForwarderLosses: exports the receiver refuses are counted as lost,
// and so is what comes after Shutdown.
func TestForwarderLosses(t *testing.T) {
	cleanEnv(t)
	s, addr := httpSink(t)
	s.fail = true
	var logBuf logBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f, err := newForwarder(ctx, forwardConfig{Protocol: ProtocolHTTP, Endpoint: addr, Env: func(string) string { return "" }, Logger: newTestLogger(&logBuf)})
	if err != nil {
		t.Fatal(err)
	}
	var records, points int
	for _, l := range clicorpus.Load(t) {
		switch l.Path {
		case "/v1/logs":
			m, _ := clitelemetry.DecodeLogs(l.Body, clitelemetry.JSON)
			records += clitelemetry.CountLogRecords(m.GetResourceLogs())
			f.Logs(ctx, m)
		case "/v1/metrics":
			m, _ := clitelemetry.DecodeMetrics(l.Body, clitelemetry.JSON)
			points += clitelemetry.CountDataPoints(m.GetResourceMetrics())
			f.Metrics(ctx, m)
		}
	}
	if err := f.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, l := range clicorpus.Load(t) {
		if l.Path == "/v1/metrics" {
			m, _ := clitelemetry.DecodeMetrics(l.Body, clitelemetry.JSON)
			f.Metrics(ctx, m) // after Shutdown: late
			break
		}
	}
	f.Logs(ctx, &collogspb.ExportLogsServiceRequest{})
	st := f.Stats()
	lr, mp := f.lost()
	if lr != int64(records) || st.LogRecords.Failed.Load() != int64(records) {
		t.Errorf("log records lost %d (failed %d), want %d", lr, st.LogRecords.Failed.Load(), records)
	}
	late := st.MetricPoints.Late.Load()
	if late == 0 {
		t.Error("points after Shutdown not counted late")
	}
	if mp != int64(points)+late || st.MetricPoints.Failed.Load() != int64(points) {
		t.Errorf("points lost %d (failed %d, late %d), want %d + late", mp, st.MetricPoints.Failed.Load(), late, points)
	}
	if st.LogRecords.ExportErrors.Load() == 0 || st.MetricPoints.ExportErrors.Load() == 0 {
		t.Error("no export errors counted")
	}
	if !strings.Contains(logBuf.String(), "forwarding the CLI's telemetry failed") {
		t.Errorf("no failure logged: %q", logBuf.String())
	}
}

// TestSignalEndpoint: the endpoint rule of the package doc.
func TestSignalEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name, flag, protocol, signal string
		env                          map[string]string
		want                         string
		on                           bool
		err                          bool
	}{
		{"nothing", "", ProtocolHTTP, "logs", nil, "", false, false},
		{"flag host:port http", "collector:4318", ProtocolHTTP, "logs", nil, "http://collector:4318/v1/logs", true, false},
		{"flag host:port grpc", "collector:4317", ProtocolGRPC, "metrics", nil, "http://collector:4317", true, false},
		{"flag traces URL", "https://c.example/otlp/v1/traces", ProtocolHTTP, "metrics", nil, "https://c.example/otlp/v1/metrics", true, false},
		{"flag base path", "https://c.example/otlp/", ProtocolHTTP, "logs", nil, "https://c.example/otlp/v1/logs", true, false},
		{"flag over env", "c:1", ProtocolHTTP, "logs", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://e:2"}, "http://c:1/v1/logs", true, false},
		{"flag none", "none", ProtocolHTTP, "logs", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://e:2"}, "", false, false},
		{"flag bad scheme", "ftp://c", ProtocolHTTP, "logs", nil, "", false, true},
		{"per-signal env: the exporter's", "", ProtocolHTTP, "logs", map[string]string{"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://l:1/x", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/v1/traces"}, "", true, false},
		{"general env: the exporter's", "", ProtocolGRPC, "metrics", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://g:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/v1/traces"}, "", true, false},
		{"other signal's env does not count", "", ProtocolHTTP, "metrics", map[string]string{"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://l:1"}, "", false, false},
		{"traces env derived http", "", ProtocolHTTP, "logs", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://t:4318/v1/traces"}, "https://t:4318/v1/logs", true, false},
		{"traces env derived grpc", "", ProtocolGRPC, "metrics", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4317"}, "http://t:4317", true, false},
		{"traces env none", "", ProtocolHTTP, "logs", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "none"}, "", false, false},
		{"env host:port refused", "", ProtocolHTTP, "logs", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "g:1"}, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			got, on, err := signalEndpoint(tc.flag, tc.protocol, tc.signal)
			if (err != nil) != tc.err || got != tc.want || on != tc.on {
				t.Errorf("got %q, %v, %v; want %q, %v, error %v", got, on, err, tc.want, tc.on, tc.err)
			}
		})
	}
}

// TestNewForwarderOff: no endpoint, nil Forwarder, which is usable.
func TestNewForwarderOff(t *testing.T) {
	cleanEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, err := newForwarder(ctx, forwardConfig{})
	if err != nil || f != nil {
		t.Fatalf("got %v, %v; want nil, nil", f, err)
	}
	f.Logs(ctx, &collogspb.ExportLogsServiceRequest{})
	f.Metrics(ctx, &colmetricspb.ExportMetricsServiceRequest{})
	if err := f.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := newForwarder(ctx, forwardConfig{Protocol: "http/json", Endpoint: "c:1"}); err == nil {
		t.Error("http/json accepted")
	}
}

// TestForwarderMaxResources: the records of resources past the bound are
// dropped and counted.
func TestForwarderMaxResources(t *testing.T) {
	cleanEnv(t)
	s, addr := httpSink(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f, err := newForwarder(ctx, forwardConfig{Protocol: ProtocolHTTP, Endpoint: addr, MaxResources: 1, Env: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	req := func(service string) *collogspb.ExportLogsServiceRequest {
		return &collogspb.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{
			Resource:  &resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: service}}}}},
			ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{TimeUnixNano: 1}, {TimeUnixNano: 2}}}},
		}}}
	}
	f.Logs(ctx, req("a"))
	f.Logs(ctx, req("b"))
	f.Logs(ctx, req("a"))
	if err := f.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	st := f.Stats().LogRecords
	if st.Exported.Load() != 4 || st.Unsupported.Load() != 2 || st.Lost() != 2 {
		t.Errorf("exported %d, unsupported %d, lost %d; want 4, 2, 2", st.Exported.Load(), st.Unsupported.Load(), st.Lost())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := clitelemetry.CountLogRecords(s.logs[0].GetResourceLogs()); len(s.logs) != 1 || n != 4 {
		t.Errorf("%d requests, first with %d records; want 1 with 4", len(s.logs), n)
	}
}

func TestExportTimeout(t *testing.T) {
	for _, tc := range []struct {
		name       string
		configured time.Duration
		env        map[string]string
		want       time.Duration
	}{
		{"default", 0, nil, DefaultExportTimeout},
		{"configured wins", time.Second, map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "60000"}, time.Second},
		{"longer env", 0, map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "60000"}, time.Minute},
		{"shorter env", 0, map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "500"}, DefaultExportTimeout},
		{"per-signal first", 0, map[string]string{"OTEL_EXPORTER_OTLP_LOGS_TIMEOUT": "30000", "OTEL_EXPORTER_OTLP_TIMEOUT": "60000"}, 30 * time.Second},
		{"invalid ignored", 0, map[string]string{"OTEL_EXPORTER_OTLP_LOGS_TIMEOUT": "soon", "OTEL_EXPORTER_OTLP_TIMEOUT": "20000"}, 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "")
			t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			if got := exportTimeout(tc.configured, "LOGS"); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
