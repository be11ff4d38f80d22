package helm_test

// SDK mode (workload.sdk, issue #19): an app that starts the CLI through an
// agent SDK runs unwrapped, and the SDK is pointed at a wrapper script that
// the chart ships in a ConfigMap. These tests check the rendering, then run
// the rendered script itself: against a fake cbc-otel that records its
// argv, and against the real one over a fake CLI.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/cbc-otel/cbc-otel/internal/golden"
)

// sdkValues is workload.sdk.
type sdkValues struct {
	Enabled bool     `json:"enabled"`
	RealCLI []string `json:"realCLI"`
	EnvName string   `json:"envName"`
}

// sdkConfigMap is the rendered ConfigMap holding the wrapper script.
type sdkConfigMap struct {
	name, key, script string
}

const (
	sdkExample  = "sdk-server.yaml"
	sdkTemplate = "cbc-otel/templates/sdk-cli.yaml"
)

// sdkArgs are arguments an SDK might pass, and then some that only survive
// a script that passes "$@" quoted: spaces, quotes, globs, $, an empty
// argument, a newline, a lone --.
var sdkArgs = []string{
	"--output-format", "stream-json", "--verbose", "--input-format", "stream-json",
	"--append-system-prompt", "two  spaces and\ta tab",
	"it's", `"double"`, "$HOME", "*", "", "line\nbreak", "--", "-x",
}

// shq quotes s for sh, the way the chart's cbc-otel.shq does.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// sdkConfigMapOf returns the wrapper script's ConfigMap of an SDK-mode
// rendering; without SDK mode it asserts there is none and returns zero.
func sdkConfigMapOf(t *testing.T, m manifest, v values) sdkConfigMap {
	t.Helper()
	var cms []*corev1.ConfigMap
	for _, d := range m.docs {
		if d.source == sdkTemplate {
			cm, ok := d.obj.(*corev1.ConfigMap)
			if !ok {
				t.Fatalf("%s rendered a %s", sdkTemplate, d.kind)
			}
			cms = append(cms, cm)
		}
	}
	if !v.Workload.SDK.Enabled {
		if len(cms) != 0 {
			t.Errorf("workload.sdk.enabled is false, yet %s rendered %d ConfigMaps", sdkTemplate, len(cms))
		}
		return sdkConfigMap{}
	}
	if len(cms) != 1 || len(cms[0].Data) != 1 {
		t.Fatalf("SDK mode: want one ConfigMap with one key from %s, got %+v", sdkTemplate, cms)
	}
	for k, s := range cms[0].Data {
		return sdkConfigMap{name: cms[0].Name, key: k, script: s}
	}
	panic("unreachable")
}

