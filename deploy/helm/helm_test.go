// Package helm_test checks the Helm chart in deploy/helm/cbc-otel offline, as
// strictly as an API server would: `helm lint --strict` and `helm template`
// for the default values and every example, every rendered document decoded
// strictly into its Kubernetes (or prometheus-operator) Go type, explicit
// assertions on the wiring, values.schema.json rejections, and goldens.
//
// Helm is HELM_BIN, else built from tools/helm (the pinned tools module).
// When neither works the tests skip, unless CI is set: then they fail
// (internal/realtool).
//
//	go test ./deploy/helm/            # checks
//	go test ./deploy/helm/ -update    # rewrites files/ and testdata/ goldens
package helm_test

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/cbc-otel/cbc-otel/internal/realtool"
	"github.com/cbc-otel/cbc-otel/internal/testbin"
)

const (
	chartDir = "cbc-otel"
	// kubeVersion is what the templates are rendered for: the oldest with
	// native sidecars on by default (the chart allows >= 1.28).
	kubeVersion = "1.29.0"
	release     = "wf"
	namespace   = "agents"
)

var (
	toolsOnce sync.Once
	helmBin   string
	cbcBin    string
	buildErr  error // building cbc-otel: a failure, never a skip
	helmErr   error // getting helm: a skip (CI: a failure)
)

// repoRoot is the module root (deploy/helm is two levels down).
func repoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// helmHint says how to get the pinned Helm without building it here.
const helmHint = "set HELM_BIN to a Helm v3 built by tools/helm/build.sh"

// tools returns helm and a freshly built cbc-otel, building them once.
func tools(t *testing.T) (helm, cbc string) {
	t.Helper()
	// Read before the Once: a HELM_BIN naming no file skips every test
	// (CI: fails it), not only the first.
	fromEnv, useEnv := realtool.FromEnv(t, "helm", "HELM_BIN", helmHint)
	toolsOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cbc-otel-helm-test-")
		if err != nil {
			buildErr = err
			return
		}
		// Left for the process: both binaries are used by every test.
		root := repoRoot(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cbcBin = filepath.Join(dir, "cbc-otel")
		if _, err := testbin.Build(ctx, cbcBin, testbin.Dir(root)); err != nil {
			buildErr = fmt.Errorf("building cbc-otel: %w", err)
			return
		}
		if useEnv {
			helmBin = fromEnv
			return
		}
		cmd := exec.CommandContext(ctx, filepath.Join(root, "tools", "helm", "build.sh"), dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			helmErr = fmt.Errorf("building it with tools/helm/build.sh: %v (%s)\n%s", err, helmHint, out)
			return
		}
		helmBin = filepath.Join(dir, "helm")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	if helmErr != nil {
		realtool.Missing(t, "helm", helmErr.Error())
	}
	return helmBin, cbcBin
}

// runHelm runs helm with args in this directory and returns stdout.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	helm, _ := tools(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, args...)
	// No user configuration, cache or repositories leak in.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// render runs helm template with the values files (none = the defaults)
// and extra --set style arguments.
func render(t *testing.T, valuesFiles []string, extra ...string) (string, error) {
	t.Helper()
	args := []string{"template", release, chartDir, "--namespace", namespace, "--kube-version", kubeVersion}
	for _, f := range valuesFiles {
		args = append(args, "-f", f)
	}
	return runHelm(t, append(args, extra...)...)
}

// doc is one rendered manifest, decoded.
type doc struct {
	source string // the template (helm's "# Source:" comment)
	kind   string
	obj    any
}

// manifest is the decoded output of one helm template.
type manifest struct{ docs []doc }

func (m manifest) all(kind string) []any {
	var out []any
	for _, d := range m.docs {
		if d.kind == kind {
			out = append(out, d.obj)
		}
	}
	return out
}

func (m manifest) one(t *testing.T, kind string) any {
	t.Helper()
	all := m.all(kind)
	if len(all) != 1 {
		t.Fatalf("%d %s documents, want 1", len(all), kind)
	}
	return all[0]
}

// newObject returns the Go type a document of apiVersion and kind decodes
// into; an unknown pair is an error (the chart renders nothing else).
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + "/" + kind {
	case "v1/Service":
		return new(corev1.Service), nil
	case "v1/ConfigMap":
		return new(corev1.ConfigMap), nil
	case "v1/Secret":
		return new(corev1.Secret), nil
	case "v1/ServiceAccount":
		return new(corev1.ServiceAccount), nil
	case "apps/v1/Deployment":
		return new(appsv1.Deployment), nil
	case "batch/v1/Job":
		return new(batchv1.Job), nil
	case "batch/v1/CronJob":
		return new(batchv1.CronJob), nil
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return new(monitoringv1.ServiceMonitor), nil
	case "monitoring.coreos.com/v1/PodMonitor":
		return new(monitoringv1.PodMonitor), nil
	case "monitoring.coreos.com/v1/PrometheusRule":
		return new(monitoringv1.PrometheusRule), nil
	}
	return nil, fmt.Errorf("unexpected document %s %s", apiVersion, kind)
}

