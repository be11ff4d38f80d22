package egress

import (
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// otelVars are the variables New and the SDK read. setOTelEnv blanks
// them all (the SDK reads "" as unset) so that the developer's own
// environment cannot leak into a test.
var otelVars = func() []string {
	vars := []string{"OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "TRACEPARENT", "TRACESTATE"}
	for _, v := range []string{"ENDPOINT", "PROTOCOL", "HEADERS", "CERTIFICATE", "CLIENT_CERTIFICATE", "CLIENT_KEY", "COMPRESSION", "TIMEOUT", "INSECURE"} {
		vars = append(vars, "OTEL_EXPORTER_OTLP_"+v, "OTEL_EXPORTER_OTLP_TRACES_"+v)
	}
	return vars
}()

// setOTelEnv makes m the whole OTel environment of the process for the rest
// of the test: the SDK reads only the process environment, so this is how
// tests inject it (t.Setenv: never in parallel tests).
func setOTelEnv(t *testing.T, m map[string]string) {
	t.Helper()
	for _, k := range otelVars {
		t.Setenv(k, "")
	}
	for k, v := range m {
		t.Setenv(k, v)
	}
}

// export is what one OTLP export request brought to a receiver.
type export struct {
	header   map[string]string // lower-case names: HTTP headers or gRPC metadata
	encoding string            // HTTP Content-Encoding, or gRPC's grpc-encoding
	path     string            // HTTP only
	req      *collectortrace.ExportTraceServiceRequest
}

// resource returns the string attributes of the first resource.
func (e export) resource() map[string]string {
	out := map[string]string{}
	if len(e.req.ResourceSpans) == 0 {
		return out
	}
	for _, kv := range e.req.ResourceSpans[0].Resource.Attributes {
		out[kv.Key] = kv.Value.GetStringValue()
	}
	return out
}

// receiver is an OTLP receiver on 127.0.0.1 speaking one protocol.
type receiver struct {
	addr string      // host:port
	got  chan export // every export answered
	// abandoned gets, in hang mode, how long each request was held before
	// the client gave up on it.
	abandoned chan time.Duration
}

type receiverOpts struct {
	tls  *tls.Config // nil: plaintext
	hang bool        // never answer (until the test ends)
}

func startReceiver(t *testing.T, protocol string, o receiverOpts) *receiver {
	t.Helper()
	r := &receiver{got: make(chan export, 64), abandoned: make(chan time.Duration, 64)}
	release := make(chan struct{})
	if protocol == ProtocolGRPC {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		opts := []grpc.ServerOption{grpc.StatsHandler(encodingStats{})}
		if o.tls != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(o.tls)))
		}
		srv := grpc.NewServer(opts...)
		collectortrace.RegisterTraceServiceServer(srv, &grpcReceiver{r: r, hang: o.hang, release: release})
		go srv.Serve(lis)
		t.Cleanup(func() { close(release); srv.Stop() })
		r.addr = lis.Addr().String()
		return r
	}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if o.hang {
			// Only once the body is read does the server watch the
			// connection, and cancel the context when the client leaves.
			_, _ = io.Copy(io.Discard, req.Body)
			r.hold(req.Context(), release)
			return
		}
		body := io.Reader(req.Body)
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		msg := new(collectortrace.ExportTraceServiceRequest)
		if err == nil {
			err = proto.Unmarshal(b, msg)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		hdr := map[string]string{}
		for k, v := range req.Header {
			hdr[strings.ToLower(k)] = strings.Join(v, ",")
		}
		r.got <- export{header: hdr, encoding: req.Header.Get("Content-Encoding"), path: req.URL.Path, req: msg}
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	// Refused handshakes are the point of some tests, not news.
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	if o.tls != nil {
		ts.TLS = o.tls
		ts.StartTLS()
	} else {
		ts.Start()
	}
	// Cleanups run last first: release the held requests, then close.
	t.Cleanup(ts.Close)
	t.Cleanup(func() { close(release) })
	r.addr = ts.Listener.Addr().String()
	return r
}

