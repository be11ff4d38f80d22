package exposition

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// bcrypt("s3cret-pass"), cost 4: precomputed so the test needs no bcrypt
// import of its own (exporter-toolkit verifies it).
const (
	testUser = "alice"
	testPass = "s3cret-pass"
	testHash = "$2a$04$Nvxkfkha400Ryai4AUAgfO1WCtXRrpiRCdyust/1sdKEYtMRhCQIO"
)

// startServer listens on a free loopback port and serves until the test
// ends; it returns the base URL's host:port.
func startServer(t *testing.T, opts Options) string {
	t.Helper()
	opts.Addr = "127.0.0.1:0"
	s, err := Listen(opts)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("server did not stop")
		}
	})
	return s.Addr().String()
}

func status(t *testing.T, c *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServeRoutes(t *testing.T) {
	var ready atomic.Bool
	notReady := func() error {
		if !ready.Load() {
			return errors.New("state being restored")
		}
		return nil
	}
	addr := startServer(t, Options{Gatherer: testRegistry(t, "flow", "completed"), Ready: notReady})
	c := &http.Client{Timeout: 5 * time.Second}
	req := func(path string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		return r
	}
	if code, body := status(t, c, req("/metrics")); code != 200 || !strings.Contains(body, `cbc_workflow_runs_total{status="completed",workflow="flow"} 1`) {
		t.Errorf("/metrics: %d\n%s", code, body)
	}
	if code, body := status(t, c, req("/healthz")); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := status(t, c, req("/readyz")); code != http.StatusServiceUnavailable || body != "not ready: state being restored\n" {
		t.Errorf("/readyz before ready: %d %q, want 503 with the reason", code, body)
	}
	ready.Store(true)
	if code, _ := status(t, c, req("/readyz")); code != 200 {
		t.Errorf("/readyz when ready: %d, want 200", code)
	}
	for _, p := range []string{"/", "/metrics/x", "/nope", "/healthz/", "/debug/pprof/"} {
		if code, _ := status(t, c, req(p)); code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, code)
		}
	}
}

func TestReadyNil(t *testing.T) {
	addr := startServer(t, Options{Gatherer: testRegistry(t, "flow", "completed")})
	r, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/readyz", nil)
	if code, _ := status(t, http.DefaultClient, r); code != 200 {
		t.Errorf("/readyz with no Ready func: %d, want 200", code)
	}
}

func TestServeShutsDownOnCancel(t *testing.T) {
	s, err := Listen(Options{Addr: "127.0.0.1:0", Gatherer: testRegistry(t, "flow", "completed")})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	r, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/healthz", nil)
	if code, _ := status(t, http.DefaultClient, r); code != 200 {
		t.Fatalf("healthz: %d", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("still accepting connections after shutdown")
	}
}

func TestServeBindFailure(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	g := testRegistry(t, "flow", "completed")
	err = Serve(context.Background(), Options{Addr: busy.Addr().String(), Gatherer: g})
	if err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("Serve on a busy port: %v, want a listen error", err)
	}
	if _, err := Listen(Options{Addr: "", Gatherer: g}); err == nil {
		t.Error("Listen with no address succeeded")
	}
	if _, err := Listen(Options{Addr: "127.0.0.1:0", Gatherer: g, WebConfigFile: filepath.Join(t.TempDir(), "missing.yml")}); err == nil {
		t.Error("Listen with a missing web config succeeded")
	}
	bad := filepath.Join(t.TempDir(), "bad.yml")
	os.WriteFile(bad, []byte("tls_server_config: {cert_file: /nonexistent}\nnot_a_key: 1\n"), 0o600)
	if _, err := Listen(Options{Addr: "127.0.0.1:0", Gatherer: g, WebConfigFile: bad}); err == nil {
		t.Error("Listen with an invalid web config succeeded")
	}
}

// writeTLSConfig writes a self-signed certificate for 127.0.0.1, its key and
// an exporter-toolkit web config with one basic-auth user; it returns the
// config path and a pool trusting the certificate.
func writeTLSConfig(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "cbc-otel test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := "tls_server_config:\n  cert_file: " + certPath + "\n  key_file: " + keyPath + "\n" +
		"basic_auth_users:\n  " + testUser + ": " + testHash + "\n"
	cfgPath := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return cfgPath, pool
}