var sourceRE = regexp.MustCompile(`(?m)^# Source: (\S+)`)

// decode splits helm's output and decodes each document strictly: an
// unknown field, a duplicate key or a wrong type is an error.
func decode(t *testing.T, out string) manifest {
	t.Helper()
	var m manifest
	for _, part := range splitDocs(out) {
		if strings.TrimSpace(stripComments(part)) == "" {
			continue
		}
		src := ""
		if s := sourceRE.FindStringSubmatch(part); s != nil {
			src = s[1]
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(part), &meta); err != nil {
			t.Fatalf("%s: %v\n%s", src, err, part)
		}
		obj, err := newObject(meta.APIVersion, meta.Kind)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if err := yaml.UnmarshalStrict([]byte(part), obj); err != nil {
			t.Fatalf("%s: strict decoding into %T: %v\n%s", src, obj, err, part)
		}
		m.docs = append(m.docs, doc{source: src, kind: meta.Kind, obj: obj})
	}
	if len(m.docs) == 0 {
		t.Fatal("helm template rendered nothing")
	}
	return m
}

func splitDocs(out string) []string {
	var docs []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "---" {
			docs = append(docs, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	return append(docs, cur.String())
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// binFlags are the flag names and defaults of a cbc-otel subcommand, read
// from its -h output (the binary is the source of truth, not the README).
type binFlags map[string]string // name → default ("" when none shown)

var (
	flagLineRE    = regexp.MustCompile(`^  -([a-z][a-z0-9.-]*)`)
	flagDefaultRE = regexp.MustCompile(`\(default "?([^")]*)"?\)\s*$`)
)

func subcommandFlags(t *testing.T, sub string) binFlags {
	t.Helper()
	_, cbc := tools(t)
	out, _ := exec.Command(cbc, sub, "-h").CombinedOutput() // exit 0; output on stderr
	fl := binFlags{}
	var last string
	for _, line := range strings.Split(string(out), "\n") {
		if line == "environment:" {
			break // the variables it reads follow the flags
		}
		if m := flagLineRE.FindStringSubmatch(line); m != nil {
			last = m[1]
			fl[last] = ""
			continue
		}
		if last != "" {
			if m := flagDefaultRE.FindStringSubmatch(line); m != nil {
				fl[last] = m[1]
			}
		}
	}
	if len(fl) < 5 {
		t.Fatalf("cbc-otel %s -h: found flags %v in\n%s", sub, fl, out)
	}
	return fl
}

// checkFlags asserts that every --flag[=value] in args is a flag of the
// subcommand (a flag of the chart's that the binary renamed fails here).
func checkFlags(t *testing.T, what string, args []string, fl binFlags) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			t.Errorf("%s: argument %q is not a flag", what, a)
			continue
		}
		name, val, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if _, ok := fl[name]; !ok {
			t.Errorf("%s: flag --%s is not a flag of the binary", what, name)
		}
		got[name] = val
	}
	return got
}

// examples are the documented values files.
func examples(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	return files
}

func TestMain(m *testing.M) {
	flag.Parse()
	if runtime.GOOS != "linux" && os.Getenv("CI") != "true" {
		fmt.Println("skipping: the chart tests run on Linux")
		os.Exit(0)
	}
	code := m.Run()
	if helmBin != "" && os.Getenv("HELM_BIN") == "" {
		os.RemoveAll(filepath.Dir(helmBin))
	} else if cbcBin != "" {
		os.RemoveAll(filepath.Dir(cbcBin))
	}
	os.Exit(code)
}
