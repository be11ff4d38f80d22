package exposition

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// pushed is what the Pushgateway stand-in received.
type pushed struct {
	method, path, user, pass, contentType string
	body                                  []byte
}

func pushgateway(t *testing.T, code int) (*httptest.Server, func() []pushed) {
	t.Helper()
	var mu sync.Mutex
	var got []pushed
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u, p, _ := r.BasicAuth()
		mu.Lock()
		got = append(got, pushed{r.Method, r.URL.EscapedPath(), u, p, r.Header.Get("Content-Type"), b})
		mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []pushed {
		mu.Lock()
		defer mu.Unlock()
		return append([]pushed(nil), got...)
	}
}

// finished is a registry with one failed run of the workflow "batch".
func finished(t *testing.T) *prometheus.Registry { return testRegistry(t, "batch", "failed") }

func TestPush(t *testing.T) {
	srv, got := pushgateway(t, http.StatusOK)
	reg := finished(t)
	u, _ := url.Parse(srv.URL)
	u.User = url.UserPassword("pusher", "pw")
	if err := Push(context.Background(), u.String(), "cbc-otel", WithPrefix(reg, "cbc_")); err != nil {
		t.Fatalf("Push: %v", err)
	}
	reqs := got()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	p := reqs[0]
	host, _ := os.Hostname()
	if p.method != http.MethodPut {
		t.Errorf("method %s, want PUT (replace the group)", p.method)
	}
	if want := "/metrics/job/cbc-otel/instance/" + url.PathEscape(host); p.path != want {
		t.Errorf("path %q, want %q", p.path, want)
	}
	if p.user != "pusher" || p.pass != "pw" {
		t.Errorf("basic auth %q:%q, want the URL's credentials", p.user, p.pass)
	}
	// The body is an exposition Prometheus can parse (protobuf delimited by
	// default) and holds the cbc_* families only.
	dec := expfmt.NewDecoder(bytes.NewReader(p.body), expfmt.Format(p.contentType))
	names := map[string]bool{}
	for {
		mf := new(dto.MetricFamily)
		if err := dec.Decode(mf); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decoding pushed body (%s): %v", p.contentType, err)
		}
		names[mf.GetName()] = true
	}
	if !names["cbc_workflow_runs_total"] || !names["cbc_workflow_duration_seconds"] {
		t.Errorf("pushed families %v lack the run metrics", names)
	}
	for n := range names {
		if !strings.HasPrefix(n, "cbc_") {
			t.Errorf("pushed %s, want cbc_* only", n)
		}
	}
}

func TestPushErrors(t *testing.T) {
	reg := finished(t)
	srv, _ := pushgateway(t, http.StatusInternalServerError)
	u, _ := url.Parse(srv.URL)
	u.User = url.UserPassword("pusher", "topsecret")
	err := Push(context.Background(), u.String(), "job", reg)
	if err == nil {
		t.Fatal("Push to a failing gateway succeeded")
	}
	if strings.Contains(err.Error(), "topsecret") {
		t.Errorf("error leaks the password: %v", err)
	}
	for _, bad := range []string{"", "localhost:9091", "ftp://x", "http://", "://"} {
		if err := Push(context.Background(), bad, "job", reg); err == nil {
			t.Errorf("Push(%q) succeeded", bad)
		}
	}
	if err := Push(context.Background(), srv.URL, "", reg); err == nil {
		t.Error("Push with an empty job succeeded")
	}
}

// A push the gateway did not take is a *PushError naming the gateway,
// without its password, and wrapping the cause; bad arguments are not.
func TestPushErrorType(t *testing.T) {
	reg := finished(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://pusher:topsecret@" + lis.Addr().String()
	lis.Close()
	srv, _ := pushgateway(t, http.StatusUnauthorized)
	for _, c := range []struct {
		name, url string
		check     func(error) bool
	}{
		{"refused", refused, func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }},
		{"status", srv.URL, func(err error) bool { return strings.Contains(err.Error(), "401") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Push(context.Background(), c.url, "job", reg)
			var pe *PushError
			if !errors.As(err, &pe) {
				t.Fatalf("Push = %v (%T), want a *PushError", err, err)
			}
			if strings.Contains(pe.URL, "topsecret") || strings.Contains(err.Error(), "topsecret") {
				t.Errorf("the password leaks: %v", err)
			}
			if !strings.HasPrefix(err.Error(), "exposition: push to "+redact(c.url)+": ") || !c.check(pe.Err) {
				t.Errorf("Push = %q, cause %v", err, pe.Err)
			}
		})
	}
	if err := Push(context.Background(), srv.URL, "", reg); errors.As(err, new(*PushError)) {
		t.Errorf("an empty job is a %T: no push was tried", err)
	}
}

// TestPushBoundedByContext: a gateway that never answers costs no more
// than the context allows.
func TestPushBoundedByContext(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	if err := Push(ctx, srv.URL, "job", finished(t)); err == nil {
		t.Fatal("Push to a hanging gateway succeeded")
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("Push took %v despite a 200ms context", d)
	}
}

func TestWriteFile(t *testing.T) {
	reg := finished(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "metrics.prom")
	if err := os.WriteFile(path, []byte("old content\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, reg); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `cbc_workflow_runs_total{status="failed",workflow="batch"} 1`) {
		t.Errorf("file lacks the run:\n%s", b)
	}
	// It is valid text exposition, equal to what the registry gathers.
	if err := testutil.GatherAndCompare(WithPrefix(reg, "cbc_workflow"), bytes.NewReader(b),
		"cbc_workflow_runs_total", "cbc_workflow_duration_seconds"); err != nil {
		t.Errorf("file differs from the registry: %v", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	if _, err := p.TextToMetricFamilies(bytes.NewReader(b)); err != nil {
		t.Errorf("file does not parse: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file (no temp files left)", len(entries))
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	if err := WriteFile(filepath.Join(dir, "missing", "m.prom"), reg); err == nil {
		t.Error("WriteFile into a missing directory succeeded")
	}
}

// A malformed Pushgateway URL is refused without echoing its password.
func TestCheckPushURLKeepsPasswordOut(t *testing.T) {
	err := CheckPushURL("http://user:s3cr3t%zz@host:9091")
	if err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("error %v: want a refusal without the password", err)
	}
}