// checkSDKContainer asserts the SDK-mode wiring of the app container and
// returns the flags the script passes to `cbc-otel run`:
//   - the app's command and args are its own, the wrapper nowhere in them;
//   - the app's environment has envName = the script's path, once;
//   - that path is the ConfigMap's script, mounted read-only, executable;
//   - the script, run, execs wrapper with run, known flags, --, the real
//     CLI and exactly the arguments it was given.
func checkSDKContainer(t *testing.T, spec corev1.PodSpec, cli corev1.Container, wrapper string, cm sdkConfigMap, v values, runFlags binFlags) map[string]string {
	t.Helper()
	sdk := v.Workload.SDK
	if !reflect.DeepEqual(cli.Command, v.Workload.Command) {
		t.Errorf("SDK mode: the app's command is %v, want its own %v (not wrapped)", cli.Command, v.Workload.Command)
	}
	for _, a := range append(slices.Clone(cli.Command), cli.Args...) {
		if strings.Contains(a, "cbc-otel") {
			t.Errorf("SDK mode: the app's command line %v %v names cbc-otel: the app itself is wrapped", cli.Command, cli.Args)
		}
	}

	var path string
	n := 0
	for _, e := range cli.Env {
		if e.Name == sdk.EnvName {
			n++
			path = e.Value
			if e.ValueFrom != nil {
				t.Errorf("%s comes from %+v, want a plain value", e.Name, e.ValueFrom)
			}
		}
	}
	if n != 1 || !filepath.IsAbs(path) {
		t.Fatalf("SDK mode: the app's env has %s %d times (%q), want once, an absolute path", sdk.EnvName, n, path)
	}

	// The path is the script: a read-only ConfigMap mount of its directory.
	var mount *corev1.VolumeMount
	for i, m := range cli.VolumeMounts {
		if m.MountPath == filepath.Dir(path) {
			mount = &cli.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly || mount.SubPath != "" {
		t.Fatalf("no read-only mount of %s in the app container: %+v", filepath.Dir(path), cli.VolumeMounts)
	}
	var vol *corev1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == mount.Name {
			vol = &spec.Volumes[i]
		}
	}
	if vol == nil || vol.ConfigMap == nil || vol.ConfigMap.Name != cm.name {
		t.Fatalf("volume %s is not ConfigMap %s: %+v", mount.Name, cm.name, vol)
	}
	var item *corev1.KeyToPath
	for i, it := range vol.ConfigMap.Items {
		if it.Path == filepath.Base(path) {
			item = &vol.ConfigMap.Items[i]
		}
	}
	if item == nil || item.Key != cm.key {
		t.Fatalf("ConfigMap volume %+v does not put key %s at %s", vol.ConfigMap, cm.key, filepath.Base(path))
	}
	mode := vol.ConfigMap.DefaultMode
	if item.Mode != nil {
		mode = item.Mode
	}
	// The container's UID does not own the file (root does; fsGroup may
	// be the group): only the "other" bits are sure to apply.
	if mode == nil || *mode&0o005 != 0o005 || *mode&0o222 != 0 {
		t.Errorf("the script's mode %v: want readable and executable by anyone, writable by none", mode)
	}

	// The script: what it execs, given the arguments an SDK passes.
	argv, exit := runSDKScript(t, cm.script, wrapper, "", true, sdkArgs)
	if exit != 42 {
		t.Errorf("the script exited %d, want the wrapper's 42", exit)
	}
	sep := slices.Index(argv, "--")
	if len(argv) < 2 || argv[0] != "run" || sep < 0 {
		t.Fatalf("the script runs %s %q, want run [flags] -- CLI args", wrapper, argv)
	}
	flags := checkFlags(t, "the SDK script's cbc-otel run", argv[1:sep], runFlags)
	want := append(slices.Clone(sdk.RealCLI), sdkArgs...)
	if got := argv[sep+1:]; !reflect.DeepEqual(got, want) {
		t.Errorf("the script runs %s run ... -- %q\nwant                          -- %q", wrapper, got, want)
	}
	return flags
}

// runSDKScript runs script with args, its cbc-otel (the single word
// shq(wrapper) in it) replaced by a fake that records its argv and exits
// 42, and returns that argv and the exit status. spool, when not "",
// replaces --spool.dir's value. direct runs the file itself (its
// #! line: the Claude Agent SDK spawns the path), else `/bin/sh FILE`
// (the CodeBuddy agent SDK with executable: "/bin/sh"). It asserts the
// fake ran as the script's own process: the script execs it.
func runSDKScript(t *testing.T, script, wrapper, spool string, direct bool, args []string) (argv []string, exit int) {
	t.Helper()
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake cbc-otel") // a space: the path must be quoted too
	out := filepath.Join(dir, "argv")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nprintf '%s\\0' \"$$\" \"$@\" > \"$CBC_FAKE_OUT\"\nexit 42\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script = replaceWord(t, script, wrapper, fake)
	if spool != "" {
		script = replaceWord(t, script, "--spool.dir=/cbc-otel/spool", "--spool.dir="+spool)
	}
	file := filepath.Join(dir, "cli")
	if err := os.WriteFile(file, []byte(script), 0o555); err != nil {
		t.Fatal(err)
	}
	name, cargs := file, args
	if !direct {
		name, cargs = "/bin/sh", append([]string{file}, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, cargs...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "CBC_FAKE_OUT=" + out}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		exit = ee.ExitCode()
	default:
		t.Fatalf("running the script: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the fake cbc-otel did not run (%v); stderr: %s\nscript:\n%s", err, stderr.String(), script)
	}
	fields := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	if pid, _ := strconv.Atoi(fields[0]); pid != cmd.Process.Pid {
		t.Errorf("the fake cbc-otel ran as pid %s, the script as %d: the script does not exec it", fields[0], cmd.Process.Pid)
	}
	return fields[1:], exit
}

// replaceWord replaces the sh word shq(old) of script, which must occur
// exactly once, with shq(new).
func replaceWord(t *testing.T, script, old, new string) string {
	t.Helper()
	if n := strings.Count(script, shq(old)); n != 1 {
		t.Fatalf("the script has the word %s %d times, want once:\n%s", shq(old), n, script)
	}
	return strings.Replace(script, shq(old), shq(new), 1)
}

// TestSDKServer: the SDK example renders a Deployment whose app container
// runs the app's own command, unwrapped, and gets the wrapper script's
// path; the script is the one the README shows; the rendering is golden.
func TestSDKServer(t *testing.T) {
	ex := filepath.Join(chartDir, "examples", sdkExample)
	out, err := render(t, []string{ex})
	if err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, filepath.Join("testdata", strings.TrimSuffix(sdkExample, ".yaml")+".golden.yaml"), []byte(out))
	m := decode(t, out)
	v := loadValues(t, ex)
	if !v.Workload.SDK.Enabled || v.Workload.Kind != "Deployment" {
		t.Fatalf("%s is not an SDK-mode Deployment: %+v", sdkExample, v.Workload)
	}
	// The whole wiring (checkManifest runs checkSDKContainer).
	checkManifest(t, m, v, subcommandFlags(t, "serve"), subcommandFlags(t, "run"))

	d := m.one(t, "Deployment").(*appsv1.Deployment)
	var app corev1.Container
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "cli" {
			app = c
		}
	}
	if want := []string{"node", "/app/server.js"}; !reflect.DeepEqual(app.Command, want) || len(app.Args) != 0 {
		t.Errorf("the app runs %v %v, want %v", app.Command, app.Args, want)
	}
	env := map[string]string{}
	for _, e := range app.Env {
		env[e.Name] = e.Value
	}
	if env["CBC_OTEL_CLI_PATH"] != "/cbc-otel/sdk/cli" {
		t.Errorf("CBC_OTEL_CLI_PATH=%q, want /cbc-otel/sdk/cli", env["CBC_OTEL_CLI_PATH"])
	}
	cm := sdkConfigMapOf(t, m, v)
	wantExec := `exec '/cbc-otel/bin/cbc-otel' 'run' '--spool.dir=/cbc-otel/spool' '--log.level=warn' '--child.kill-timeout=30s' '--' ` +
		`'/app/node_modules/@anthropic-ai/claude-agent-sdk-linux-x64/claude' "$@"`
	lines := strings.Split(strings.TrimSuffix(cm.script, "\n"), "\n")
	if lines[0] != "#!/bin/sh" || lines[len(lines)-1] != wantExec {
		t.Errorf("script:\n%s\nwant #!/bin/sh first and last\n%s", cm.script, wantExec)
	}
	// A changed script rolls the Deployment.
	if d.Spec.Template.Annotations["checksum/sdk-cli"] == "" {
		t.Error("no checksum/sdk-cli annotation on the pod template")
	}
}

