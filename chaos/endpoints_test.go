//go:build chaos

package chaos

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The basic-auth user of the web config. The hash is a fixture: bcrypt
// (cost 4, the minimum: the suite checks refusal, not hashing strength) of
// endpointsPassword, made once with golang.org/x/crypto/bcrypt, so that the
// suite needs no module the build does not.
const (
	endpointsUser     = "chaos"
	endpointsPassword = "chaos-right-password"
	endpointsHash     = "$2a$04$JuU90CT.BcLYF.PfRd5NUOPxQmGNOnKkDoV1Tln48.acwkBQtFYB6"
)

// endpointsTLS writes a self-signed certificate for 127.0.0.1 and an
// exporter-toolkit web config using it with basic auth; it returns the
// config path and a pool trusting the certificate.
func endpointsTLS(t *testing.T, dir string) (string, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "cbc-otel chaos"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  %s: %s\n",
		certPath, keyPath, endpointsUser, endpointsHash)
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

// endpointsProbe is one request and what must come of it.
type endpointsProbe struct {
	name       string
	scheme     string // http or https
	path       string
	user, pass string // basic auth; "" sends none
	maxTLS     uint16 // client's highest TLS version; 0 = default
	// want judges the outcome: status (0 when the request failed) and
	// body.
	want  func(status int, body []byte, err error) bool
	bound string
}

// endpointsUndocumented are paths nothing may answer: only /metrics,
// /healthz, /readyz and the runs page at / are documented.
var endpointsUndocumented = []string{
	"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=2", "/debug/vars",
	"/metrics/x", "/metrics/", "/metrics.json", "/healthz/x", "/readyz/x", "/../", "/%2e%2e/etc/passwd",
	"/..%2fmetrics", "//metrics", "/METRICS", "/index.html", "/favicon.ico", "/api/v1/query",
	"/-/reload", "/-/quit", "/federate",
}

func endpointsProbes(auth bool) []endpointsProbe {
	user, pass := "", ""
	if auth {
		user, pass = endpointsUser, endpointsPassword
	}
	scheme := "http"
	if auth {
		scheme = "https"
	}
	metricsOK := func(st int, b []byte, err error) bool {
		return err == nil && st == http.StatusOK && bytes.Contains(b, []byte("cbc_"))
	}
	refused := func(st int, b []byte, err error) bool {
		return !bytes.Contains(b, []byte("cbc_")) && (err != nil || st == http.StatusUnauthorized || st == http.StatusBadRequest)
	}
	var ps []endpointsProbe
	if auth {
		ps = append(ps,
			endpointsProbe{name: "https /metrics, right password", scheme: "https", path: "/metrics", user: user, pass: pass,
				want: metricsOK, bound: "200 with metrics"},
			endpointsProbe{name: "plain http /metrics", scheme: "http", path: "/metrics", user: user, pass: pass,
				want: refused, bound: "refused, no metrics"},
			endpointsProbe{name: "https /metrics, no credentials", scheme: "https", path: "/metrics",
				want: func(st int, b []byte, err error) bool { return err == nil && st == http.StatusUnauthorized }, bound: "401"},
			endpointsProbe{name: "https /metrics, wrong password", scheme: "https", path: "/metrics", user: user, pass: "chaos-wrong-password",
				want: func(st int, b []byte, err error) bool { return err == nil && st == http.StatusUnauthorized }, bound: "401"},
			endpointsProbe{name: "https /metrics, wrong user", scheme: "https", path: "/metrics", user: "admin", pass: pass,
				want: func(st int, b []byte, err error) bool { return err == nil && st == http.StatusUnauthorized }, bound: "401"},
			endpointsProbe{name: "https /metrics, empty password", scheme: "https", path: "/metrics", user: user, pass: "",
				want: func(st int, b []byte, err error) bool { return err == nil && st == http.StatusUnauthorized }, bound: "401"},
			endpointsProbe{name: "https /metrics, TLS 1.1 client", scheme: "https", path: "/metrics", user: user, pass: pass, maxTLS: tls.VersionTLS11,
				want: func(st int, b []byte, err error) bool { return err != nil }, bound: "handshake refused"},
			endpointsProbe{name: "https /debug/pprof/, no credentials", scheme: "https", path: "/debug/pprof/",
				want: func(st int, b []byte, err error) bool { return err == nil && st == http.StatusUnauthorized }, bound: "401"},
			endpointsProbe{name: "https / (the runs page), no credentials", scheme: "https", path: "/",
				want: func(st int, b []byte, err error) bool { return err == nil && st == http.StatusUnauthorized }, bound: "401"},
		)
	} else {
		ps = append(ps, endpointsProbe{name: "http /metrics", scheme: "http", path: "/metrics", want: metricsOK, bound: "200 with metrics"})
	}
	// The runs page: HTML, never the metrics themselves.
	ps = append(ps, endpointsProbe{name: scheme + " / (the runs page)", scheme: scheme, path: "/", user: user, pass: pass,
		want: func(st int, b []byte, err error) bool {
			return err == nil && st == http.StatusOK && bytes.Contains(b, []byte("<html")) && !bytes.Contains(b, []byte("cbc_workflow"))
		},
		bound: "200, the page, no metrics"})
	for _, p := range []string{"/healthz", "/readyz"} {
		ps = append(ps, endpointsProbe{name: scheme + " " + p, scheme: scheme, path: p, user: user, pass: pass,
			want: func(st int, b []byte, err error) bool {
				return err == nil && st == http.StatusOK && string(b) == "ok\n"
			},
			bound: "200 ok"})
	}
	for _, p := range endpointsUndocumented {
		ps = append(ps, endpointsProbe{name: scheme + " " + p, scheme: scheme, path: p, user: user, pass: pass,
			// A redirect (the mux cleaning "/../" or "//metrics") is no
			// answer: the client does not follow it, and its target is
			// probed on its own.
			want: func(st int, b []byte, err error) bool {
				redirect := st == http.StatusMovedPermanently || st == http.StatusTemporaryRedirect || st == http.StatusPermanentRedirect
				return err == nil && (st == http.StatusNotFound || redirect) && !bytes.Contains(b, []byte("cbc_"))
			},
			bound: "404 (or a redirect to the cleaned path), no content"})
	}
	return ps
}

