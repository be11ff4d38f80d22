package helm_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/cbc-otel/cbc-otel/internal/realtool"
)

// The real API server: kube-apiserver and etcd built by tools/kube/build.sh
// (pinned in tools/kube/go.mod), and the prometheus-operator CRDs of a
// pinned release read from its Go module.
const (
	apiserverEnv = "KUBE_APISERVER_BIN"
	etcdEnv      = "ETCD_BIN"
	kubeHint     = "tools/kube/build.sh DIR, then KUBE_APISERVER_BIN=DIR/kube-apiserver ETCD_BIN=DIR/etcd"
	// promOperatorModule at promOperatorCRDs holds the CRD manifests in
	// example/prometheus-operator-crd/. v0.85.0 is the newest version of
	// the root module the Go module proxy serves (the chart's types are
	// pkg/apis/monitoring v0.95.2, a module of its own).
	promOperatorModule = "github.com/prometheus-operator/prometheus-operator"
	promOperatorCRDs   = "v0.85.0"
	// fieldManager owns what the test applies, as helm's would.
	fieldManager = "cbc-otel-chart-test"
	// serviceCIDR is the range the server allocates ClusterIPs from.
	serviceCIDR = "10.96.0.0/16"
)

// kubeResource locates a kind's objects in the API.
type kubeResource struct {
	prefix     string // /api/v1 or /apis/GROUP/VERSION
	plural     string
	namespaced bool
}

// kubeResources are the kinds the test applies, by apiVersion/kind: every
// kind the chart renders (newObject), plus Namespace and the CRDs.
var kubeResources = map[string]kubeResource{
	"v1/Namespace":       {"/api/v1", "namespaces", false},
	"v1/Service":         {"/api/v1", "services", true},
	"v1/ConfigMap":       {"/api/v1", "configmaps", true},
	"v1/Secret":          {"/api/v1", "secrets", true},
	"v1/ServiceAccount":  {"/api/v1", "serviceaccounts", true},
	"apps/v1/Deployment": {"/apis/apps/v1", "deployments", true},
	"batch/v1/Job":       {"/apis/batch/v1", "jobs", true},
	"batch/v1/CronJob":   {"/apis/batch/v1", "cronjobs", true},
	"monitoring.coreos.com/v1/ServiceMonitor":          {"/apis/monitoring.coreos.com/v1", "servicemonitors", true},
	"monitoring.coreos.com/v1/PodMonitor":              {"/apis/monitoring.coreos.com/v1", "podmonitors", true},
	"monitoring.coreos.com/v1/PrometheusRule":          {"/apis/monitoring.coreos.com/v1", "prometheusrules", true},
	"apiextensions.k8s.io/v1/CustomResourceDefinition": {"/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", false},
}

// kubeObject is one manifest as JSON, with what locates it.
type kubeObject struct {
	apiVersion, kind, namespace, name string
	body                              map[string]any
}

func newKubeObject(t *testing.T, y []byte) kubeObject {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(y, &m); err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	o := kubeObject{body: m}
	o.apiVersion, _ = m["apiVersion"].(string)
	o.kind, _ = m["kind"].(string)
	meta, _ := m["metadata"].(map[string]any)
	o.name, _ = meta["name"].(string)
	o.namespace, _ = meta["namespace"].(string)
	return o
}

func (o kubeObject) String() string {
	if o.namespace == "" {
		return o.kind + " " + o.name
	}
	return o.kind + " " + o.namespace + "/" + o.name
}

// path is the object's URL path on the server.
func (o kubeObject) path(t *testing.T) string {
	t.Helper()
	r, ok := kubeResources[o.apiVersion+"/"+o.kind]
	if !ok {
		t.Fatalf("%s: no resource known for %s", o, o.apiVersion)
	}
	if !r.namespaced {
		return r.prefix + "/" + r.plural + "/" + o.name
	}
	if o.namespace == "" {
		t.Fatalf("%s: a namespaced object rendered without metadata.namespace", o)
	}
	return r.prefix + "/namespaces/" + o.namespace + "/" + r.plural + "/" + o.name
}