// hold never answers a request: it returns when the client gives up on it
// (ctx, then reported on abandoned) or the test ends (release).
func (r *receiver) hold(ctx context.Context, release chan struct{}) {
	begin := time.Now()
	select {
	case <-ctx.Done():
		r.abandoned <- time.Since(begin)
	case <-release:
	}
}

// grpcReceiver is the gRPC side of a receiver.
type grpcReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	r       *receiver
	hang    bool
	release chan struct{}
}

func (g *grpcReceiver) Export(ctx context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	if g.hang {
		g.r.hold(ctx, g.release)
		if err := ctx.Err(); err != nil {
			// Never a success: the server's deadline (the client's
			// grpc-timeout) can pass just before the client's own, and an
			// answer then would beat the client's giving up.
			return nil, status.FromContextError(err).Err()
		}
		return &collectortrace.ExportTraceServiceResponse{}, nil
	}
	hdr := map[string]string{}
	md, _ := metadata.FromIncomingContext(ctx)
	for k, v := range md {
		hdr[k] = strings.Join(v, ",")
	}
	enc, _ := ctx.Value(encodingKey{}).(*string)
	g.r.got <- export{header: hdr, encoding: *enc, req: req}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// encodingStats records each RPC's grpc-encoding, which gRPC keeps out of
// the metadata, where the handler can read it.
type encodingStats struct{}

type encodingKey struct{}

func (encodingStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, encodingKey{}, new(string))
}

func (encodingStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if h, ok := s.(*stats.InHeader); ok {
		if p, ok := ctx.Value(encodingKey{}).(*string); ok {
			*p = h.Compression
		}
	}
}