// endpointsDo runs one probe against addr.
func endpointsDo(p endpointsProbe, addr string, pool *x509.CertPool) (int, []byte, error) {
	tc := &tls.Config{RootCAs: pool}
	if p.maxTLS != 0 {
		tc.MinVersion, tc.MaxVersion = tls.VersionTLS10, p.maxTLS
	}
	client := &http.Client{
		Timeout:       5 * time.Second,
		Transport:     &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	// Built by hand: url.Parse would clean or reject the hostile paths.
	req, err := http.NewRequest(http.MethodGet, p.scheme+"://"+addr+"/", nil)
	if err != nil {
		return 0, nil, err
	}
	path, query, _ := strings.Cut(p.path, "?")
	req.URL.Opaque = "//" + addr + path
	req.URL.RawQuery = query
	if p.user != "" {
		req.SetBasicAuth(p.user, p.pass)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, b, err
}

func TestEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name string
		auth bool
		mode string // run or serve
	}{
		{"run, no web config", false, "run"},
		{"run, TLS and basic auth", true, "run"},
		{"serve, TLS and basic auth", true, "serve"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var extra []string
			var pool *x509.CertPool
			if tc.auth {
				var cfg string
				cfg, pool = endpointsTLS(t, dir)
				extra = []string{"--web.config.file", cfg}
			}
			stream := filepath.Join(dir, "stream.ndjson")
			if err := os.WriteFile(stream, secretStream(), 0o600); err != nil {
				t.Fatal(err)
			}
			var cmd *exec.Cmd
			if tc.mode == "run" {
				args := append([]string{"run", "--web.listen-address=127.0.0.1:0", "--log.level=info"}, extra...)
				cmd = exec.Command(wrapperBin, append(args, "--", testExe, stream)...)
				cmd.Env = childEnv("secrets-stream")
			} else {
				args := append([]string{"serve", "--follow.glob", stream, "--web.listen-address=127.0.0.1:0", "--log.level=info"}, extra...)
				cmd = exec.Command(wrapperBin, args...)
			}
			var stderr syncBuffer
			cmd.Stdout, cmd.Stderr = io.Discard, &stderr
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				in.Close()
				c5Stop(t, cmd, 15*time.Second)
			}()
			addr := c5WaitAddr(t, &stderr, 10*time.Second)
			ok := 0
			probes := endpointsProbes(tc.auth)
			for _, p := range probes {
				st, body, err := endpointsDo(p, addr, pool)
				val := fmt.Sprintf("HTTP %d", st)
				if err != nil {
					val = "error: " + endpointsShortErr(err)
				}
				if bytes.Contains(body, []byte("cbc_")) {
					val += ", metrics in body"
				}
				good := p.want(st, body, err)
				if good {
					ok++
				}
				record(t, SecEndpoints, tc.mode+": "+p.name, val, p.bound, good)
			}
			record(t, SecEndpoints, tc.name+": probes as bound", fmt.Sprintf("%d/%d", ok, len(probes)),
				fmt.Sprintf("%d/%d", len(probes), len(probes)), ok == len(probes))
		})
	}
}

// endpointsShortErr keeps the telling end of a client error (the URL in
// front is in the figure's name already).
func endpointsShortErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && len(s)-i < 80 {
		s = s[i+2:]
	}
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