// apiServer is a running kube-apiserver, reached as a system:masters
// user by a static bearer token.
type apiServer struct {
	url     string
	token   string
	client  *http.Client
	version string // gitVersion, e.g. v1.37.2
}

// kubeBinaries returns the kube-apiserver and etcd the environment names.
// The test does not build them itself (tools/kube/build.sh takes ~10 CPU
// minutes cold); .ci/run does, and sets both variables.
func kubeBinaries(t *testing.T) (apiserver, etcd string) {
	t.Helper()
	a, okA := realtool.FromEnv(t, "kube-apiserver", apiserverEnv, kubeHint)
	e, okE := realtool.FromEnv(t, "etcd", etcdEnv, kubeHint)
	if !okA || !okE {
		realtool.Missing(t, "kube-apiserver", apiserverEnv+" and "+etcdEnv+" must both be set ("+kubeHint+")")
	}
	return a, e
}

// startKubeProcess runs bin with args until the test ends (SIGTERM, then
// SIGKILL after 10 s), its output in a file of dir that is logged when
// the test fails. The channel is closed when the process has exited.
func startKubeProcess(t *testing.T, dir, bin string, args ...string) <-chan struct{} {
	t.Helper()
	name := filepath.Base(bin)
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cancel()
		<-exited
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("%s's log (end):\n%s", name, b)
		}
	})
	return exited
}

// writeKubePEM writes one PEM block to a new file of dir.
func writeKubePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// kubeECKey makes a P-256 key and its PEM file ("EC PRIVATE KEY").
func kubeECKey(t *testing.T, dir, name string) (*ecdsa.PrivateKey, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return key, writeKubePEM(t, dir, name, "EC PRIVATE KEY", der)
}

