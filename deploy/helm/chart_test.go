package helm_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/cbc-otel/cbc-otel/dashboards"
	"github.com/cbc-otel/cbc-otel/internal/golden"
)

func TestLint(t *testing.T) {
	if _, err := runHelm(t, "lint", "--strict", chartDir, "--kube-version", kubeVersion); err != nil {
		t.Fatal(err)
	}
	for _, ex := range examples(t) {
		t.Run(filepath.Base(ex), func(t *testing.T) {
			if _, err := runHelm(t, "lint", "--strict", chartDir, "--kube-version", kubeVersion, "-f", ex); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// values is the part of the values the assertions need, read from the
// same files helm was given (over the chart's defaults).
type values struct {
	Workload struct {
		Kind    string    `json:"kind"`
		Command []string  `json:"command"`
		Args    []string  `json:"args"`
		SDK     sdkValues `json:"sdk"`
		Wrapper struct {
			JoinCliTelemetry bool `json:"joinCliTelemetry"`
		} `json:"wrapper"`
	} `json:"workload"`
	Sidecar struct {
		Native bool `json:"native"`
		Port   int  `json:"port"`
	} `json:"sidecar"`
	Service        struct{ Enabled bool }        `json:"service"`
	ServiceMonitor struct{ Enabled bool }        `json:"serviceMonitor"`
	PodMonitor     struct{ Enabled bool }        `json:"podMonitor"`
	PrometheusRule struct{ Enabled bool }        `json:"prometheusRule"`
	Grafana        struct{ Enabled bool }        `json:"grafanaDashboards"`
	WebConfig      struct{ BasicAuth, TLS bool } `json:"webConfig"`
}

func loadValues(t *testing.T, files ...string) values {
	t.Helper()
	var v values
	for _, f := range append([]string{filepath.Join(chartDir, "values.yaml")}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// Later files override: decode each over the previous result.
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		j, _ := json.Marshal(m)
		if err := json.Unmarshal(j, &v); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// TestRender renders the defaults and every example, decodes every
// document strictly and checks the wiring.
func TestRender(t *testing.T) {
	cases := map[string][]string{"default": nil}
	for _, ex := range examples(t) {
		cases[strings.TrimSuffix(filepath.Base(ex), ".yaml")] = []string{ex}
	}
	serveFlags, runFlags := subcommandFlags(t, "serve"), subcommandFlags(t, "run")
	for name, files := range cases {
		t.Run(name, func(t *testing.T) {
			out, err := render(t, files)
			if err != nil {
				t.Fatal(err)
			}
			m := decode(t, out)
			v := loadValues(t, files...)
			checkManifest(t, m, v, serveFlags, runFlags)
		})
	}
}

func checkManifest(t *testing.T, m manifest, v values, serveFlags, runFlags binFlags) {
	var pod corev1.PodTemplateSpec
	switch v.Workload.Kind {
	case "Deployment":
		d := m.one(t, "Deployment").(*appsv1.Deployment)
		pod = d.Spec.Template
		if !subset(d.Spec.Selector.MatchLabels, pod.Labels) {
			t.Errorf("deployment selector %v does not select its pods %v", d.Spec.Selector.MatchLabels, pod.Labels)
		}
	case "Job":
		j := m.one(t, "Job").(*batchv1.Job)
		pod = j.Spec.Template
	case "CronJob":
		c := m.one(t, "CronJob").(*batchv1.CronJob)
		pod = c.Spec.JobTemplate.Spec.Template
		if c.Spec.Schedule == "" {
			t.Error("CronJob without a schedule")
		}
	default:
		t.Fatalf("workload kind %q", v.Workload.Kind)
	}
	if v.Workload.Kind != "Deployment" && pod.Spec.RestartPolicy == corev1.RestartPolicyAlways {
		t.Error("a Job's pod has restartPolicy Always")
	}
	sidecar, cli := checkPod(t, pod.Spec, v, serveFlags, runFlags, sdkConfigMapOf(t, m, v))

	svcs := m.all("Service")
	if v.Service.Enabled != (len(svcs) == 1) {
		t.Errorf("service.enabled=%v, %d Services", v.Service.Enabled, len(svcs))
	}
	port := sidecar.Ports[0].ContainerPort
	for _, s := range svcs {
		svc := s.(*corev1.Service)
		if !subset(svc.Spec.Selector, pod.Labels) {
			t.Errorf("service selector %v does not select the pods %v", svc.Spec.Selector, pod.Labels)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.IntValue() != int(port) || svc.Spec.Ports[0].Name != "metrics" {
			t.Errorf("service ports %+v, want metrics → %d", svc.Spec.Ports, port)
		}
		if sm := m.all("ServiceMonitor"); len(sm) == 1 {
			mon := sm[0].(*monitoringv1.ServiceMonitor)
			if !subset(mon.Spec.Selector.MatchLabels, svc.Labels) {
				t.Errorf("ServiceMonitor selector %v does not select the Service %v", mon.Spec.Selector.MatchLabels, svc.Labels)
			}
			ep := mon.Spec.Endpoints[0]
			if ep.Port != svc.Spec.Ports[0].Name || ep.Path != "/metrics" {
				t.Errorf("ServiceMonitor endpoint %s%s, want port %s /metrics", ep.Port, ep.Path, svc.Spec.Ports[0].Name)
			}
			checkScheme(t, "ServiceMonitor", ep.Scheme, v)
		}
	}
	if v.ServiceMonitor.Enabled != (len(m.all("ServiceMonitor")) == 1) {
		t.Errorf("serviceMonitor.enabled=%v but %d rendered", v.ServiceMonitor.Enabled, len(m.all("ServiceMonitor")))
	}
	pms := m.all("PodMonitor")
	if v.PodMonitor.Enabled != (len(pms) == 1) {
		t.Errorf("podMonitor.enabled=%v but %d rendered", v.PodMonitor.Enabled, len(pms))
	}
	for _, p := range pms {
		pm := p.(*monitoringv1.PodMonitor)
		if !subset(pm.Spec.Selector.MatchLabels, pod.Labels) {
			t.Errorf("PodMonitor selector %v does not select the pods %v", pm.Spec.Selector.MatchLabels, pod.Labels)
		}
		ep := pm.Spec.PodMetricsEndpoints[0]
		if ep.Port == nil || *ep.Port != sidecar.Ports[0].Name || ep.Path != "/metrics" {
			t.Errorf("PodMonitor endpoint %v %s, want port %s", ep.Port, ep.Path, sidecar.Ports[0].Name)
		}
		checkScheme(t, "PodMonitor", ep.Scheme, v)
	}
	if v.PrometheusRule.Enabled != (len(m.all("PrometheusRule")) == 1) {
		t.Errorf("prometheusRule.enabled=%v but %d rendered", v.PrometheusRule.Enabled, len(m.all("PrometheusRule")))
	}
	var dashCMs int
	for _, c := range m.all("ConfigMap") {
		cm := c.(*corev1.ConfigMap)
		if cm.Labels["grafana_dashboard"] != "1" {
			continue
		}
		dashCMs++
		for key, body := range cm.Data {
			var d struct {
				UID   string `json:"uid"`
				Title string `json:"title"`
			}
			if err := json.Unmarshal([]byte(body), &d); err != nil || d.UID == "" {
				t.Errorf("ConfigMap %s key %s is not a dashboard: %v", cm.Name, key, err)
			}
		}
	}
	if want := map[bool]int{true: 2, false: 0}[v.Grafana.Enabled]; dashCMs != want {
		t.Errorf("%d dashboard ConfigMaps, want %d", dashCMs, want)
	}
	_ = cli
}

func checkScheme(t *testing.T, what string, scheme *monitoringv1.Scheme, v values) {
	t.Helper()
	want := "http"
	if v.WebConfig.TLS {
		want = "https"
	}
	if scheme == nil || strings.ToLower(string(*scheme)) != want {
		t.Errorf("%s scheme %v, want %s", what, scheme, want)
	}
}

// checkPod asserts the pod's wiring and returns the sidecar and CLI
// containers. sdk is the wrapper script of SDK mode (zero without).
func checkPod(t *testing.T, spec corev1.PodSpec, v values, serveFlags, runFlags binFlags, sdk sdkConfigMap) (sidecar, cli corev1.Container) {
	t.Helper()
	find := func(cs []corev1.Container, name string) (corev1.Container, bool) {
		for _, c := range cs {
			if c.Name == name {
				return c, true
			}
		}
		return corev1.Container{}, false
	}
	install, ok := find(spec.InitContainers, "cbc-otel-install")
	if !ok || spec.InitContainers[0].Name != "cbc-otel-install" {
		t.Fatalf("the first init container is not cbc-otel-install: %+v", spec.InitContainers)
	}
	cli, ok = find(spec.Containers, "cli")
	if !ok {
		t.Fatal("no cli container")
	}
	if v.Sidecar.Native {
		sidecar, ok = find(spec.InitContainers, "cbc-otel")
		if !ok || sidecar.RestartPolicy == nil || *sidecar.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			t.Fatalf("no native sidecar (init container with restartPolicy Always): %+v", spec.InitContainers)
		}
	} else {
		sidecar, ok = find(spec.Containers, "cbc-otel")
		if !ok || sidecar.RestartPolicy != nil {
			t.Fatalf("no plain sidecar container: %+v", spec.Containers)
		}
		if _, native := find(spec.InitContainers, "cbc-otel"); native {
			t.Error("sidecar rendered twice")
		}
	}
	vols := map[string]corev1.Volume{}
	for _, vol := range spec.Volumes {
		vols[vol.Name] = vol
	}
	mountOf := func(c corev1.Container, vol string) (corev1.VolumeMount, bool) {
		for _, m := range c.VolumeMounts {
			if m.Name == vol {
				return m, true
			}
		}
		return corev1.VolumeMount{}, false
	}

	// The install container fills the bin volume the CLI runs the wrapper from.
	binMount, ok := mountOf(install, "bin")
	if !ok || len(install.Command) != 3 || install.Command[1] != "install" || install.Command[2] != binMount.MountPath {
		t.Errorf("install command %v does not copy into its bin mount %v", install.Command, binMount)
	}
	cliBin, ok := mountOf(cli, "bin")
	if !ok || !cliBin.ReadOnly || cliBin.MountPath != binMount.MountPath {
		t.Errorf("cli bin mount %+v, want read-only at %s", cliBin, binMount.MountPath)
	}

	// The CLI's command: the wrapper, its flags, --, the user's command.
	// In SDK mode the app's own command, and the wrapper in a script.
	wrapper := filepath.Join(binMount.MountPath, "cbc-otel")
	var runArgs map[string]string
	if v.Workload.SDK.Enabled {
		runArgs = checkSDKContainer(t, spec, cli, wrapper, sdk, v, runFlags)
	} else {
		if len(cli.Command) < 3 || cli.Command[0] != wrapper || cli.Command[1] != "run" {
			t.Fatalf("cli command %v does not start with %s run", cli.Command, wrapper)
		}
		sep := -1
		for i, a := range cli.Command {
			if a == "--" {
				sep = i
				break
			}
		}
		if sep < 0 {
			t.Fatalf("cli command %v has no --", cli.Command)
		}
		runArgs = checkFlags(t, "cbc-otel run", cli.Command[2:sep], runFlags)
		if got := cli.Command[sep+1:]; !reflect.DeepEqual(got, v.Workload.Command) {
			t.Errorf("wrapped command %v, want %v", got, v.Workload.Command)
		}
	}
	// workload.wrapper.joinCliTelemetry: the run flag exactly when set, as a
	// bare boolean flag (plain and SDK mode alike).
	if val, ok := runArgs["cli-telemetry.join"]; ok != v.Workload.Wrapper.JoinCliTelemetry || val != "" {
		t.Errorf("workload.wrapper.joinCliTelemetry=%v, but cbc-otel run has --cli-telemetry.join: %v (value %q)",
			v.Workload.Wrapper.JoinCliTelemetry, ok, val)
	}
	if len(v.Workload.Args) > 0 && !reflect.DeepEqual(cli.Args, v.Workload.Args) {
		t.Errorf("cli args %v, want %v", cli.Args, v.Workload.Args)
	}

	// The sidecar: serve, known flags, the same spool directory and volume.
	if len(sidecar.Args) == 0 || sidecar.Args[0] != "serve" {
		t.Fatalf("sidecar args %v do not start with serve", sidecar.Args)
	}
	serveArgs := checkFlags(t, "cbc-otel serve", sidecar.Args[1:], serveFlags)
	spoolDir := runArgs["spool.dir"]
	if spoolDir == "" || serveArgs["spool.dir"] != spoolDir {
		t.Errorf("run --spool.dir=%q, serve --spool.dir=%q: not the same directory", spoolDir, serveArgs["spool.dir"])
	}
	for _, c := range []corev1.Container{cli, sidecar} {
		m, ok := mountOf(c, "spool")
		if !ok || m.MountPath != spoolDir || m.ReadOnly {
			t.Errorf("%s: spool mount %+v, want read-write at %s", c.Name, m, spoolDir)
		}
	}
	if vol := vols["spool"]; vol.EmptyDir == nil {
		t.Errorf("the spool volume is not an emptyDir: %+v", vol)
	}
	if sm, ok := mountOf(sidecar, "state"); !ok || serveArgs["state.dir"] != sm.MountPath {
		t.Errorf("serve --state.dir=%q, state mount %+v", serveArgs["state.dir"], sm)
	}

	// The metrics port: the flag, the container port, the probes. The
	// address is given: serve's default is loopback, which neither
	// Prometheus nor the kubelet's probes reach; the wrappers listen on
	// nothing (they spool).
	if _, set := runArgs["web.listen-address"]; set {
		t.Errorf("cbc-otel run --web.listen-address=%q: the wrappers spool, the sidecar serves", runArgs["web.listen-address"])
	}
	addr, set := serveArgs["web.listen-address"]
	host, portStr, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); !set || err != nil || (host != "" && (ip == nil || !ip.IsUnspecified())) {
		t.Errorf("serve --web.listen-address=%q (given: %v): want every interface, :PORT or 0.0.0.0:PORT, for the scrape and the probes", addr, set)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || len(sidecar.Ports) != 1 || int(sidecar.Ports[0].ContainerPort) != port || sidecar.Ports[0].Name != "metrics" {
		t.Errorf("--web.listen-address=%q, ports %+v", serveArgs["web.listen-address"], sidecar.Ports)
	}
	if port != v.Sidecar.Port {
		t.Errorf("port %d, values say %d", port, v.Sidecar.Port)
	}
	probes := map[string]*corev1.Probe{"startup": sidecar.StartupProbe, "liveness": sidecar.LivenessProbe, "readiness": sidecar.ReadinessProbe}
	for kind, p := range probes {
		if p == nil {
			t.Errorf("sidecar has no %s probe", kind)
			continue
		}
		if v.WebConfig.BasicAuth {
			if p.TCPSocket == nil || p.TCPSocket.Port.String() != "metrics" {
				t.Errorf("%s probe with basic auth: %+v, want tcpSocket on metrics", kind, p.ProbeHandler)
			}
			continue
		}
		want := "/healthz"
		if kind == "readiness" {
			want = "/readyz"
		}
		if p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe %+v, want GET %s on metrics", kind, p.ProbeHandler, want)
			continue
		}
		scheme := corev1.URISchemeHTTP
		if v.WebConfig.TLS {
			scheme = corev1.URISchemeHTTPS
		}
		if p.HTTPGet.Scheme != scheme {
			t.Errorf("%s probe scheme %s, want %s", kind, p.HTTPGet.Scheme, scheme)
		}
	}

	// Hardening, container by container (the pod level adds the UID).
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v", psc)
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s: no securityContext", c.Name)
		case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
			t.Errorf("%s: runAsNonRoot not set", c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s: root filesystem writable", c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("%s: privilege escalation allowed", c.Name)
		case sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
			t.Errorf("%s: capabilities %+v, want drop ALL", c.Name, sc.Capabilities)
		case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
			t.Errorf("%s: seccomp %+v", c.Name, sc.SeccompProfile)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("%s: privileged", c.Name)
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: no memory request or limit: %+v", c.Name, c.Resources)
		}
	}
	return sidecar, cli
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestJoinCliTelemetry: workload.wrapper.joinCliTelemetry renders
// --cli-telemetry.join into `cbc-otel run` when true and not when false
// (checkPod asserts both ways), with the wrapped command and with the SDK
// script, and the rest of the wiring holds either way.
func TestJoinCliTelemetry(t *testing.T) {
	serveFlags, runFlags := subcommandFlags(t, "serve"), subcommandFlags(t, "run")
	if _, ok := runFlags["cli-telemetry.join"]; !ok {
		t.Fatal("cbc-otel run has no --cli-telemetry.join, which the chart's value renders")
	}
	for _, files := range [][]string{nil, {filepath.Join(chartDir, "examples", sdkExample)}} {
		for _, join := range []bool{false, true} {
			name := fmt.Sprintf("plain/%v", join)
			if files != nil {
				name = fmt.Sprintf("sdk/%v", join)
			}
			t.Run(name, func(t *testing.T) {
				out, err := render(t, files, "--set", fmt.Sprintf("workload.wrapper.joinCliTelemetry=%v", join))
				if err != nil {
					t.Fatal(err)
				}
				v := loadValues(t, files...)
				v.Workload.Wrapper.JoinCliTelemetry = join
				checkManifest(t, decode(t, out), v, serveFlags, runFlags)
				if got := strings.Contains(out, "--cli-telemetry.join"); got != join {
					t.Errorf("joinCliTelemetry=%v: --cli-telemetry.join in the rendering: %v", join, got)
				}
			})
		}
	}
}

// TestDefaultPortIsTheBinarys: the chart's default port is the port of
// serve's own default listen address (whose host, loopback, the chart
// replaces: checkManifest).
func TestDefaultPortIsTheBinarys(t *testing.T) {
	fl := subcommandFlags(t, "serve")
	def := fl["web.listen-address"]
	v := loadValues(t)
	if host, port, err := net.SplitHostPort(def); err != nil || host != "127.0.0.1" || port != strconv.Itoa(v.Sidecar.Port) {
		t.Errorf("serve --web.listen-address defaults to %q, the chart's sidecar.port is %d", def, v.Sidecar.Port)
	}
	for _, f := range []string{"spool.dir", "state.dir", "web.config.file", "follow.idle-timeout", "follow.poll-interval", "state.checkpoint-interval", "spool.keep", "spool.max-bytes", "otlp.protocol", "traces.capture-previews"} {
		if _, ok := fl[f]; !ok {
			t.Errorf("serve has no --%s (the chart uses it)", f)
		}
	}
	if _, ok := subcommandFlags(t, "run")["spool.dir"]; !ok {
		t.Error("run has no --spool.dir (the chart's wrapper uses it)")
	}
}

// TestPrometheusRule: the PrometheusRule the chart renders for a set of
// values is the rule file dashboards.Rules renders for the same options.
func TestPrometheusRule(t *testing.T) {
	cases := []struct {
		values string
		opts   dashboards.RuleOptions
	}{
		{"", dashboards.RuleOptions{}},
		{"target: 0.995\nstopped: bad\ngroupBy: [namespace, pod]\n",
			dashboards.RuleOptions{Target: 0.995, Stopped: dashboards.StoppedBad, GroupBy: []string{"namespace", "pod"}}},
		{"target: 0.9\nstopped: good\njobRegex: agents/.*\nrunbookURL: https://runbooks.example.com/x\ninterruptP95Seconds: 2.5\n",
			dashboards.RuleOptions{Target: 0.9, Stopped: dashboards.StoppedGood, JobRegex: "agents/.*", RunbookURL: "https://runbooks.example.com/x", InterruptP95: 2500 * time.Millisecond}},
		{"target: 0.9999\n", dashboards.RuleOptions{Target: 0.9999}},
		{"target: 0.95\nstopped: excluded\ngroupBy: [namespace]\n", dashboards.RuleOptions{Target: 0.95, GroupBy: []string{"namespace"}}},
	}
	dir := t.TempDir()
	for i, c := range cases {
		t.Run(strings.ReplaceAll(c.values, "\n", ";"), func(t *testing.T) {
			f := filepath.Join(dir, "rules"+strconv.Itoa(i)+".yaml")
			vals := "prometheusRule:\n  enabled: true\n" + indent(c.values, "  ")
			if err := os.WriteFile(f, []byte(vals), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := render(t, []string{f})
			if err != nil {
				t.Fatal(err)
			}
			pr := decode(t, out).one(t, "PrometheusRule").(*monitoringv1.PrometheusRule)
			want, err := dashboards.RenderRules(c.opts)
			if err != nil {
				t.Fatal(err)
			}
			// Compare as generic JSON: the operator's types and the rule
			// file name the same fields.
			got := map[string]any{}
			gj, _ := json.Marshal(pr.Spec)
			_ = json.Unmarshal(gj, &got)
			wantM := map[string]any{}
			if err := yaml.Unmarshal(want, &wantM); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(normalize(got), normalize(wantM)) {
				gb, _ := yaml.Marshal(got)
				wb, _ := yaml.Marshal(wantM)
				t.Errorf("PrometheusRule spec differs from dashboards.RenderRules:\n%s", golden.Diff(string(wb), string(gb)))
			}
		})
	}
}

func indent(s, pre string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString(pre + l)
		}
	}
	return b.String()
}

// normalize drops empty values so that omitempty differences don't count.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if n := normalize(e); n != nil && n != "" {
				out[k] = n
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			out = append(out, normalize(e))
		}
		return out
	}
	return v
}

// TestDashboards: each ConfigMap holds exactly the dashboard JSON of the
// dashboards package for the chosen tracing datasource.
func TestDashboards(t *testing.T) {
	for _, tracing := range []string{"tempo", "jaeger"} {
		t.Run(tracing, func(t *testing.T) {
			out, err := render(t, nil, "--set", "grafanaDashboards.enabled=true", "--set", "grafanaDashboards.tracing="+tracing,
				"--set", "grafanaDashboards.folder=Agents")
			if err != nil {
				t.Fatal(err)
			}
			files, err := dashboards.Files(dashboards.Options{Tracing: tracing})
			if err != nil {
				t.Fatal(err)
			}
			seen := 0
			for _, c := range decode(t, out).all("ConfigMap") {
				cm := c.(*corev1.ConfigMap)
				if cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "Agents" {
					t.Errorf("ConfigMap %s labels %v annotations %v", cm.Name, cm.Labels, cm.Annotations)
				}
				for key, body := range cm.Data {
					want, ok := files[key]
					if !ok {
						t.Errorf("ConfigMap %s has unknown key %s", cm.Name, key)
						continue
					}
					if strings.TrimRight(body, "\n") != strings.TrimRight(string(want), "\n") {
						t.Errorf("ConfigMap %s key %s differs from dashboards.Files", cm.Name, key)
					}
					seen++
				}
			}
			if seen != 2 {
				t.Errorf("%d dashboards in ConfigMaps, want 2", seen)
			}
		})
	}
}

// TestOTLP: the endpoint, protocol and headers reach the sidecar, the
// headers through a Secret.
func TestOTLP(t *testing.T) {
	out, err := render(t, nil, "--set", "otlp.endpoint=http://collector:4318", "--set", "otlp.protocol=http/protobuf",
		"--set", "otlp.headers.authorization=Bearer%20x", "--set", "otlp.resourceAttributes.team=agents")
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, out)
	sec := m.one(t, "Secret").(*corev1.Secret)
	if sec.StringData["headers"] != "authorization=Bearer%20x" {
		t.Errorf("headers Secret %v", sec.StringData)
	}
	job := m.one(t, "Job").(*batchv1.Job)
	var sidecar corev1.Container
	for _, c := range job.Spec.Template.Spec.InitContainers {
		if c.Name == "cbc-otel" {
			sidecar = c
		}
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range sidecar.Env {
		env[e.Name] = e
	}
	if env["OTEL_EXPORTER_OTLP_ENDPOINT"].Value != "http://collector:4318" {
		t.Errorf("endpoint env %+v", env["OTEL_EXPORTER_OTLP_ENDPOINT"])
	}
	if h := env["OTEL_EXPORTER_OTLP_HEADERS"].ValueFrom; h == nil || h.SecretKeyRef == nil || h.SecretKeyRef.Name != sec.Name {
		t.Errorf("headers env %+v, want from Secret %s", env["OTEL_EXPORTER_OTLP_HEADERS"], sec.Name)
	}
	if !strings.Contains(env["OTEL_RESOURCE_ATTRIBUTES"].Value, "team=agents") {
		t.Errorf("resource attributes %q", env["OTEL_RESOURCE_ATTRIBUTES"].Value)
	}
	if !contains(sidecar.Args, "--otlp.protocol=http/protobuf") {
		t.Errorf("sidecar args %v lack the protocol", sidecar.Args)
	}

	// From an existing Secret: no Secret of ours.
	out, err = render(t, nil, "--set", "otlp.existingSecret.name=otlp", "--set", "otlp.existingSecret.endpointKey=endpoint", "--set", "otlp.existingSecret.headersKey=headers")
	if err != nil {
		t.Fatal(err)
	}
	m = decode(t, out)
	if len(m.all("Secret")) != 0 {
		t.Error("a Secret was rendered for an existing one")
	}
	if !strings.Contains(out, "name: otlp\n") || !strings.Contains(out, "key: headers") {
		t.Error("the existing Secret is not referenced")
	}
}

// TestWebConfig: the Secret is mounted and passed as --web.config.file.
func TestWebConfig(t *testing.T) {
	out, err := render(t, nil, "--set", "webConfig.existingSecret=web", "--set", "webConfig.tls=true")
	if err != nil {
		t.Fatal(err)
	}
	job := decode(t, out).one(t, "Job").(*batchv1.Job)
	var sidecar corev1.Container
	for _, c := range job.Spec.Template.Spec.InitContainers {
		if c.Name == "cbc-otel" {
			sidecar = c
		}
	}
	if !contains(sidecar.Args, "--web.config.file=/etc/cbc-otel/web/web-config.yml") {
		t.Errorf("args %v", sidecar.Args)
	}
	found := false
	for _, vol := range job.Spec.Template.Spec.Volumes {
		if vol.Secret != nil && vol.Secret.SecretName == "web" {
			found = true
		}
	}
	if !found {
		t.Error("web config Secret not mounted")
	}
	if sidecar.ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Error("probes not HTTPS with TLS")
	}
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