// TestSDKScriptArgv runs the rendered script with /bin/sh, both ways the
// SDKs start it, against a fake cbc-otel: the real CLI (a path with a
// space and a quote, and a leading node) and every argument arrive as
// they were, in order.
func TestSDKScriptArgv(t *testing.T) {
	realCLI := []string{"/usr/bin/env", "node", "/app/it's here/cli.js"}
	out, err := render(t, []string{filepath.Join(chartDir, "examples", sdkExample)},
		"--set-json", `workload.sdk.realCLI=["/usr/bin/env","node","/app/it's here/cli.js"]`,
		"--set-json", `workload.wrapper.args=["--child.kill-timeout=30s","--summary.waterfall"]`)
	if err != nil {
		t.Fatal(err)
	}
	v := values{}
	v.Workload.SDK.Enabled = true
	cm := sdkConfigMapOf(t, decode(t, out), v)
	for _, direct := range []bool{true, false} {
		for _, args := range [][]string{nil, {""}, sdkArgs} {
			t.Run(map[bool]string{true: "exec", false: "sh"}[direct]+"/"+strconv.Itoa(len(args)), func(t *testing.T) {
				argv, exit := runSDKScript(t, cm.script, "/cbc-otel/bin/cbc-otel", "", direct, args)
				want := append([]string{"run", "--spool.dir=/cbc-otel/spool", "--log.level=warn", "--child.kill-timeout=30s", "--summary.waterfall", "--"}, realCLI...)
				want = append(want, args...)
				if !reflect.DeepEqual(argv, want) {
					t.Errorf("argv\n%q\nwant\n%q", argv, want)
				}
				if exit != 42 {
					t.Errorf("exit %d, want the wrapper's 42", exit)
				}
			})
		}
	}
}