// startAPIServer starts etcd (data in a temporary directory) and
// kube-apiserver on 127.0.0.1, with a throwaway self-signed serving
// certificate and a static token in group system:masters, and waits until
// /readyz says ready.
func startAPIServer(t *testing.T, extraArgs ...string) *apiServer {
	t.Helper()
	apiserverBin, etcdBin := kubeBinaries(t)
	dir := t.TempDir()
	ports := realtool.FreePorts(t, 3)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	etcdExited := startKubeProcess(t, dir, etcdBin,
		"--name=test", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=test="+peerURL, "--log-level=warn")

	// The serving certificate is its own CA: the client trusts exactly it.
	key, keyFile := kubeECKey(t, dir, "serving.key")
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kube-apiserver (cbc-otel test)"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certFile := writeKubePEM(t, dir, "serving.crt", "CERTIFICATE", der)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	_, saKeyFile := kubeECKey(t, dir, "service-account.key")
	tokenBytes := make([]byte, 16)
	if _, err := rand.Read(tokenBytes); err != nil {
		t.Fatal(err)
	}
	token := fmt.Sprintf("%x", tokenBytes)
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(token+`,admin,admin-uid,"system:masters"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	apiserverExited := startKubeProcess(t, dir, apiserverBin, append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[2]),
		"--tls-cert-file=" + certFile, "--tls-private-key-file=" + keyFile,
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saKeyFile,
		"--service-account-signing-key-file=" + saKeyFile,
		"--service-cluster-ip-range=" + serviceCIDR,
		// Loopback cannot be advertised in the kubernetes Service's
		// endpoints, and nothing here reaches the server through it.
		"--endpoint-reconciler-type=none",
		"--profiling=false"}, extraArgs...)...)

	pool := x509.NewCertPool()
	pool.AddCert(cert)
	s := &apiServer{
		url:   fmt.Sprintf("https://127.0.0.1:%d", ports[2]),
		token: token,
		client: &http.Client{
			Timeout:   time.Minute,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		},
	}
	// Start-up under load (two shared cores) takes tens of seconds.
	var last string
	waitForServer(t, 5*time.Minute, func() bool {
		select {
		case <-etcdExited:
			t.Fatal("etcd exited")
		case <-apiserverExited:
			t.Fatal("kube-apiserver exited")
		default:
		}
		code, body, err := s.do(http.MethodGet, "/readyz", "", nil)
		last = fmt.Sprintf("%d %v %s", code, err, body)
		return code == http.StatusOK
	}, func() string { return "kube-apiserver /readyz: " + last })
	var v struct {
		GitVersion     string `json:"gitVersion"`
		EmulationMinor string `json:"emulationMinor"`
	}
	s.getJSON(t, "/version", &v)
	s.version = v.GitVersion
	t.Logf("kube-apiserver %s (emulating 1.%s) ready after %v (etcd and TLS on 127.0.0.1)", s.version, v.EmulationMinor, time.Since(start).Round(100*time.Millisecond))
	return s
}

// waitForServer polls cond every 100 ms until it holds, or fails the test after
// d with what() (a poll, not a sleep: the server has no event to wait on).
func waitForServer(t *testing.T, d time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("not within %v: %s", d, what())
		case <-tick.C:
		}
	}
}

// do sends one request with the bearer token and returns status and body.
func (s *apiServer) do(method, path, contentType string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, s.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (s *apiServer) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	code, body, err := s.do(http.MethodGet, path, "", nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v %s", path, code, err, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// apply sends obj by server-side apply (PATCH application/apply-patch+yaml)
// with strict field validation: an unknown or duplicate field is an error,
// not silently dropped. dryRun asks the server to validate without storing.
func (s *apiServer) apply(t *testing.T, o kubeObject, dryRun bool) (map[string]any, error) {
	t.Helper()
	body, err := json.Marshal(o.body)
	if err != nil {
		t.Fatal(err)
	}
	q := "?fieldManager=" + fieldManager + "&fieldValidation=Strict&force=true"
	if dryRun {
		q += "&dryRun=All"
	}
	code, resp, err := s.do(http.MethodPatch, o.path(t)+q, "application/apply-patch+yaml", body)
	if err != nil {
		return nil, fmt.Errorf("applying %s: %w", o, err)
	}
	if code != http.StatusOK && code != http.StatusCreated {
		return nil, fmt.Errorf("applying %s: HTTP %d: %s", o, code, resp)
	}
	var got map[string]any
	if err := json.Unmarshal(resp, &got); err != nil {
		return nil, fmt.Errorf("applying %s: %w", o, err)
	}
	return got, nil
}

// promOperatorCRDDir downloads the pinned prometheus-operator module (into
// the module cache) and returns its directory of CRD manifests.
func promOperatorCRDDir(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", promOperatorModule+"@"+promOperatorCRDs)
	cmd.Dir = t.TempDir() // outside the project's module: go.mod is not touched
	out, err := cmd.Output()
	if err != nil {
		realtool.Missing(t, "prometheus-operator CRDs", fmt.Sprintf("go mod download %s@%s: %v\n%s", promOperatorModule, promOperatorCRDs, err, out))
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download: %v: %s", err, out)
	}
	return filepath.Join(m.Dir, "example", "prometheus-operator-crd")
}

// installCRDs applies the CRDs of the kinds the chart renders and waits
// until the server serves them.
func installCRDs(t *testing.T, s *apiServer) {
	t.Helper()
	dir := promOperatorCRDDir(t)
	for _, plural := range []string{"servicemonitors", "podmonitors", "prometheusrules"} {
		y, err := os.ReadFile(filepath.Join(dir, "monitoring.coreos.com_"+plural+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		crd := newKubeObject(t, y)
		if _, err := s.apply(t, crd, false); err != nil {
			t.Fatal(err)
		}
		var last string
		waitForServer(t, time.Minute, func() bool {
			code, body, _ := s.do(http.MethodGet, "/apis/monitoring.coreos.com/v1/"+plural, "", nil)
			last = fmt.Sprintf("%d %s", code, body)
			return code == http.StatusOK
		}, func() string { return "CRD " + crd.name + " served: " + last })
	}
	t.Logf("prometheus-operator %s CRDs established: ServiceMonitor, PodMonitor, PrometheusRule", promOperatorCRDs)
}

// TestAPIServer applies the defaults and every example, as rendered, to a
// real kube-apiserver by server-side apply, reads each object back and
// checks that the server kept every applied field unchanged (nothing
// pruned, nothing rewritten), filled in the defaults a pod needs, kept the
// native sidecar's restartPolicy: Always, and that applying again changes
// nothing. What the server added is logged per object. Objects the server
// must refuse (mutations of rendered ones) show that its validation ran.
// All of it on 1.37 and on 1.37 emulating 1.34.
func TestAPIServer(t *testing.T) {
	if testing.Short() {
		realtool.Skip(t, "kube-apiserver", "-short")
	}
	// The binary's own version, and the oldest it can emulate (the APIs,
	// defaults and validation of that release, as far as the server keeps
	// them: compatibility versions reach back three minors).
	servers := []struct {
		name, kube string
		args       []string
	}{
		{"kube-1.37", "", nil},
		{"kube-1.34-emulated", "1.34.0", []string{"--emulated-version=kube=1.34"}},
	}
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) { testAPIServer(t, srv.kube, srv.args) })
	}
}

// testAPIServer is TestAPIServer on one server, started with args; the
// chart is rendered for kube, else for the server's version.
func testAPIServer(t *testing.T, kube string, args []string) {
	s := startAPIServer(t, args...)
	installCRDs(t, s)
	if kube == "" {
		kube = strings.TrimPrefix(strings.SplitN(s.version, "+", 2)[0], "v")
	}

	cases := map[string][]string{"default": nil}
	for _, ex := range examples(t) {
		cases[strings.TrimSuffix(filepath.Base(ex), ".yaml")] = []string{ex}
	}
	names := make([]string, 0, len(cases))
	for n := range cases {
		names = append(names, n)
	}
	sort.Strings(names)
	byKind := map[string]kubeObject{} // one applied object of each kind, for the refusals below
	for _, name := range names {
		files := cases[name]
		t.Run(name, func(t *testing.T) {
			// One namespace per case: the examples share object names, and
			// a Job's pod template cannot be changed once created.
			ns := "chart-" + name
			createNamespace(t, s, ns)
			args := []string{"template", release, chartDir, "--namespace", ns, "--kube-version", kube}
			for _, f := range files {
				args = append(args, "-f", f)
			}
			out, err := runHelm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			v := loadValues(t, files...)
			var objs []kubeObject
			for _, part := range splitDocs(out) {
				if strings.TrimSpace(stripComments(part)) == "" {
					continue
				}
				o := newKubeObject(t, []byte(part))
				// Other namespaces the chart renders into (the dashboards'
				// grafanaDashboards.namespace) exist in a real cluster.
				if o.namespace != "" && o.namespace != ns {
					createNamespace(t, s, o.namespace)
				}
				objs = append(objs, o)
			}
			for _, o := range objs {
				if _, ok := byKind[o.kind]; !ok {
					byKind[o.kind] = o
				}
				got, err := s.apply(t, o, false)
				if err != nil {
					t.Error(err)
					continue
				}
				checkKept(t, o, got)
				added := "nothing"
				if a := addedFields(storedForm(o), got); len(a) > 0 {
					added = strings.Join(append([]string{""}, a...), "\n\t")
				}
				t.Logf("%s: applied %d fields; the server added: %s", o, countLeaves(o.body), added)
				checkServerDefaults(t, o, got, v)
				// Applying the same manifest again is a no-op: same
				// resourceVersion (nothing rendered is rewritten by the
				// server, so a re-apply finds nothing to change).
				again, err := s.apply(t, o, false)
				if err != nil {
					t.Error(err)
					continue
				}
				if rv, rv2 := resourceVersion(got), resourceVersion(again); rv != rv2 {
					t.Errorf("%s: applying it again changed it: resourceVersion %s -> %s", o, rv, rv2)
				}
			}
		})
	}
	for key := range kubeResources {
		k := key[strings.LastIndex(key, "/")+1:]
		if _, ok := byKind[k]; !ok && k != "Namespace" && k != "CustomResourceDefinition" {
			t.Errorf("no case rendered a %s: the chart's kinds are not all applied", k)
		}
	}
	t.Run("refusals", func(t *testing.T) { checkRefusals(t, s, byKind) })
}

func createNamespace(t *testing.T, s *apiServer, name string) {
	t.Helper()
	if _, err := s.apply(t, newKubeObject(t, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+name+"}\n")), false); err != nil {
		t.Fatal(err)
	}
}

func resourceVersion(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	rv, _ := meta["resourceVersion"].(string)
	return rv
}

// checkKept reports every applied value the server did not store as
// applied: a field pruned (an unknown field of a CRD's schema), a value
// rewritten (e.g. a quantity not in canonical form), a list changed.
func checkKept(t *testing.T, o kubeObject, got map[string]any) {
	t.Helper()
	var diffs []string
	compareKept("", storedForm(o), got, &diffs)
	for _, d := range diffs {
		t.Errorf("%s: %s", o, d)
	}
}

// storedForm is what the server stores for what o applies: a Secret's
// write-only stringData goes into data, base64-encoded.
func storedForm(o kubeObject) map[string]any {
	sd, ok := o.body["stringData"].(map[string]any)
	if o.kind != "Secret" || !ok {
		return o.body
	}
	body := maps.Clone(o.body)
	delete(body, "stringData")
	data, _ := body["data"].(map[string]any)
	data = maps.Clone(data)
	if data == nil {
		data = map[string]any{}
	}
	for k, v := range sd {
		data[k] = base64.StdEncoding.EncodeToString([]byte(fmt.Sprint(v)))
	}
	body["data"] = data
	return body
}

func compareKept(path string, applied, stored any, diffs *[]string) {
	switch a := applied.(type) {
	case map[string]any:
		s, ok := stored.(map[string]any)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: applied an object, stored %v", path, stored))
			return
		}
		for k, av := range a {
			sv, ok := s[k]
			if !ok {
				if av == nil {
					continue // an explicit null is "unset"
				}
				*diffs = append(*diffs, fmt.Sprintf("%s.%s: applied %v, not stored", path, k, av))
				continue
			}
			compareKept(path+"."+k, av, sv, diffs)
		}
	case []any:
		s, ok := stored.([]any)
		if !ok || len(s) != len(a) {
			*diffs = append(*diffs, fmt.Sprintf("%s: applied %v, stored %v", path, a, stored))
			return
		}
		for i := range a {
			compareKept(fmt.Sprintf("%s[%d]", path, i), a[i], s[i], diffs)
		}
	default:
		if !reflect.DeepEqual(applied, stored) {
			*diffs = append(*diffs, fmt.Sprintf("%s: applied %v (%T), stored %v (%T)", path, applied, applied, stored, stored))
		}
	}
}

// ignoredAdded are the fields every object gets that say nothing about
// the chart (identity, bookkeeping).
var ignoredAdded = []string{".metadata.uid", ".metadata.resourceVersion", ".metadata.creationTimestamp", ".metadata.generation", ".metadata.managedFields", ".status"}

// addedFields lists "path=value" for every leaf the server stored that was
// not applied, sorted.
func addedFields(applied, stored any) []string {
	var out []string
	var walk func(path string, a, s any)
	walk = func(path string, a, s any) {
		if slices.ContainsFunc(ignoredAdded, func(p string) bool {
			return path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[")
		}) {
			return
		}
		switch sv := s.(type) {
		case map[string]any:
			am, _ := a.(map[string]any)
			if am == nil && len(sv) == 0 && a == nil {
				out = append(out, path+"={}")
				return
			}
			for k, v := range sv {
				walk(path+"."+k, am[k], v)
			}
		case []any:
			al, _ := a.([]any)
			for i, v := range sv {
				var av any
				if i < len(al) {
					av = al[i]
				}
				walk(fmt.Sprintf("%s[%d]", path, i), av, v)
			}
		default:
			if a == nil {
				b, _ := json.Marshal(s)
				out = append(out, path+"="+string(b))
			}
		}
	}
	walk("", applied, stored)
	sort.Strings(out)
	return out
}

func countLeaves(v any) int {
	switch x := v.(type) {
	case map[string]any:
		n := 0
		for _, e := range x {
			n += countLeaves(e)
		}
		return n
	case []any:
		n := 0
		for _, e := range x {
			n += countLeaves(e)
		}
		return n
	}
	return 1
}

// strictInto decodes what the server returned into its k8s.io/api type,
// strictly: the server's fields are those of the types the chart tests use.
func strictInto(t *testing.T, o kubeObject, got map[string]any, into any) {
	t.Helper()
	b, _ := json.Marshal(got)
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s as stored, decoded strictly into %T: %v", o, into, err)
	}
}

// checkServerDefaults checks the defaults the server fills in for the
// chart's objects, and that it kept the chart's sidecar wiring.
func checkServerDefaults(t *testing.T, o kubeObject, got map[string]any, v values) {
	t.Helper()
	switch o.kind {
	case "Deployment":
		var d appsv1.Deployment
		strictInto(t, o, got, &d)
		if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || d.Spec.ProgressDeadlineSeconds == nil || *d.Spec.ProgressDeadlineSeconds != 600 {
			t.Errorf("%s: strategy %+v, progressDeadlineSeconds %v: not the server's defaults", o, d.Spec.Strategy, d.Spec.ProgressDeadlineSeconds)
		}
		checkStoredPod(t, o, d.Spec.Template.Spec, corev1.RestartPolicyAlways, v)
	case "Job":
		var j batchv1.Job
		strictInto(t, o, got, &j)
		checkJobDefaults(t, o, j.Spec)
		checkStoredPod(t, o, j.Spec.Template.Spec, corev1.RestartPolicyNever, v)
	case "CronJob":
		var c batchv1.CronJob
		strictInto(t, o, got, &c)
		if c.Spec.Suspend == nil || c.Spec.ConcurrencyPolicy == "" {
			t.Errorf("%s: suspend %v, concurrencyPolicy %q", o, c.Spec.Suspend, c.Spec.ConcurrencyPolicy)
		}
		// The server defaults a Job when the CronJob creates it, not the
		// template: only its pod template is completed here.
		if js := c.Spec.JobTemplate.Spec; js.Completions != nil || js.Selector != nil {
			t.Errorf("%s: the job template was defaulted: completions %v selector %v", o, js.Completions, js.Selector)
		}
		checkStoredPod(t, o, c.Spec.JobTemplate.Spec.Template.Spec, corev1.RestartPolicyNever, v)
	case "Service":
		var svc corev1.Service
		strictInto(t, o, got, &svc)
		_, cidr, _ := net.ParseCIDR(serviceCIDR)
		if ip := net.ParseIP(svc.Spec.ClusterIP); ip == nil || !cidr.Contains(ip) {
			t.Errorf("%s: clusterIP %q not allocated from %s", o, svc.Spec.ClusterIP, serviceCIDR)
		}
		for _, p := range svc.Spec.Ports {
			if p.Protocol != corev1.ProtocolTCP || p.TargetPort.IntValue() != v.Sidecar.Port {
				t.Errorf("%s: port %+v: want protocol TCP (default) and targetPort %d (a number, kept)", o, p, v.Sidecar.Port)
			}
		}
		if svc.Spec.SessionAffinity != corev1.ServiceAffinityNone || svc.Spec.InternalTrafficPolicy == nil {
			t.Errorf("%s: sessionAffinity %q, internalTrafficPolicy %v: not defaulted", o, svc.Spec.SessionAffinity, svc.Spec.InternalTrafficPolicy)
		}
	}
}

// checkJobDefaults: a Job gets completions, parallelism, completion mode,
// suspend and pod replacement policy, and its generated selector, on
// labels added to its pods.
func checkJobDefaults(t *testing.T, o kubeObject, spec batchv1.JobSpec) {
	t.Helper()
	if spec.Completions == nil || *spec.Completions != 1 || spec.Parallelism == nil || *spec.Parallelism != 1 ||
		spec.CompletionMode == nil || *spec.CompletionMode != batchv1.NonIndexedCompletion ||
		spec.Suspend == nil || *spec.Suspend || spec.PodReplacementPolicy == nil {
		t.Errorf("%s: completions %v parallelism %v completionMode %v suspend %v podReplacementPolicy %v: not the server's defaults",
			o, spec.Completions, spec.Parallelism, spec.CompletionMode, spec.Suspend, spec.PodReplacementPolicy)
	}
	if spec.Selector == nil || len(spec.Selector.MatchLabels) == 0 || !subset(spec.Selector.MatchLabels, spec.Template.Labels) {
		t.Errorf("%s: the server's selector %v does not select its pods %v", o, spec.Selector, spec.Template.Labels)
	}
	if spec.Template.Labels["batch.kubernetes.io/job-name"] != o.name {
		t.Errorf("%s: pod label batch.kubernetes.io/job-name = %q", o, spec.Template.Labels["batch.kubernetes.io/job-name"])
	}
}

// checkStoredPod: the pod-level and container-level defaults, and the
// sidecar where the values put it, as the server stored them.
func checkStoredPod(t *testing.T, o kubeObject, spec corev1.PodSpec, restart corev1.RestartPolicy, v values) {
	t.Helper()
	if spec.RestartPolicy != restart || spec.DNSPolicy != corev1.DNSClusterFirst || spec.SchedulerName != corev1.DefaultSchedulerName ||
		spec.TerminationGracePeriodSeconds == nil || spec.SecurityContext == nil {
		t.Errorf("%s: restartPolicy %q (want %q), dnsPolicy %q, schedulerName %q, terminationGracePeriodSeconds %v, securityContext %v",
			o, spec.RestartPolicy, restart, spec.DNSPolicy, spec.SchedulerName, spec.TerminationGracePeriodSeconds, spec.SecurityContext)
	}
	all := append(slices.Clone(spec.InitContainers), spec.Containers...)
	for _, c := range all {
		if c.TerminationMessagePath != corev1.TerminationMessagePathDefault || c.TerminationMessagePolicy != corev1.TerminationMessageReadFile || c.ImagePullPolicy == "" {
			t.Errorf("%s: container %s: terminationMessagePath %q, terminationMessagePolicy %q, imagePullPolicy %q: not defaulted",
				o, c.Name, c.TerminationMessagePath, c.TerminationMessagePolicy, c.ImagePullPolicy)
		}
		for _, p := range c.Ports {
			if p.Protocol != corev1.ProtocolTCP {
				t.Errorf("%s: container %s port %s: protocol %q", o, c.Name, p.Name, p.Protocol)
			}
		}
		for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
			if p != nil && (p.SuccessThreshold != 1 || p.TimeoutSeconds == 0 || p.PeriodSeconds == 0 || p.FailureThreshold == 0) {
				t.Errorf("%s: container %s: probe %+v not completed by the server", o, c.Name, p)
			}
		}
	}
	var native, plain bool
	for _, c := range spec.InitContainers {
		switch {
		case c.Name == "cbc-otel" && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways:
			native = true
		case c.RestartPolicy != nil:
			t.Errorf("%s: init container %s has restartPolicy %s", o, c.Name, *c.RestartPolicy)
		}
	}
	for _, c := range spec.Containers {
		plain = plain || c.Name == "cbc-otel"
	}
	if native != v.Sidecar.Native || plain == v.Sidecar.Native {
		t.Errorf("%s: stored sidecar: native (init container, restartPolicy: Always) %v, plain container %v; the values say native=%v",
			o, native, plain, v.Sidecar.Native)
	}
}

// refusal is a rendered object changed so that the server must refuse it.
type refusal struct {
	name   string
	kind   string
	change func(obj map[string]any)
	want   string // in the server's message
}

// renderedPodSpec returns the pod spec inside a rendered workload.
func renderedPodSpec(obj map[string]any) map[string]any {
	spec := obj["spec"].(map[string]any)
	if jt, ok := spec["jobTemplate"].(map[string]any); ok {
		spec = jt["spec"].(map[string]any)
	}
	return spec["template"].(map[string]any)["spec"].(map[string]any)
}

func renderedInitContainer(obj map[string]any, name string) map[string]any {
	for _, c := range renderedPodSpec(obj)["initContainers"].([]any) {
		if m := c.(map[string]any); m["name"] == name {
			return m
		}
	}
	panic("no init container " + name)
}

var refusals = []refusal{
	{"sidecar restartPolicy OnFailure", "Job", func(o map[string]any) { renderedInitContainer(o, "cbc-otel")["restartPolicy"] = "OnFailure" },
		// Its probes need restartPolicy: Always.
		"livenessProbe: Forbidden"},
	{"probes on a plain init container", "Job", func(o map[string]any) {
		renderedInitContainer(o, "cbc-otel-install")["readinessProbe"] = renderedInitContainer(o, "cbc-otel")["readinessProbe"]
	}, "readinessProbe: Forbidden"},
	{"Job pod restartPolicy Always", "Job", func(o map[string]any) { renderedPodSpec(o)["restartPolicy"] = "Always" }, "restartPolicy"},
	// Server-side apply refuses an unknown field with HTTP 500 (its typed
	// patch fails), whatever fieldValidation says.
	{"unknown container field", "Job", func(o map[string]any) { renderedInitContainer(o, "cbc-otel")["restartPolicyy"] = "Always" }, "restartPolicyy: field not declared in schema"},
	{"ServiceMonitor interval not a duration", "ServiceMonitor", func(o map[string]any) {
		o["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)["interval"] = "ten seconds"
	}, "interval in body should match"},
	{"ServiceMonitor unknown field", "ServiceMonitor", func(o map[string]any) { o["spec"].(map[string]any)["endpoint"] = []any{} }, "endpoint: field not declared in schema"},
	{"PrometheusRule alert without expr", "PrometheusRule", func(o map[string]any) {
		rule := o["spec"].(map[string]any)["groups"].([]any)[0].(map[string]any)["rules"].([]any)[0].(map[string]any)
		delete(rule, "expr")
	}, "expr: Required value"},
	{"Service targetPort out of range", "Service", func(o map[string]any) {
		o["spec"].(map[string]any)["ports"].([]any)[0].(map[string]any)["targetPort"] = 70000
	}, "targetPort: Invalid value: 70000"},
}

// checkRefusals dry-runs mutations of applied objects that the server
// must refuse: the same server that accepted the chart validates, the
// prometheus-operator CRDs' schemas included.
func checkRefusals(t *testing.T, s *apiServer, byKind map[string]kubeObject) {
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			o, ok := byKind[r.kind]
			if !ok {
				t.Fatalf("no %s was applied", r.kind)
			}
			b, _ := json.Marshal(o.body)
			var body map[string]any
			_ = json.Unmarshal(b, &body) // a deep copy
			r.change(body)
			o.body = body
			_, err := s.apply(t, o, true)
			if err == nil {
				t.Fatalf("%s: the server accepted it", r.name)
			}
			if !strings.Contains(err.Error(), r.want) {
				t.Errorf("%s: refused, but not for %q: %v", r.name, r.want, err)
			}
			t.Logf("refused as expected: %v", err)
		})
	}
}
