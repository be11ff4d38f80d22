// Package local holds the configuration of the laptop quick start
// (README.md, "Quick start on a laptop"): a Prometheus that scrapes
// cbc-otel on 127.0.0.1:9478 and loads the repository's rules, a Jaeger v2
// on the loopback interface, and Grafana provisioning (datasources and the
// dashboards). It has no Go code of its own: these tests check the files
// with the real tools.
//
//   - prometheus.yml: decoded strictly; `promtool check config` (the rule
//     files found); a real Prometheus started with it has the target and
//     the rules;
//   - grafana/provisioning: decoded strictly into the shape of Grafana's
//     provisioning files; the datasources match the other two files and the
//     dashboards' datasource variables; the dashboards directory holds what
//     the dashboards package renders;
//   - jaeger.yaml: every address on 127.0.0.1; the real Jaeger v2 started
//     with it (on free ports) is healthy, serves its UI, takes a trace over
//     OTLP and returns it, and listens on nothing but the loopback.
//
// Prometheus and promtool come from PATH, Jaeger from JAEGER_BIN or
// tools/jaeger/build.sh; missing, the tests skip (CI=true: fail).
package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v2"

	"github.com/cbc-otel/cbc-otel/dashboards"
	"github.com/cbc-otel/cbc-otel/exposition"
	"github.com/cbc-otel/cbc-otel/internal/realtool"
)

const (
	promConfig        = "prometheus.yml"
	jaegerConfig      = "jaeger.yaml"
	grafanaDatasource = "grafana/provisioning/datasources/cbc-otel.yaml"
	grafanaDashboards = "grafana/provisioning/dashboards/cbc-otel.yaml"
	// repoEnv is the variable the dashboards provider's path starts with.
	repoEnv = "CBC_OTEL_REPO"
)