// TestSDKScriptRealWrapper runs the rendered script with the real
// cbc-otel over a fake CLI: the CLI gets the SDK's arguments, its stdout
// and exit status come back unchanged, and a finished spool file is left
// for the sidecar.
func TestSDKScriptRealWrapper(t *testing.T) {
	_, cbc := tools(t)
	dir := t.TempDir()
	cli := filepath.Join(dir, "claude")
	if err := os.WriteFile(cli, []byte("#!/bin/sh\nprintf '%s\\n' \"$@\"\ncat\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := render(t, []string{filepath.Join(chartDir, "examples", sdkExample)}, "--set-json", `workload.sdk.realCLI=["`+cli+`"]`)
	if err != nil {
		t.Fatal(err)
	}
	v := values{}
	v.Workload.SDK.Enabled = true
	script := sdkConfigMapOf(t, decode(t, out), v).script
	spool := filepath.Join(dir, "spool")
	if err := os.Mkdir(spool, 0o755); err != nil {
		t.Fatal(err)
	}
	script = replaceWord(t, script, "/cbc-otel/bin/cbc-otel", cbc)
	script = replaceWord(t, script, "--spool.dir=/cbc-otel/spool", "--spool.dir="+spool)
	file := filepath.Join(dir, "cli")
	if err := os.WriteFile(file, []byte(script), 0o555); err != nil {
		t.Fatal(err)
	}
	args := []string{"--output-format", "stream-json", "a  b", "it's"}
	stdin := `{"type":"user","message":{"role":"user","content":"hi"}}` + "\n"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, file, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exit: %v, want the CLI's status 3; stderr:\n%s", err, stderr.String())
	}
	if want := strings.Join(args, "\n") + "\n" + stdin; stdout.String() != want {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
	done, _ := filepath.Glob(filepath.Join(spool, "*.cbcspool"))
	if len(done) != 1 {
		entries, _ := os.ReadDir(spool)
		t.Errorf("spool directory holds %v, want one finished *.cbcspool file", entries)
	}
}

// TestSDKSchemaRejects: bad workload.sdk values are refused.
func TestSDKSchemaRejects(t *testing.T) {
	cases := []struct{ name, values, wantErr string }{
		{"enabled without realCLI", "workload:\n  sdk:\n    enabled: true\n", "workload.sdk.enabled needs workload.sdk.realCLI"},
		{"realCLI as a string", "workload:\n  sdk:\n    realCLI: /app/claude\n", "/workload/sdk/realCLI"},
		{"empty realCLI word", "workload:\n  sdk:\n    realCLI: [\"\"]\n", "/workload/sdk/realCLI"},
		{"bad envName", "workload:\n  sdk:\n    envName: CLI-PATH\n", "/workload/sdk/envName"},
		{"unknown key", "workload:\n  sdk:\n    cli: [claude]\n", "cli"},
	}
	dir := t.TempDir()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(dir, strconv.Itoa(i)+".yaml")
			if err := os.WriteFile(f, []byte(c.values), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := render(t, []string{f}); err == nil {
				t.Fatalf("accepted:\n%s", c.values)
			} else if !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("error does not mention %q:\n%v", c.wantErr, err)
			}
		})
	}
}