func (encodingStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (encodingStats) HandleConn(context.Context, stats.ConnStats)                       {}

// selfSigned makes a self-signed ECDSA certificate for 127.0.0.1, good for
// a server and for a client, and writes it and its key as PEM files.
func selfSigned(t *testing.T, name string) (certFile, keyFile string, cert tls.Certificate, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if cert, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return certFile, keyFile, cert, pool
}

// exportOne ends one span on p and flushes it: when ForceFlush returns, the
// export has been answered, failed or given up.
func exportOne(t *testing.T, p *Egress) {
	t.Helper()
	_, span := p.TracerProvider().Tracer("test").Start(context.Background(), "op")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
}

// received returns the one export r got; ForceFlush has returned, so there
// is nothing to wait for.
func (r *receiver) received(t *testing.T) export {
	t.Helper()
	select {
	case e := <-r.got:
		if len(r.got) != 0 {
			t.Errorf("%d more exports", len(r.got))
		}
		return e
	default:
		t.Fatal("the receiver got nothing")
		return export{}
	}
}

func setupOrFail(t *testing.T, cfg Config) *Egress {
	t.Helper()
	p, err := setup(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		t.Fatal("tracing is off")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	return p
}

var protocols = []string{ProtocolGRPC, ProtocolHTTP}

// TestSDKEnvReachesReceiver sets the variables the SDK reads itself and
// checks, at a receiver, that each took effect: endpoint, headers,
// compression, insecure, resource.
func TestSDKEnvReachesReceiver(t *testing.T) {
	cases := []struct {
		name string
		// env gets the receiver's host:port.
		env   func(addr string) map[string]string
		check func(t *testing.T, protocol string, e export)
	}{
		{
			name: "headers",
			env: func(addr string) map[string]string {
				return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr, "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=s3cret%20one, x-team = agents"}
			},
			check: func(t *testing.T, _ string, e export) {
				if e.header["x-api-key"] != "s3cret one" || e.header["x-team"] != "agents" {
					t.Errorf("headers = %v", e.header)
				}
			},
		},
		{
			name: "per-signal headers win",
			env: func(addr string) map[string]string {
				return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr, "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=base", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-api-key=traces"}
			},
			check: func(t *testing.T, _ string, e export) {
				if e.header["x-api-key"] != "traces" {
					t.Errorf("x-api-key = %q", e.header["x-api-key"])
				}
			},
		},
		{
			name: "no compression by default",
			env: func(addr string) map[string]string {
				return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr}
			},
			check: func(t *testing.T, _ string, e export) {
				if e.encoding == "gzip" {
					t.Error("gzip-encoded without OTEL_EXPORTER_OTLP_COMPRESSION")
				}
			},
		},
		{
			name: "gzip",
			env: func(addr string) map[string]string {
				return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr, "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}
			},
			check: func(t *testing.T, _ string, e export) {
				if e.encoding != "gzip" {
					t.Errorf("encoding = %q, want gzip", e.encoding)
				}
			},
		},
		{
			name: "per-signal gzip",
			env: func(addr string) map[string]string {
				return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr, "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip"}
			},
			check: func(t *testing.T, _ string, e export) {
				if e.encoding != "gzip" {
					t.Errorf("encoding = %q, want gzip", e.encoding)
				}
			},
		},
		{
			name: "default resource",
			env: func(addr string) map[string]string {
				return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr}
			},
			check: func(t *testing.T, _ string, e export) {
				if r := e.resource(); r["service.name"] != DefaultServiceName || r["service.version"] != "9.9.9" {
					t.Errorf("resource = %v", r)
				}
			},
		},
		{
			name: "OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES",
			env: func(addr string) map[string]string {
				return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr, "OTEL_SERVICE_NAME": "svc-env", "OTEL_RESOURCE_ATTRIBUTES": "service.name=loses,deployment.environment=prod%20eu"}
			},
			check: func(t *testing.T, _ string, e export) {
				if r := e.resource(); r["service.name"] != "svc-env" || r["deployment.environment"] != "prod eu" || r["service.version"] != "9.9.9" {
					t.Errorf("resource = %v", r)
				}
			},
		},
		{
			name: "service.name from OTEL_RESOURCE_ATTRIBUTES",
			env: func(addr string) map[string]string {
				return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr, "OTEL_RESOURCE_ATTRIBUTES": "service.name=from-ra,service.version=2.0"}
			},
			check: func(t *testing.T, _ string, e export) {
				if r := e.resource(); r["service.name"] != "from-ra" || r["service.version"] != "2.0" {
					t.Errorf("resource = %v", r)
				}
			},
		},
		{
			// The SDK lets OTEL_EXPORTER_OTLP_INSECURE override an https
			// scheme: plaintext to a plaintext receiver.
			name: "insecure",
			env: func(addr string) map[string]string {
				return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://" + addr, "OTEL_EXPORTER_OTLP_INSECURE": "true"}
			},
			check: func(*testing.T, string, export) {},
		},
		{
			name: "per-signal endpoint used as is",
			env: func(addr string) map[string]string {
				return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://" + addr + "/custom/traces", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}
			},
			check: func(t *testing.T, protocol string, e export) {
				if protocol == ProtocolHTTP && e.path != "/custom/traces" {
					t.Errorf("path = %q", e.path)
				}
			},
		},
		{
			name: "base endpoint with a path",
			env: func(addr string) map[string]string {
				return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr + "/otlp"}
			},
			check: func(t *testing.T, protocol string, e export) {
				if protocol == ProtocolHTTP && e.path != "/otlp/v1/traces" {
					t.Errorf("path = %q", e.path)
				}
			},
		},
	}
	for _, protocol := range protocols {
		for _, c := range cases {
			t.Run(protocol+"/"+c.name, func(t *testing.T) {
				r := startReceiver(t, protocol, receiverOpts{})
				env := c.env(r.addr)
				env["OTEL_EXPORTER_OTLP_PROTOCOL"] = protocol
				setOTelEnv(t, env)
				p := setupOrFail(t, Config{ServiceVersion: "9.9.9"})
				exportOne(t, p)
				e := r.received(t)
				if n := len(e.req.GetResourceSpans()); n != 1 {
					t.Fatalf("%d resource spans", n)
				}
				if res := e.resource(); res["telemetry.sdk.name"] != "opentelemetry" || res["telemetry.sdk.language"] != "go" || res["telemetry.sdk.version"] != sdk.Version() {
					t.Errorf("telemetry.sdk.* missing: %v", res)
				}
				if protocol == ProtocolHTTP && e.path == "" {
					t.Error("no path")
				}
				c.check(t, protocol, e)
				if p.ExportErrors() != 0 || p.Dropped() != 0 {
					t.Errorf("export errors %v, dropped %v", p.ExportErrors(), p.Dropped())
				}
			})
		}
	}
}