// decodeStrict decodes the YAML file into v: unknown fields and duplicate
// keys are errors.
func decodeStrict(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// ---- Prometheus ----

// promFile is the part of Prometheus's configuration the quick start uses;
// anything else in the file is an error.
type promFile struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName        string `yaml:"job_name"`
		ScrapeInterval string `yaml:"scrape_interval"`
		StaticConfigs  []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// promTarget is what prometheus.yml scrapes: cbc-otel's default port on
// the loopback interface.
func promTarget(t *testing.T) string {
	t.Helper()
	_, port, err := net.SplitHostPort(exposition.DefaultAddr)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// ruleFiles returns the rule files prometheus.yml names, its globs
// resolved against its directory (as Prometheus does).
func ruleFiles(t *testing.T, p promFile) []string {
	t.Helper()
	var out []string
	for _, g := range p.RuleFiles {
		m, err := filepath.Glob(filepath.Join(filepath.Dir(mustAbs(t, promConfig)), g))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	return out
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestPrometheusConfig: one job, cbc-otel, scraping 127.0.0.1:9478 every
// 5 s; the rule files are the repository's; promtool accepts the file and
// finds them.
func TestPrometheusConfig(t *testing.T) {
	var p promFile
	decodeStrict(t, promConfig, &p)
	if len(p.ScrapeConfigs) != 1 {
		t.Fatalf("%d scrape configs, want 1", len(p.ScrapeConfigs))
	}
	sc := p.ScrapeConfigs[0]
	if sc.JobName != "cbc-otel" || sc.ScrapeInterval != "5s" || len(sc.StaticConfigs) != 1 ||
		!reflect.DeepEqual(sc.StaticConfigs[0].Targets, []string{promTarget(t)}) {
		t.Errorf("scrape config %+v, want job cbc-otel, every 5s, target %s", sc, promTarget(t))
	}
	got := ruleFiles(t, p)
	want, _ := filepath.Glob(filepath.Join(repoRoot(t), "dashboards", "rules", "*.yml"))
	if len(want) == 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("rule_files %v match %v, want the repository's %v", p.RuleFiles, got, want)
	}

	bin := realtool.Find(t, "promtool", "", "apt-get install -y --no-install-recommends prometheus")
	out, err := exec.Command(bin, "check", "config", promConfig).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config %s: %v\n%s", promConfig, err, out)
	}
	// A glob matching nothing passes the check: count what it found.
	m := regexp.MustCompile(`SUCCESS: (\d+) rule files found`).FindSubmatch(out)
	if m == nil || string(m[1]) != strconv.Itoa(len(want)) {
		t.Errorf("promtool found %s rule files, want %d:\n%s", m, len(want), out)
	}
}

// TestPrometheusLoadsConfig starts the real Prometheus with prometheus.yml
// (its own web port free, on the loopback): the cbc-otel target is there
// with its interval, and the repository's rule groups are loaded.
func TestPrometheusLoadsConfig(t *testing.T) {
	bin := realtool.Find(t, "prometheus", "", "apt-get install -y --no-install-recommends prometheus")
	addr := "127.0.0.1:" + strconv.Itoa(realtool.FreePorts(t, 1)[0])
	log := &bytes.Buffer{}
	cmd := exec.Command(bin, "--config.file="+mustAbs(t, promConfig), "--web.listen-address="+addr,
		"--storage.tsdb.path="+t.TempDir(), "--log.level=warn")
	cmd.Stdout, cmd.Stderr = log, log
	start(t, cmd, "prometheus", log)
	waitHTTP(t, "http://"+addr+"/-/ready", cmd)

	// Targets appear once the scrape manager has applied the config.
	type target struct {
		Labels         map[string]string `json:"labels"`
		ScrapeURL      string            `json:"scrapeUrl"`
		ScrapeInterval string            `json:"scrapeInterval"`
	}
	var at []target
	for deadline := time.Now().Add(20 * time.Second); len(at) == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var targets struct {
			Data struct {
				ActiveTargets []target `json:"activeTargets"`
			} `json:"data"`
		}
		getJSON(t, "http://"+addr+"/api/v1/targets", &targets)
		at = targets.Data.ActiveTargets
	}
	if len(at) != 1 || at[0].Labels["job"] != "cbc-otel" || at[0].ScrapeURL != "http://"+promTarget(t)+"/metrics" || at[0].ScrapeInterval != "5s" {
		t.Errorf("active targets %+v, want job cbc-otel at http://%s/metrics every 5s", at, promTarget(t))
	}

	var rules struct {
		Data struct {
			Groups []struct {
				Name  string `json:"name"`
				File  string `json:"file"`
				Rules []any  `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	getJSON(t, "http://"+addr+"/api/v1/rules", &rules)
	want := filepath.Join(repoRoot(t), "dashboards", "rules", "cbc-otel.rules.yml")
	n := 0
	for _, g := range rules.Data.Groups {
		if g.File != want {
			t.Errorf("rule group %s from %s, want %s", g.Name, g.File, want)
		}
		n += len(g.Rules)
	}
	if len(rules.Data.Groups) == 0 || n == 0 {
		t.Errorf("Prometheus loaded no rules (%d groups)", len(rules.Data.Groups))
	}
}

// ---- Grafana ----

// grafanaDatasources is Grafana's datasource provisioning file (apiVersion
// 1), the fields of its documentation; the quick start's use no others.
type grafanaDatasources struct {
	APIVersion        int `yaml:"apiVersion"`
	DeleteDatasources []struct {
		Name  string `yaml:"name"`
		OrgID int    `yaml:"orgId"`
	} `yaml:"deleteDatasources"`
	Datasources []struct {
		Name      string `yaml:"name"`
		Type      string `yaml:"type"`
		UID       string `yaml:"uid"`
		Access    string `yaml:"access"`
		OrgID     int    `yaml:"orgId"`
		URL       string `yaml:"url"`
		User      string `yaml:"user"`
		Database  string `yaml:"database"`
		BasicAuth bool   `yaml:"basicAuth"`
		IsDefault bool   `yaml:"isDefault"`
		Version   int    `yaml:"version"`
		Editable  bool   `yaml:"editable"`
		JSONData  struct {
			TimeInterval                string `yaml:"timeInterval"`
			ExemplarTraceIDDestinations []struct {
				Name          string `yaml:"name"`
				DatasourceUID string `yaml:"datasourceUid"`
				URL           string `yaml:"url"`
			} `yaml:"exemplarTraceIdDestinations"`
		} `yaml:"jsonData"`
	} `yaml:"datasources"`
}

// grafanaProviders is Grafana's dashboard provisioning file (apiVersion 1).
type grafanaProviders struct {
	APIVersion int `yaml:"apiVersion"`
	Providers  []struct {
		Name                  string `yaml:"name"`
		OrgID                 int    `yaml:"orgId"`
		Type                  string `yaml:"type"`
		Folder                string `yaml:"folder"`
		FolderUID             string `yaml:"folderUid"`
		DisableDeletion       bool   `yaml:"disableDeletion"`
		Editable              bool   `yaml:"editable"`
		UpdateIntervalSeconds int    `yaml:"updateIntervalSeconds"`
		AllowUIUpdates        bool   `yaml:"allowUiUpdates"`
		Options               struct {
			Path                      string `yaml:"path"`
			FoldersFromFilesStructure bool   `yaml:"foldersFromFilesStructure"`
		} `yaml:"options"`
	} `yaml:"providers"`
}

// TestGrafanaProvisioning: both files decode strictly; one Prometheus (the
// default, at prometheus.yml's listen address of the README) and one
// Jaeger (at jaeger.yaml's query endpoint), exemplars linked to Jaeger;
// the dashboards directory (below $CBC_OTEL_REPO) holds exactly the
// Jaeger flavour of the dashboards package, whose datasource variables
// each find a provisioned datasource of their type and whose fixed
// datasource uids are all provisioned.
func TestGrafanaProvisioning(t *testing.T) {
	var ds grafanaDatasources
	decodeStrict(t, grafanaDatasource, &ds)
	if ds.APIVersion != 1 {
		t.Errorf("datasources apiVersion %d, want 1", ds.APIVersion)
	}
	byType := map[string]string{} // type → uid
	uids := map[string]bool{}
	defaults := 0
	jaegerQuery := jaegerAddrs(t, readJaeger(t))["extensions.jaeger_query.http.endpoint"]
	for _, d := range ds.Datasources {
		if d.UID == "" || uids[d.UID] || byType[d.Type] != "" {
			t.Errorf("datasource %s: uid %q empty or repeated, or a second %s", d.Name, d.UID, d.Type)
		}
		uids[d.UID], byType[d.Type] = true, d.UID
		if d.IsDefault {
			defaults++
		}
		if d.Access != "proxy" {
			t.Errorf("datasource %s: access %q, want proxy", d.Name, d.Access)
		}
		switch d.Type {
		case "prometheus":
			if d.URL != "http://127.0.0.1:9090" || !d.IsDefault {
				t.Errorf("Prometheus datasource %s (default %v), want http://127.0.0.1:9090, the default", d.URL, d.IsDefault)
			}
		case "jaeger":
			if d.URL != "http://"+jaegerQuery {
				t.Errorf("Jaeger datasource %s, want jaeger.yaml's query endpoint http://%s", d.URL, jaegerQuery)
			}
		default:
			t.Errorf("datasource %s of unexpected type %s", d.Name, d.Type)
		}
	}
	if defaults != 1 || byType["prometheus"] == "" || byType["jaeger"] == "" {
		t.Fatalf("datasources %+v: want one Prometheus (the default) and one Jaeger", ds.Datasources)
	}
	for _, d := range ds.Datasources {
		for _, e := range d.JSONData.ExemplarTraceIDDestinations {
			if e.DatasourceUID != byType["jaeger"] || e.Name != "trace_id" {
				t.Errorf("%s: exemplar destination %+v, want trace_id → %s", d.Name, e, byType["jaeger"])
			}
		}
	}

	var dp grafanaProviders
	decodeStrict(t, grafanaDashboards, &dp)
	if dp.APIVersion != 1 || len(dp.Providers) != 1 || dp.Providers[0].Type != "file" {
		t.Fatalf("dashboard providers %+v, want one of type file", dp)
	}
	path := dp.Providers[0].Options.Path
	rel, ok := strings.CutPrefix(path, "${"+repoEnv+"}/")
	if !ok {
		t.Fatalf("dashboards path %q does not start with ${%s}/", path, repoEnv)
	}
	dir := filepath.Join(repoRoot(t), filepath.FromSlash(rel))
	files, err := dashboards.Files(dashboards.Options{Tracing: "jaeger"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for _, name := range []string{dashboards.OverviewFile, dashboards.HealthFile} {
		want[name] = files[name]
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if wantNames := slices.Sorted(maps.Keys(want)); !reflect.DeepEqual(names, wantNames) {
		t.Fatalf("%s holds %v, want %v", dir, names, wantNames)
	}
	for name, body := range want {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, body) {
			t.Errorf("%s differs from dashboards.Files(jaeger) (go test ./deploy/helm -update)", name)
		}
		checkDashboardDatasources(t, name, b, byType, uids)
	}
}

// checkDashboardDatasources: every datasource variable of the dashboard
// finds a provisioned datasource of its type, and every datasource uid
// that is not a variable is provisioned.
func checkDashboardDatasources(t *testing.T, name string, body []byte, byType map[string]string, uids map[string]bool) {
	t.Helper()
	var d struct {
		Templating struct {
			List []struct {
				Type  string `json:"type"`
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	vars := 0
	for _, v := range d.Templating.List {
		if v.Type != "datasource" {
			continue
		}
		vars++
		if q, _ := v.Query.(string); byType[q] == "" {
			t.Errorf("%s: variable $%s wants a %v datasource; none is provisioned", name, v.Name, v.Query)
		}
	}
	if vars == 0 {
		t.Errorf("%s: no datasource variables", name)
	}
	for _, m := range regexp.MustCompile(`"uid":\s*"([^"]*)"`).FindAllSubmatch(body, -1) {
		uid := string(m[1])
		if strings.HasPrefix(uid, "$") || strings.HasPrefix(uid, "cbc-") || uids[uid] {
			continue // a variable, a dashboard's own uid, a provisioned one
		}
		t.Errorf("%s: datasource uid %q is not provisioned", name, uid)
	}
}

// ---- Jaeger ----

func readJaeger(t *testing.T) map[any]any {
	t.Helper()
	var cfg map[any]any
	decodeStrict(t, jaegerConfig, &cfg)
	return cfg
}

// jaegerAddrs returns every listen address of the config, by its YAML path:
// the "endpoint" strings, and "host" with "port" of a telemetry reader.
func jaegerAddrs(t *testing.T, cfg map[any]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[any]any:
			if h, ok := x["host"].(string); ok {
				out[path+".host:port"] = net.JoinHostPort(h, fmt.Sprint(x["port"]))
			}
			for k, e := range x {
				key := strings.TrimPrefix(path+"."+fmt.Sprint(k), ".")
				if s, ok := e.(string); ok && k == "endpoint" {
					out[key] = s
				}
				walk(key, e)
			}
		case []any:
			for i, e := range x {
				walk(path+"["+strconv.Itoa(i)+"]", e)
			}
		}
	}
	walk("", cfg)
	return out
}

