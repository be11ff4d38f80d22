package egress

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
	"github.com/cbc-otel/cbc-otel/traces"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// setup is New with the traces sink's deterministic ids, as the face
// builds it.
func setup(ctx context.Context, cfg Config) (*Egress, error) {
	if cfg.IDGenerator == nil {
		cfg.IDGenerator = traces.NewIDGenerator()
	}
	return New(ctx, cfg)
}

// feedProvider replays a recording into a traces sink on p.
func feedProvider(t *testing.T, p *Egress, file string) *traces.Sink {
	t.Helper()
	sink := traces.New(p.TracerProvider(), traces.Options{})
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pl := ingest.NewPipeline(ingest.PipelineOptions{Decode: streamjson.DecodeOptions{KeepErrors: true}, Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{sink}, Grace: ingest.DefaultGrace}})
	if err := ingest.Feed(context.Background(), pl, tap.SourceStdout, f); err != nil {
		t.Fatal(err)
	}
	pl.Close()
	return sink
}

func TestSetupSelection(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		cfg  Config
		// env is the process environment (t.Setenv): the SDK's variables
		// and, with ours nil, ours too.
		env map[string]string
		// ours, when non-nil, is Config.Env: the variables only New reads.
		ours    map[string]string
		off     bool
		wantErr string
		desc    string
	}{
		{name: "nothing configured", off: true},
		{name: "exporter none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, off: true},
		{name: "env endpoint grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, desc: "OTLP grpc → http://127.0.0.1:4317"},
		{name: "env http base", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, desc: "OTLP http/protobuf → http://127.0.0.1:4318/v1/traces"},
		{name: "env per-signal used as is", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/custom", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, desc: "OTLP http/protobuf → http://127.0.0.1:4318/custom"},
		{name: "flags override env", cfg: Config{Endpoint: "localhost:9999", Protocol: "grpc"}, env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, desc: "OTLP grpc → http://localhost:9999"},
		{name: "flag none beats env endpoint", cfg: Config{Exporter: "none"}, env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, off: true},
		{name: "endpoint none beats env endpoint", cfg: Config{Endpoint: "None"}, env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, off: true},
		{name: "env endpoint none", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "none"}, off: true},
		{name: "otlp with endpoint none", cfg: Config{Exporter: "otlp", Endpoint: "none"}, wantErr: "no endpoint"},
		{name: "otlp without endpoint", cfg: Config{Exporter: "otlp"}, wantErr: "no endpoint"},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "zipkin"},
		{name: "console refused without a writer", env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, wantErr: "console"},
		{name: "bad protocol", cfg: Config{Endpoint: "localhost:1", Protocol: "thrift"}, wantErr: "thrift"},
		{name: "bad scheme", cfg: Config{Endpoint: "ftp://x:1"}, wantErr: "scheme"},
		{name: "bad headers", cfg: Config{Endpoint: "localhost:1"}, env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, wantErr: "malformed"},
		{name: "bad traces header name", cfg: Config{Endpoint: "localhost:1"}, env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "bad key=v"}, wantErr: "OTEL_EXPORTER_OTLP_TRACES_HEADERS"},
		{name: "trailing comma in headers", cfg: Config{Endpoint: "localhost:1"}, env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=b,"}, desc: "OTLP grpc → http://localhost:1"},
		{name: "env http base with a path", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/otlp/", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, desc: "OTLP http/protobuf → http://127.0.0.1:4318/otlp/v1/traces"},
		{name: "env per-signal without path", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, desc: "OTLP http/protobuf → http://127.0.0.1:4318/"},
		{name: "per-signal none beats base", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, off: true},
		{name: "env host:port refused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4317"}, wantErr: "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{name: "env scheme-less name refused", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4317"}, wantErr: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{name: "bad env endpoint unused", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://x"}, off: true},
		{name: "malformed resource attributes", cfg: Config{Endpoint: "localhost:1"}, env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "novalue"}, wantErr: "resource"},
		{name: "Env decides the protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ours: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, desc: "OTLP http/protobuf → http://127.0.0.1:4318/v1/traces"},
		{name: "Env hides OTEL_TRACES_EXPORTER", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, ours: map[string]string{}, desc: "OTLP grpc → http://127.0.0.1:4317"},
		{name: "Env has no say over the endpoint", ours: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, off: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			setOTelEnv(t, c.env)
			if c.ours != nil {
				c.cfg.Env = envOf(c.ours)
			}
			p, err := setup(ctx, c.cfg)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Shutdown(ctx)
			if c.off != (p == nil) {
				t.Fatalf("provider = %v, off = %v", p, c.off)
			}
			if p != nil && p.Describe() != c.desc {
				t.Errorf("Describe = %q, want %q", p.Describe(), c.desc)
			}
		})
	}
	// A nil Egress is usable.
	var p *Egress
	if p.Dropped() != 0 || p.ExportErrors() != 0 || p.Shutdown(ctx) != nil || p.Describe() != "none" {
		t.Error("nil Egress misbehaves")
	}
}