// TestSDKEnvCertificates exports to an https receiver with a self-signed
// certificate: it fails unless OTEL_EXPORTER_OTLP[_TRACES]_CERTIFICATE
// trusts it, and, when the receiver asks for a client certificate, unless
// OTEL_EXPORTER_OTLP[_TRACES]_CLIENT_CERTIFICATE and _CLIENT_KEY give one.
func TestSDKEnvCertificates(t *testing.T) {
	serverCert, _, serverPair, _ := selfSigned(t, "server")
	clientCert, clientKey, _, clientPool := selfSigned(t, "client")
	cases := []struct {
		name string
		mTLS bool
		env  map[string]string
		ok   bool
	}{
		{name: "untrusted", env: map[string]string{}},
		{name: "certificate", env: map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": serverCert}, ok: true},
		{name: "per-signal certificate", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": serverCert}, ok: true},
		{name: "no client certificate", mTLS: true, env: map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": serverCert}},
		{name: "client certificate", mTLS: true, env: map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": serverCert, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": clientCert, "OTEL_EXPORTER_OTLP_CLIENT_KEY": clientKey}, ok: true},
		{name: "per-signal client certificate", mTLS: true, env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": serverCert, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": clientCert, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": clientKey}, ok: true},
	}
	for _, protocol := range protocols {
		for _, c := range cases {
			t.Run(protocol+"/"+c.name, func(t *testing.T) {
				tc := &tls.Config{Certificates: []tls.Certificate{serverPair}, MinVersion: tls.VersionTLS12}
				if c.mTLS {
					tc.ClientAuth, tc.ClientCAs = tls.RequireAndVerifyClientCert, clientPool
				}
				r := startReceiver(t, protocol, receiverOpts{tls: tc})
				env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://" + r.addr, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
				for k, v := range c.env {
					env[k] = v
				}
				setOTelEnv(t, env)
				// A refused handshake is retried by the gRPC exporter until
				// its deadline: keep that short where failure is expected.
				timeout := time.Minute
				if !c.ok {
					timeout = 2 * time.Second
				}
				p := setupOrFail(t, Config{ExportTimeout: timeout})
				exportOne(t, p)
				if c.ok {
					r.received(t)
					if p.ExportErrors() != 0 {
						t.Errorf("export errors %v", p.ExportErrors())
					}
					return
				}
				if len(r.got) != 0 || p.ExportErrors() != 1 || p.Dropped() != 1 {
					t.Errorf("exported through TLS it should refuse: received %d, export errors %v, dropped %v", len(r.got), p.ExportErrors(), p.Dropped())
				}
			})
		}
	}
}

// TestSDKEnvTimeout exports to a receiver that never answers: the
// exporter gives up on the request when the timeout of the environment
// says, long before the processor's bound (a minute) or the SDK's default
// (10s) would. The gRPC exporter's timeout bounds the whole export, retries
// included, so the export fails then; the HTTP exporter's bounds each
// attempt, which it retries (until the processor's bound).
func TestSDKEnvTimeout(t *testing.T) {
	const generous = 5 * time.Second // vs. 300ms asked: only the variable can end it this soon
	for _, protocol := range protocols {
		for _, env := range []map[string]string{
			{"OTEL_EXPORTER_OTLP_TIMEOUT": "300"},
			{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "300", "OTEL_EXPORTER_OTLP_TIMEOUT": "600000"},
		} {
			name := protocol + "/OTEL_EXPORTER_OTLP_TIMEOUT"
			if len(env) == 2 {
				name = protocol + "/OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
			}
			t.Run(name, func(t *testing.T) {
				r := startReceiver(t, protocol, receiverOpts{hang: true})
				env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://" + r.addr
				env["OTEL_EXPORTER_OTLP_PROTOCOL"] = protocol
				setOTelEnv(t, env)
				p := setupOrFail(t, Config{ExportTimeout: time.Minute, BatchInterval: 10 * time.Millisecond})
				_, span := p.TracerProvider().Tracer("test").Start(context.Background(), "op")
				span.End()
				select {
				case d := <-r.abandoned:
					if d > generous {
						t.Errorf("the request was held %s: the timeout of the environment did not apply", d)
					}
				case <-time.After(time.Minute):
					t.Fatal("the exporter never gave up on the request")
				}
				if protocol == ProtocolGRPC {
					ctx, cancel := context.WithTimeout(context.Background(), generous)
					defer cancel()
					if err := p.ForceFlush(ctx); err != nil {
						t.Fatalf("the export outlived its timeout: %v", err)
					}
					if p.ExportErrors() != 1 || p.Dropped() != 1 {
						t.Errorf("export errors %v, dropped %v; want the export given up", p.ExportErrors(), p.Dropped())
					}
				}
				// The HTTP exporter is still retrying: abandon it now.
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				_ = p.Shutdown(ctx)
			})
		}
	}
}

// TestOTLPExportBound: the processor's bound never cuts short a longer
// exporter timeout from the environment.
func TestOTLPExportBound(t *testing.T) {
	for _, c := range []struct {
		configured time.Duration
		env        map[string]string
		want       time.Duration
	}{
		{0, nil, DefaultExportTimeout},
		{0, map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "30000"}, 30 * time.Second},
		{0, map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "200"}, DefaultExportTimeout},
		{0, map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "0"}, DefaultExportTimeout},
		{0, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "20000", "OTEL_EXPORTER_OTLP_TIMEOUT": "30000"}, 20 * time.Second},
		{0, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "soon", "OTEL_EXPORTER_OTLP_TIMEOUT": "30000"}, 30 * time.Second},
		{time.Second, map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "30000"}, time.Second},
	} {
		setOTelEnv(t, c.env)
		if got := exportTimeout(c.configured, signalTraces); got != c.want {
			t.Errorf("%s %v: %s, want %s", c.configured, c.env, got, c.want)
		}
	}
}