// TestJaegerConfig: every address of jaeger.yaml is on 127.0.0.1 and the
// quick start's ports; the real Jaeger started with it (its ports moved to
// free ones, nothing else changed) is healthy, serves the UI, stores a
// trace sent over OTLP/HTTP and returns it, and listens on the loopback
// only.
func TestJaegerConfig(t *testing.T) {
	cfg := readJaeger(t)
	addrs := jaegerAddrs(t, cfg)
	want := map[string]string{
		"receivers.otlp.protocols.grpc.endpoint":                                  "127.0.0.1:4317",
		"receivers.otlp.protocols.http.endpoint":                                  "127.0.0.1:4318",
		"extensions.jaeger_query.http.endpoint":                                   "127.0.0.1:16686",
		"extensions.jaeger_query.grpc.endpoint":                                   "127.0.0.1:16685",
		"extensions.healthcheckv2.http.endpoint":                                  "127.0.0.1:13133",
		"service.telemetry.metrics.readers[0].pull.exporter.prometheus.host:port": "127.0.0.1:18888",
	}
	if !reflect.DeepEqual(addrs, want) {
		t.Fatalf("listen addresses\n%v\nwant\n%v", addrs, want)
	}

	bin := realtool.Built(t, "jaeger", "JAEGER_BIN", "set JAEGER_BIN to a Jaeger v2 built by tools/jaeger/build.sh")
	// The same file with free ports (and without its comments, which
	// name the addresses too).
	text, err := os.ReadFile(jaegerConfig)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(text), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			lines = append(lines, l)
		}
	}
	s := strings.Join(lines, "\n")
	ports := realtool.FreePorts(t, len(want))
	moved := map[string]string{} // YAML path → new address
	i := 0
	for _, path := range slices.Sorted(maps.Keys(want)) {
		_, oldPort, _ := net.SplitHostPort(want[path])
		newPort := strconv.Itoa(ports[i])
		i++
		old, repl := want[path], "127.0.0.1:"+newPort
		if strings.HasSuffix(path, ".host:port") {
			old, repl = "port: "+oldPort, "port: "+newPort
		}
		if strings.Count(s, old) != 1 {
			t.Fatalf("%q occurs %d times in %s", old, strings.Count(s, old), jaegerConfig)
		}
		s = strings.Replace(s, old, repl, 1)
		moved[path] = "127.0.0.1:" + newPort
	}
	cfgFile := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfgFile, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	log := &bytes.Buffer{}
	cmd := exec.Command(bin, "--config="+cfgFile)
	cmd.Stdout, cmd.Stderr = log, log
	start(t, cmd, "jaeger", log)
	waitHTTP(t, "http://"+moved["extensions.healthcheckv2.http.endpoint"]+"/status", cmd)
	query := "http://" + moved["extensions.jaeger_query.http.endpoint"]

	// The UI.
	resp, err := http.Get(query + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(bytes.ToLower(page), []byte("<html")) {
		t.Errorf("GET %s/: %s, %.200q", query, resp.Status, page)
	}

	// A trace over OTLP/HTTP (JSON), read back from the query API.
	traceID := fmt.Sprintf("%032x", time.Now().UnixNano())
	now := time.Now()
	body := fmt.Sprintf(`{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"cbc-otel"}}]},`+
		`"scopeSpans":[{"scope":{"name":"deploy/local"},"spans":[{"traceId":%q,"spanId":"00f067aa0ba902b7","name":"workflow quickstart",`+
		`"kind":1,"startTimeUnixNano":"%d","endTimeUnixNano":"%d"}]}]}]}`, traceID, now.Add(-time.Second).UnixNano(), now.UnixNano())
	resp, err = http.Post("http://"+moved["receivers.otlp.protocols.http.endpoint"]+"/v1/traces", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("OTLP/HTTP export: %s", resp.Status)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var tr struct {
			Data []struct {
				TraceID string `json:"traceID"`
				Spans   []struct {
					OperationName string `json:"operationName"`
					ProcessID     string `json:"processID"`
				} `json:"spans"`
				Processes map[string]struct {
					ServiceName string `json:"serviceName"`
				} `json:"processes"`
			} `json:"data"`
		}
		r, err := http.Get(query + "/api/traces/" + traceID)
		if err == nil {
			if r.StatusCode == http.StatusOK {
				err = json.NewDecoder(r.Body).Decode(&tr)
			}
			r.Body.Close()
		}
		if err == nil && len(tr.Data) == 1 && len(tr.Data[0].Spans) == 1 {
			sp := tr.Data[0].Spans[0]
			if sp.OperationName != "workflow quickstart" || tr.Data[0].Processes[sp.ProcessID].ServiceName != "cbc-otel" {
				t.Errorf("trace %+v", tr.Data[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s not found in Jaeger after 20s (last error %v)", traceID, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Listening: the configured addresses, all on the loopback, nothing else.
	wantPorts := map[int]bool{}
	for _, a := range moved {
		_, p, _ := net.SplitHostPort(a)
		n, _ := strconv.Atoi(p)
		wantPorts[n] = true
	}
	got := listening(t, cmd.Process.Pid)
	gotPorts := map[int]bool{}
	for _, l := range got {
		if !l.ip.IsLoopback() {
			t.Errorf("jaeger listens on %s:%d, not the loopback", l.ip, l.port)
		}
		gotPorts[l.port] = true
	}
	if !reflect.DeepEqual(gotPorts, wantPorts) {
		t.Errorf("jaeger listens on ports %v, want exactly the configured %v", slices.Sorted(maps.Keys(gotPorts)), slices.Sorted(maps.Keys(wantPorts)))
	}
}

type listener struct {
	ip   net.IP
	port int
}

// listening returns the TCP sockets process pid listens on, from /proc.
func listening(t *testing.T, pid int) []listener {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []listener
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
				continue
			}
			hexIP, hexPort, _ := strings.Cut(fields[1], ":")
			raw, err := hex.DecodeString(hexIP)
			port, err2 := strconv.ParseUint(hexPort, 16, 16)
			if err != nil || err2 != nil || len(raw)%4 != 0 {
				t.Fatalf("/proc/net/%s: bad address %q", table, fields[1])
			}
			// Each 32-bit word is in host (little-endian) order.
			for i := 0; i < len(raw); i += 4 {
				raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
			}
			out = append(out, listener{ip: net.IP(raw), port: int(port)})
		}
		f.Close()
	}
	if len(out) == 0 {
		t.Fatalf("process %d listens on nothing", pid)
	}
	return out
}

// ---- helpers ----

// start starts cmd and kills it when the test ends, showing its log then
// if the test failed.
func start(t *testing.T, cmd *exec.Cmd, name string, log *bytes.Buffer) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			b := log.Bytes()
			if len(b) > 4<<10 {
				b = b[len(b)-4<<10:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
	})
}

// waitHTTP waits up to a minute for url to answer 200, failing at once if
// cmd exits.
func waitHTTP(t *testing.T, url string, cmd *exec.Cmd) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if cmd.ProcessState != nil || processGone(cmd.Process.Pid) {
			t.Fatalf("%s exited while starting", cmd.Path)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s not answering 200 after a minute", url)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// processGone reports whether pid has exited (a zombie counts as gone).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z")
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