func TestResource(t *testing.T) {
	ctx := context.Background()
	setOTelEnv(t, map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=x,deployment.environment=prod%20eu", "OTEL_SERVICE_NAME": "svc"})
	r, err := newResource(ctx, "1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range r.Attributes() {
		got[string(kv.Key)] = kv.Value.String()
	}
	if got["service.name"] != "svc" || got["deployment.environment"] != "prod eu" || got["service.version"] != "1.2.3" {
		t.Errorf("resource = %v", got)
	}
	if got["telemetry.sdk.name"] != "opentelemetry" || got["telemetry.sdk.language"] != "go" || got["telemetry.sdk.version"] != sdk.Version() {
		t.Errorf("telemetry.sdk.* = %v", got)
	}
	// OTEL_RESOURCE_ATTRIBUTES may set service.version too, over ours.
	setOTelEnv(t, map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.version=9"})
	r, _ = newResource(ctx, "1.2.3")
	for _, kv := range r.Attributes() {
		if kv.Key == "service.version" && kv.Value.AsString() != "9" {
			t.Errorf("service.version = %s, want the environment's", kv.Value.AsString())
		}
	}
	setOTelEnv(t, nil)
	r, _ = newResource(ctx, "")
	for _, kv := range r.Attributes() {
		if kv.Key == "service.name" && kv.Value.AsString() != DefaultServiceName {
			t.Errorf("default service.name = %s", kv.Value.AsString())
		}
	}
}

func TestFileExporter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	setOTelEnv(t, nil)
	p, err := setup(ctx, Config{File: path})
	if err != nil {
		t.Fatal(err)
	}
	feedProvider(t, p, "../testdata/corpus/claude-code-2.1.328/complete.ndjson")
	feedProvider(t, p, "../testdata/corpus/claude-code-2.1.328/fail.ndjson")
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	spans, lines := 0, 0
	names := map[string]bool{}
	for sc.Scan() {
		lines++
		if bytes.Contains(sc.Bytes(), []byte(`"traceId":"`)) && !regexp.MustCompile(`"traceId":"[0-9a-f]{32}"`).Match(sc.Bytes()) {
			t.Fatalf("line %d: trace ids are not hex as OTLP/JSON requires", lines)
		}
		req, err := UnmarshalRequest(sc.Bytes())
		if err != nil {
			t.Fatalf("line %d: %v", lines, err)
		}
		for _, rs := range req.ResourceSpans {
			svc := ""
			for _, kv := range rs.Resource.Attributes {
				if kv.Key == "service.name" {
					svc = kv.Value.GetStringValue()
				}
			}
			if svc != DefaultServiceName {
				t.Errorf("service.name = %q", svc)
			}
			for _, ss := range rs.ScopeSpans {
				if ss.Scope.Name != traces.ScopeName {
					t.Errorf("scope = %q", ss.Scope.Name)
				}
				for _, s := range ss.Spans {
					spans++
					names[s.Name] = true
					if len(s.TraceId) != 16 || len(s.SpanId) != 8 || s.StartTimeUnixNano == 0 || s.EndTimeUnixNano < s.StartTimeUnixNano {
						t.Errorf("bad span %s", s.Name)
					}
				}
			}
		}
	}
	if lines == 0 || spans != 7+6 {
		t.Errorf("%d lines, %d spans; want 13 spans", lines, spans)
	}
	if !names["invoke_workflow mock-review"] || !names["invoke_agent reader:failbeta"] {
		t.Errorf("names = %v", names)
	}
	if p.Dropped() != 0 || p.ExportErrors() != 0 {
		t.Errorf("dropped %v errors %v", p.Dropped(), p.ExportErrors())
	}
}

// hangingServer is an OTLP gRPC receiver whose Export blocks until the test
// ends: a collector that accepts connections and never answers.
type hangingServer struct {
	collectortrace.UnimplementedTraceServiceServer
	release chan struct{}
	mu      sync.Mutex
	calls   int
}

func (h *hangingServer) Export(ctx context.Context, _ *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	h.mu.Lock()
	h.calls++
	h.mu.Unlock()
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func startHanging(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	h := &hangingServer{release: make(chan struct{})}
	collectortrace.RegisterTraceServiceServer(srv, h)
	go srv.Serve(lis)
	t.Cleanup(func() { close(h.release); srv.Stop() })
	return lis.Addr().String()
}

// closedPort returns an address nobody listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func TestExporterDownDoesNotBlock(t *testing.T) {
	setOTelEnv(t, nil)
	const flush = 500 * time.Millisecond
	const margin = 400 * time.Millisecond
	for _, c := range []struct {
		name, protocol string
		addr           func(*testing.T) string
	}{
		{"refused grpc", ProtocolGRPC, closedPort},
		{"refused http", ProtocolHTTP, closedPort},
		{"hanging grpc", ProtocolGRPC, startHanging},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := setup(context.Background(), Config{Endpoint: "http://" + c.addr(t), Protocol: c.protocol, QueueSize: 4, BatchInterval: 20 * time.Millisecond, ExportTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			// 16 spans through a queue of 4: some are dropped at the queue
			// while the first export hangs or retries.
			begin := time.Now()
			sink := feedProvider(t, p, "../testdata/simulate/many-agents-claude.ndjson")
			if d := time.Since(begin); d > 2*time.Second {
				t.Errorf("feeding took %s: the sink blocked on the exporter", d)
			}
			ctx, cancel := context.WithTimeout(context.Background(), flush)
			defer cancel()
			begin = time.Now()
			err = p.Shutdown(ctx)
			if d := time.Since(begin); d > flush+margin {
				t.Errorf("Shutdown took %s, deadline %s", d, flush)
			}
			// Every span is lost, and counted: at the full queue, in a
			// failed export, or abandoned at the deadline.
			if sink.Dropped() != 16 {
				t.Errorf("Dropped = %v, want all 16 spans (err %v)", sink.Dropped(), err)
			}
			// The export abandoned at the deadline is a failed one, even
			// though it has not returned yet.
			if sink.ExportErrors() < 1 {
				t.Errorf("ExportErrors = %v, want the abandoned export counted", sink.ExportErrors())
			}
			// A second shutdown is harmless and quick.
			_ = p.Shutdown(context.Background())
		})
	}
}

func TestExportErrorsCounted(t *testing.T) {
	// A refused connection with a short export timeout: exports fail and
	// are counted while the run goes on.
	setOTelEnv(t, nil)
	p, err := setup(context.Background(), Config{Endpoint: closedPort(t), QueueSize: 64, BatchInterval: 10 * time.Millisecond, ExportTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sink := feedProvider(t, p, "../testdata/corpus/claude-code-2.1.328/complete.ndjson")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = p.ForceFlush(ctx)
	if sink.ExportErrors() < 1 {
		t.Errorf("ExportErrors = %v", sink.ExportErrors())
	}
	if sink.Dropped() != 7 {
		t.Errorf("Dropped = %v, want 7", sink.Dropped())
	}
	_ = p.Shutdown(ctx)
}