// TestFlagOverridesEnvEndpoint: Config.Endpoint and Config.Protocol (the
// flags) beat the environment's endpoint and protocol, and only those: the
// environment's headers still apply.
func TestFlagOverridesEnvEndpoint(t *testing.T) {
	other := map[string]string{ProtocolGRPC: ProtocolHTTP, ProtocolHTTP: ProtocolGRPC}
	for _, protocol := range protocols {
		for _, c := range []struct {
			name     string
			endpoint func(addr string) string
			path     string // HTTP
		}{
			{"host:port", func(addr string) string { return addr }, "/v1/traces"},
			{"URL without path", func(addr string) string { return "http://" + addr + "/" }, "/v1/traces"},
			{"URL with path", func(addr string) string { return "http://" + addr + "/custom" }, "/custom"},
		} {
			t.Run(protocol+"/"+c.name, func(t *testing.T) {
				envSide := startReceiver(t, protocol, receiverOpts{})
				flagSide := startReceiver(t, protocol, receiverOpts{})
				setOTelEnv(t, map[string]string{
					"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://" + envSide.addr,
					"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://" + envSide.addr + "/v1/traces",
					"OTEL_EXPORTER_OTLP_PROTOCOL":        other[protocol],
					"OTEL_EXPORTER_OTLP_HEADERS":         "x-team=agents",
				})
				p := setupOrFail(t, Config{Endpoint: c.endpoint(flagSide.addr), Protocol: protocol})
				want := "OTLP grpc → http://" + flagSide.addr
				if protocol == ProtocolHTTP {
					want = "OTLP http/protobuf → http://" + flagSide.addr + c.path
				}
				if p.Describe() != want {
					t.Errorf("Describe = %q, want %q", p.Describe(), want)
				}
				exportOne(t, p)
				e := flagSide.received(t)
				if len(envSide.got) != 0 {
					t.Error("the environment's endpoint got the export")
				}
				if protocol == ProtocolHTTP && e.path != c.path {
					t.Errorf("path = %q, want %q", e.path, c.path)
				}
				if e.header["x-team"] != "agents" {
					t.Errorf("headers = %v: the environment's headers no longer apply", e.header)
				}
			})
		}
	}
}