// c5OpenFDs counts a live process's open descriptors.
func c5OpenFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// TestEndpointsServeBounds holds serve to the bounds of what it accepts:
// the files it follows at once (--follow.max-files) and the line it looks
// at (--tracker.max-line), both at their defaults.
func TestEndpointsServeBounds(t *testing.T) {
	t.Run("files followed at once", func(t *testing.T) {
		const files = 1500
		dir := t.TempDir()
		for i := range files {
			id := fmt.Sprintf("bound%d", i)
			s := fmt.Sprintf(`{"type":"system","subtype":"task_started","task_id":"%s","task_type":"local_workflow","workflow_name":"many-files"}`+"\n"+
				`{"type":"system","subtype":"task_notification","task_id":"%s","status":"completed"}`+"\n", id, id)
			if err := os.WriteFile(filepath.Join(dir, id+".ndjson"), []byte(s), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		out, _ := exec.Command(wrapperBin, "serve", "-h").CombinedOutput()
		if !bytes.Contains(out, []byte("-follow.max-files")) {
			record(t, SecEndpoints, "serve: files followed at once", "no --follow.max-files flag", "a bound", false)
			return
		}
		cmd := exec.Command(wrapperBin, "serve", "--follow.glob", filepath.Join(dir, "*.ndjson"), "--web.listen-address=127.0.0.1:0",
			"--follow.idle-timeout=300ms", "--follow.poll-interval=50ms", "--tracker.grace=0")
		var stderr syncBuffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		addr := c5WaitAddr(t, &stderr, 10*time.Second)
		maxFDs, maxFollowed := 0, 0.0
		body := c5PollScrape(t, "http://"+addr+"/metrics", 60*time.Second, func(b string) bool {
			maxFDs = max(maxFDs, c5OpenFDs(cmd.Process.Pid))
			maxFollowed = max(maxFollowed, c5SumSeries(b, "cbc_otel_follow_streams"))
			return c5SumSeries(b, "cbc_workflow_runs_total") >= files
		})
		elapsed := time.Since(start)
		c5Stop(t, cmd, 15*time.Second)
		runs := c5SumSeries(body, "cbc_workflow_runs_total")
		const capFiles = 256 // follow.DefaultMaxStreams, as serve -h says
		record(t, SecEndpoints, fmt.Sprintf("serve, %d matching files: most followed at once (sampled)", files),
			fmt.Sprintf("%.0f", maxFollowed), fmt.Sprintf("<= --follow.max-files default %d", capFiles), maxFollowed > 0 && maxFollowed <= capFiles)
		record(t, SecEndpoints, fmt.Sprintf("serve, %d matching files: most open descriptors (sampled)", files),
			fmt.Sprint(maxFDs), fmt.Sprintf("<= %d + 32", capFiles), maxFDs > 0 && maxFDs <= capFiles+32)
		record(t, SecEndpoints, fmt.Sprintf("serve, %d matching files: all counted once waiting their turn", files),
			fmt.Sprintf("%.0f runs in %v", runs, elapsed.Round(100*time.Millisecond)), fmt.Sprintf("exactly %d, < 60s", files), runs == files)
	})
	t.Run("line size", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "bigline.ndjson")
		const size = 64 << 20
		big := `{"type":"system","subtype":"task_progress","task_id":"big","workflow_progress":[{"type":"workflow_agent","index":1,"resultPreview":"` +
			strings.Repeat("A", size) + `"}]}` + "\n" +
			`{"type":"system","subtype":"task_started","task_id":"after","task_type":"local_workflow","workflow_name":"after-big-line"}` + "\n" +
			`{"type":"system","subtype":"task_notification","task_id":"after","status":"completed"}` + "\n"
		if err := os.WriteFile(path, []byte(big), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(wrapperBin, "serve", "--follow.glob", path, "--web.listen-address=127.0.0.1:0", "--follow.poll-interval=50ms", "--tracker.grace=0")
		var stderr syncBuffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		addr := c5WaitAddr(t, &stderr, 10*time.Second)
		body := c5PollScrape(t, "http://"+addr+"/metrics", 30*time.Second, func(b string) bool {
			return c5SumSeries(b, "cbc_workflow_runs_total") >= 1
		})
		hwm := vmHWMKiB(cmd.Process.Pid) << 10
		c5Stop(t, cmd, 15*time.Second)
		tooLong := 0.0
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, `cbc_otel_lines_rejected_total{reason="too_long"}`) {
				fmt.Sscan(strings.Fields(l)[1], &tooLong)
			}
		}
		record(t, SecEndpoints, "serve, one 64 MiB line: rejected as too_long", fmt.Sprintf("%.0f", tooLong), "1 (--tracker.max-line default 4 MiB)", tooLong == 1)
		record(t, SecEndpoints, "serve, one 64 MiB line: peak RSS", fmt.Sprintf("%d MB", hwm>>20), "< 64 MB (the line is never held)", hwm > 0 && hwm < 64<<20)
	})
}