// TestServeTLSAndBasicAuth: --web.config.file turns on TLS and basic auth.
func TestServeTLSAndBasicAuth(t *testing.T) {
	cfgPath, pool := writeTLSConfig(t)
	addr := startServer(t, Options{Gatherer: testRegistry(t, "flow", "completed"), WebConfigFile: cfgPath})
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req := func(scheme, path, user, pass string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, scheme+"://"+addr+path, nil)
		if user != "" {
			r.SetBasicAuth(user, pass)
		}
		return r
	}
	if code, body := status(t, c, req("https", "/metrics", testUser, testPass)); code != 200 || !strings.Contains(body, "cbc_otel_lines_total") {
		t.Errorf("https with the right password: %d", code)
	}
	if code, _ := status(t, c, req("https", "/healthz", testUser, testPass)); code != 200 {
		t.Errorf("https /healthz with the right password: %d", code)
	}
	if code, _ := status(t, c, req("https", "/metrics", testUser, "wrong")); code != http.StatusUnauthorized {
		t.Errorf("wrong password: %d, want 401", code)
	}
	if code, _ := status(t, c, req("https", "/metrics", "", "")); code != http.StatusUnauthorized {
		t.Errorf("no credentials: %d, want 401", code)
	}
	// Plain HTTP to the TLS port is refused: Go answers 400 or the
	// connection fails; either way no metrics.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req("http", "/metrics", testUser, testPass))
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 || strings.Contains(string(b), "cbc_") {
			t.Errorf("plain HTTP to the TLS port: %d, metrics served", resp.StatusCode)
		}
	}
	// A client that does not trust the certificate fails the handshake.
	_, err = (&http.Client{Timeout: 5 * time.Second}).Do(req("https", "/metrics", testUser, testPass))
	var uerr x509.UnknownAuthorityError
	if err == nil || !errors.As(err, &uerr) {
		t.Errorf("untrusted client: %v, want an unknown-authority error", err)
	}
}

// TestServePage: a Page answers "/" exactly, behind the same TLS and
// basic auth as /metrics; other unknown paths stay 404.
func TestServePage(t *testing.T) {
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "the runs page")
	})
	addr := startServer(t, Options{Gatherer: testRegistry(t, "flow", "completed"), Page: page})
	get := func(scheme, addr, path, user, pass string, c *http.Client) (int, string) {
		r, _ := http.NewRequest(http.MethodGet, scheme+"://"+addr+path, nil)
		if user != "" {
			r.SetBasicAuth(user, pass)
		}
		return status(t, c, r)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	if code, body := get("http", addr, "/", "", "", c); code != 200 || body != "the runs page" {
		t.Errorf("/: %d %q", code, body)
	}
	if code, body := get("http", addr, "/metrics", "", "", c); code != 200 || !strings.Contains(body, "cbc_otel_lines_total") {
		t.Errorf("/metrics beside the page: %d", code)
	}
	for _, p := range []string{"/index.html", "/x", "/metrics/x", "/healthz/"} {
		if code, _ := get("http", addr, p, "", "", c); code != http.StatusNotFound {
			t.Errorf("%s with a page: %d, want 404", p, code)
		}
	}

	cfgPath, pool := writeTLSConfig(t)
	taddr := startServer(t, Options{Gatherer: testRegistry(t, "flow", "completed"), WebConfigFile: cfgPath, Page: page})
	tc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if code, body := get("https", taddr, "/", testUser, testPass, tc); code != 200 || body != "the runs page" {
		t.Errorf("https / with the right password: %d %q", code, body)
	}
	for _, cred := range [][2]string{{"", ""}, {testUser, "wrong"}} {
		if code, body := get("https", taddr, "/", cred[0], cred[1], tc); code != http.StatusUnauthorized || strings.Contains(body, "runs page") {
			t.Errorf("https / as %q/%q: %d, want 401", cred[0], cred[1], code)
		}
	}
}
