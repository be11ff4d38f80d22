package helm_test

// TestPodman runs the image `make image` builds in a real container runtime
// (Debian's podman with runc, which .ci/run installs) and plays the chart's
// pod with it: the image's commands against the host binary's output, then
// the rendered Job's pod with `podman kube play`, the sidecar killed and
// restarted mid-stream, and the pod ended the way a Job ends.
//
// The runtime is configured here and only here: its own containers.conf
// (runc, cgroupfs, no default ulimits: this VM cannot raise them; events to
// a file) and storage (vfs) under t.TempDir(), passed by CONTAINERS_CONF,
// CONTAINERS_STORAGE_CONF and podman's global flags; the commands that
// copy an image run with a tmpfs over /var/lib (see copying). Nothing under
// /etc, /var/lib/containers or /run/libpod is used. Rootful: .ci/run runs
// as root.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/cbc-otel/cbc-otel/follow"
	"github.com/cbc-otel/cbc-otel/internal/promfam"
	"github.com/cbc-otel/cbc-otel/internal/realtool"
	"github.com/cbc-otel/cbc-otel/internal/testbin"
)

// podmanHint says how to get the runtime.
const podmanHint = "apt-get install podman runc slirp4netns catatonit, as .ci/run does"

// podman runs the podman binary against the test's own configuration.
type podman struct {
	bin, unshare string
	env          []string
	global       []string
}

// newPodman writes the runtime's configuration under dir and returns the
// runtime, after a `podman info` proving it starts.
func newPodman(t *testing.T, dir string) *podman {
	t.Helper()
	bin := realtool.Find(t, "podman", "", podmanHint)
	for _, helper := range []string{"runc", "slirp4netns", "catatonit"} {
		realtool.Find(t, helper, "", podmanHint)
	}
	unshare := realtool.Find(t, "unshare", "", "apt-get install util-linux")
	if os.Geteuid() != 0 {
		realtool.Missing(t, "podman", "the test drives rootful podman (its pod network is slirp4netns, its storage vfs under a temp dir): run it as root, as .ci/run does")
	}
	for _, d := range []string{"root", "runroot", "tmp", "networks"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// default_ulimits = []: podman's default raises RLIMIT_NOFILE, which
	// this VM refuses; runc and cgroupfs: crun refuses the VM's hybrid
	// cgroup layout and there is no systemd; events to a file, not journald.
	conf := fmt.Sprintf(`[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = %q
tmp_dir = %q
[network]
network_config_dir = %q
`, filepath.Join(dir, "events.log"), filepath.Join(dir, "tmp"), filepath.Join(dir, "networks"))
	storage := fmt.Sprintf("[storage]\ndriver = \"vfs\"\nrunroot = %q\ngraphroot = %q\n", filepath.Join(dir, "runroot"), filepath.Join(dir, "root"))
	for f, s := range map[string]string{"containers.conf": conf, "storage.conf": storage} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := &podman{
		bin: bin, unshare: unshare,
		env: append(os.Environ(), "CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"),
			"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf")),
		// The same again as flags: conmon's exit command (podman container
		// cleanup) is given these, whatever its environment.
		global: []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "runroot"),
			"--storage-driver", "vfs", "--tmpdir", filepath.Join(dir, "tmp"), "--runtime", "runc",
			"--cgroup-manager", "cgroupfs", "--events-backend", "file"},
	}
	t.Cleanup(func() {
		// Before t.TempDir's removal (cleanups run last in, first out):
		// nothing of the test may keep running or stay mounted.
		for _, args := range [][]string{{"pod", "rm", "-a", "-f", "-t", "0"}, {"rm", "-a", "-f", "-t", "0"}} {
			if out, err := p.cmd(context.Background(), args...).CombinedOutput(); err != nil {
				t.Errorf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	})
	info := p.run(t, "info", "--format", "{{.Version.Version}} {{.Host.OCIRuntime.Name}} {{.Host.OCIRuntime.Version}} {{.Host.CgroupsVersion}} {{.Store.GraphDriverName}}")
	t.Logf("podman %s", strings.Join(strings.Fields(info), " "))
	return p
}

// cmd is podman with args, in the test's configuration.
func (p *podman) cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, p.bin, append(slices.Clone(p.global), args...)...)
	cmd.Env = p.env
	return cmd
}

// copying is cmd for the commands that copy an image (load; kube play,
// which builds the pod's pause image): run as root, podman 4.3 keeps
// c/image's blob-info cache in /var/lib/containers/cache whatever --root
// says, so these run in a private mount namespace with a tmpfs over
// /var/lib, where the cache is made and forgotten. Not every command: the
// pod's network namespace, bound under /run/netns when the pod starts,
// must be seen by the commands that follow.
func (p *podman) copying(ctx context.Context, args ...string) *exec.Cmd {
	const sh = `mount -t tmpfs -o size=16m,mode=0755 tmpfs /var/lib && exec "$0" "$@"`
	argv := append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", sh, p.bin}, p.global...)
	cmd := exec.CommandContext(ctx, p.unshare, append(argv, args...)...)
	cmd.Env = p.env
	return cmd
}

// run runs podman and returns its stdout; a failure fails the test.
func (p *podman) run(t *testing.T, args ...string) string {
	t.Helper()
	return runCmd(t, p.cmd, args...)
}

// runCopying is run for the commands that copy an image (see copying).
func (p *podman) runCopying(t *testing.T, args ...string) string {
	t.Helper()
	return runCmd(t, p.copying, args...)
}

// runCmd runs the command with a deadline and returns its stdout; a
// failure fails the test, with stderr.
func runCmd(t *testing.T, mk func(context.Context, ...string) *exec.Cmd, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := mk(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("podman %s: %v\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String()
}

// TestPodman loads the image once and shares it: the image's commands
// (version, demo, replay) compared with the host binary's, then the pod.
func TestPodman(t *testing.T) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skipf("podman runs the linux image of this machine's architecture: not on %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	start := time.Now()
	work := t.TempDir()
	pm := newPodman(t, filepath.Join(work, "podman"))

	// The image, built as `make image` builds it (tools/image), and the
	// host binary built the way the tool builds the image's: same flags,
	// same version, so their output can be compared byte for byte.
	dir := imageTool(t)
	tool := filepath.Join(work, "image-tool")
	build := exec.Command("go", "build", "-o", tool, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building tools/image: %v\n%s", err, out)
	}
	tmp := filepath.Join(work, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	img := buildImage(t, tool, filepath.Join(work, "image.tar"), tmp)
	host, err := testbin.Build(t.Context(), filepath.Join(work, "cbc-otel"), testbin.Dir(repoRoot(t)), testbin.Trimpath(), testbin.NoVCS(),
		testbin.LDFlags("-s -w -X main.version="+imageVersion), testbin.Env("CGO_ENABLED=0"))
	if err != nil {
		t.Fatalf("building the host binary: %v", err)
	}
	built := time.Since(start)

	ref := chartImageRef(t)
	pm.runCopying(t, "load", "-q", "-i", img.file)
	// podman stores the layer again (its manifest digest is its own): the
	// image ID, the config's sha256, is the tarball's.
	config := strings.TrimSuffix(strings.TrimPrefix(readArchive(t, img.file).manifest[0].Config, "sha256:"), ".json")
	id := strings.TrimSpace(pm.run(t, "image", "inspect", "--format", "{{.Id}} {{.User}}", ref))
	if want := config + " 65532:65532"; id != want {
		t.Fatalf("podman image inspect %s: %q, want %q (the tarball's config, user 65532)", ref, id, want)
	}
	t.Logf("built image and host binary in %v, loaded %s in %v", built.Round(time.Millisecond), img.digest, (time.Since(start) - built).Round(time.Millisecond))

	t.Run("image", func(t *testing.T) { podmanImage(t, pm, ref, host) })
	t.Run("pod", func(t *testing.T) { podmanPod(t, pm, filepath.Join(work, "pod"), host) })
	t.Logf("TestPodman took %v", time.Since(start).Round(time.Millisecond))
}

// podmanImage runs the image's commands in containers with no network, as
// the image's user (no --user), read-only and without capabilities, and
// compares their stdout with the host binary's.
func podmanImage(t *testing.T, pm *podman, ref, host string) {
	corpus, err := filepath.Abs(filepath.Join(repoRoot(t), "testdata", "corpus", "claude-code-2.1.328"))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := filepath.Glob(filepath.Join(corpus, "*.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range recs {
		if b := filepath.Base(r); !strings.HasSuffix(b, ".expected.ndjson") && !strings.HasSuffix(b, ".stdin.ndjson") {
			names = append(names, b)
		}
	}
	if len(names) < 3 {
		t.Fatalf("recordings in %s: %q", corpus, names)
	}
	// The demo at --speed 0 without "stopped": that scenario waits its
	// scripted time (times --speed: none) for an interrupt, so at 0 the
	// interrupt races the end; the other four give the same runs every time.
	demo := []string{"demo", "--speed", "0", "--json", "--scenarios", "completed,failed,cached,mixed"}
	for _, tc := range []struct {
		name string
		args []string
		norm func(t *testing.T, out string) string
	}{
		{"version", []string{"version"}, nil},
		{"demo", demo, normalizeDemo},
		{"replay", append([]string{"replay"}, names...), nil},
		{"replay --json", append([]string{"replay", "--json"}, names...), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(host, tc.args...)
			cmd.Dir = corpus
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			want, err := cmd.Output()
			if err != nil {
				t.Fatalf("host cbc-otel %s: %v\n%s", strings.Join(tc.args, " "), err, stderr.String())
			}
			got := pm.run(t, append([]string{"run", "--rm", "--network", "none", "--read-only", "--cap-drop", "all",
				"--security-opt", "no-new-privileges", "-v", corpus + ":/recordings:ro", "-w", "/recordings", ref}, tc.args...)...)
			w, g := string(want), got
			if tc.norm != nil {
				w, g = tc.norm(t, w), tc.norm(t, g)
			}
			if g != w || len(w) == 0 {
				t.Errorf("cbc-otel %s: the container's stdout differs from the host binary's\ncontainer:\n%s\nhost:\n%s", strings.Join(tc.args, " "), g, w)
			}
		})
	}
}

// normalizeDemo drops what the wall clock decides from demo --json lines:
// start, end and durations of runs, phases and agents.
func normalizeDemo(t *testing.T, out string) string {
	t.Helper()
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("demo --json line %q: %v", line, err)
		}
		dropClock(v)
		n, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(n)
		b.WriteByte('\n')
	}
	return b.String()
}

func dropClock(v map[string]any) {
	// The stats line's bytes too: the stream carries the clock's durations,
	// whose digits vary.
	if v["kind"] == "stats" {
		delete(v, "bytes")
	}
	for _, k := range []string{"start", "end", "duration_ms", "cli_duration_ms"} {
		delete(v, k)
	}
	for _, k := range []string{"phases", "agents"} {
		list, _ := v[k].([]any)
		for _, e := range list {
			if m, ok := e.(map[string]any); ok {
				dropClock(m)
			}
		}
	}
}

// What the pod is played with: the defaults (the simulator as the CLI in a
// Job) plus the simulator's ground truth in the CLI's /tmp.
const podExpect = "/tmp/expect.ndjson"

// podmanPod renders the chart's default Job, plays its pod with podman
// kube play and drives it: see deploy/helm/README.md, "In a real runtime:
// podman", for what of the spec podman honours and what the test stands
// in for.
func podmanPod(t *testing.T, pm *podman, dir, host string) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// The simulator at --speed=1 (the defaults' --speed=0 is overridden:
	// the last flag wins), so that the "stopped" turn stays open until the
	// test interrupts it. sidecar.grace and .checkpointInterval 1s instead
	// of 5s: a run is counted once its grace window has passed, and the
	// kill waits for a checkpoint holding the open run.
	out, err := render(t, nil, "--set-json", `workload.args=["--expect=`+podExpect+`","--speed=1"]`,
		"--set", "sidecar.grace=1s", "--set", "sidecar.checkpointInterval=1s")
	if err != nil {
		t.Fatal(err)
	}
	job := decode(t, out).one(t, "Job").(*batchv1.Job)
	port := realtool.FreePorts(t, 1)[0]
	pod, sidecarName, cliName := podFromJob(t, job, port)
	podYAML, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "pod.yaml")
	if err := os.WriteFile(file, podYAML, 0o600); err != nil {
		t.Fatal(err)
	}
	// Created, not started: the CLI container is replaced first (below).
	pm.runCopying(t, "kube", "play", "--start=false", "--network", "slirp4netns", file)
	ctrName := func(c string) string { return pod.Name + "-" + c }
	sidecar, cli := ctrName(sidecarName), ctrName(cliName)

	// What podman made of the spec, container by container.
	spec := job.Spec.Template.Spec
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		checkPodmanContainer(t, pm, ctrName(c.Name), c, spec)
	}

	// The simulator takes its turns on stdin; the chart's CLI container has
	// none (a real CLI gets its prompt as arguments) and podman 4.3's kube
	// play ignores `stdin: true`. So the CLI container is created again
	// from the same rendered spec with an open stdin (-i), after the pod
	// started: the test then writes the turns, one at a time.
	cliSpec := spec.Containers[0]
	cliArgs := podmanCreateArgs(t, pm, cli, cliSpec, spec)
	pm.run(t, "rm", cli)
	pm.run(t, "pod", "start", pod.Name)
	pm.run(t, cliArgs...)

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitFor(t, "the sidecar's /readyz (scraped from the host)", func() string { return httpStatus(base + "/readyz") })
	if s := httpStatus(base + "/healthz"); s != "" {
		t.Errorf("/healthz: %s", s)
	}

	in, inW := io.Pipe()
	defer inW.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	attach := pm.cmd(ctx, "start", "--attach", "--interactive", cli)
	attach.Stdin = in
	stdout, err := attach.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var attachErr bytes.Buffer
	attach.Stderr = &attachErr
	if err := attach.Start(); err != nil {
		t.Fatal(err)
	}
	// Each turn ends with the CLI's result line: counted as they pass.
	results := make(chan int, 64)
	go func() {
		defer close(results)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		n := 0
		for sc.Scan() {
			if bytes.Contains(sc.Bytes(), []byte(`"type":"result"`)) {
				n++
				results <- n
			}
		}
	}()
	turn := 0
	write := func(line string) {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatalf("the CLI's stdin: %v", err)
		}
	}
	// resultsUpTo waits for the CLI's result line number want.
	resultsUpTo := func(want int) {
		t.Helper()
		for n := range results {
			if n == want {
				return
			}
		}
		err := attach.Wait() // stdout is read to its end: Wait may run
		t.Fatalf("the CLI container ended before result %d: %v\n%s", want, err, attachErr.String())
	}
	start := func(scenario string) {
		write(fmt.Sprintf(`{"type":"user","message":{"role":"user","content":"[[SCENARIO:%s]] turn %d"}}`, scenario, turn))
		turn++
	}
	send := func(scenarios ...string) {
		t.Helper()
		for _, sc := range scenarios {
			start(sc)
		}
		resultsUpTo(turn)
	}
	scrape := func() (map[string]*dto.MetricFamily, error) { return promfam.Scrape(base + "/metrics") }
	expect := volumeFile(t, pm, "writable-0", filepath.Base(podExpect))
	settled := func(what string, turns int) map[string]*dto.MetricFamily {
		t.Helper()
		var fams map[string]*dto.MetricFamily
		truth := readTruth(t, expect, turns)
		waitFor(t, what, func() string {
			var err error
			if fams, err = scrape(); err != nil {
				return err.Error()
			}
			return truth.compare(fams)
		})
		t.Logf("scrape %s: %s", what, truth.summary(fams))
		return fams
	}

	// Before: two turns, counted.
	send("completed", "failed")
	settled("before the kill (2 turns)", 2)

	// A "stopped" turn: its workflow waits for an interrupt. Once the
	// sidecar's checkpoint holds that run open, the sidecar is killed
	// (SIGKILL: no final checkpoint). The CLI goes on while it is down: the
	// interrupt ends the run, a whole turn more goes into the spool. Then
	// the sidecar is restarted, as the kubelet restarts a restartPolicy:
	// Always init container, and two turns follow.
	start("stopped")
	stateDir := volumeFile(t, pm, "state", "")
	waitFor(t, "a checkpoint holding the open run", func() string {
		st, err := follow.LoadState(stateDir)
		if err != nil {
			return err.Error()
		}
		for _, s := range st.Streams {
			if len(s.Tracker.Runs) > 0 {
				return ""
			}
		}
		return fmt.Sprintf("%d streams, no open run", len(st.Streams))
	})
	pm.run(t, "kill", sidecar)
	if code := strings.TrimSpace(pm.run(t, "wait", sidecar)); code != "137" {
		t.Errorf("killed sidecar exit code %s, want 137", code)
	}
	write(`{"type":"control_request","request_id":"stop-1","request":{"subtype":"interrupt"}}`)
	resultsUpTo(turn)
	send("cached")
	pm.run(t, "start", sidecar)
	waitFor(t, "the restarted sidecar's /readyz", func() string { return httpStatus(base + "/readyz") })
	if fams, err := scrape(); err == nil {
		t.Logf("scrape right after the restart (checkpoint restored, spool being read): %s", readTruth(t, expect, turn).summary(fams))
	}
	send("mixed", "completed")

	// The CLI ends (stdin closed: the session is over), exit 0.
	inW.Close()
	if err := attach.Wait(); err != nil {
		t.Fatalf("the CLI container: %v\n%s", err, attachErr.String())
	}
	if code := strings.TrimSpace(pm.run(t, "inspect", "--format", "{{.State.ExitCode}}", cli)); code != "0" {
		t.Errorf("CLI container exit code %s, want 0", code)
	}
	fams := settled(fmt.Sprintf("after the restart (%d turns, the CLI ended)", turn), turn)
	if v := promfam.Total(promfam.ByLabel(fams, "cbc_otel_follow_streams_finalized_total", "reason")); v < 1 {
		t.Errorf("no stream finalized after the CLI ended: %v", promfam.ByLabel(fams, "cbc_otel_follow_streams_finalized_total", "reason"))
	}

	// The Job's end: the main container is done, so Kubernetes stops the
	// native sidecar (SIGTERM, then terminationGracePeriodSeconds). serve
	// exits 0 after its final checkpoint; the pod ends.
	grace := int64(30)
	if spec.TerminationGracePeriodSeconds != nil {
		grace = *spec.TerminationGracePeriodSeconds
	}
	stopStart := time.Now()
	pm.run(t, "stop", "-t", fmt.Sprint(grace), sidecar)
	stopped := time.Since(stopStart)
	if code := strings.TrimSpace(pm.run(t, "inspect", "--format", "{{.State.ExitCode}}", sidecar)); code != "0" {
		t.Errorf("sidecar exit code after SIGTERM %s, want 0 (final checkpoint written)", code)
	}
	if stopped >= time.Duration(grace)*time.Second {
		t.Errorf("the sidecar took %v to stop: the grace period (%ds) ran out", stopped, grace)
	}
	pm.run(t, "pod", "stop", "-t", fmt.Sprint(grace), pod.Name)
	if st := strings.TrimSpace(pm.run(t, "pod", "inspect", "--format", "{{.State}}", pod.Name)); st != "Exited" {
		t.Errorf("pod state %q after the CLI and the sidecar ended, want Exited", st)
	}
	// serve logs to stderr, which podman logs writes to its own.
	logsOut, err := pm.cmd(context.Background(), "logs", sidecar).CombinedOutput()
	if err != nil {
		t.Fatalf("podman logs %s: %v\n%s", sidecar, err, logsOut)
	}
	logs := string(logsOut)
	if n := strings.Count(logs, `msg="Listening on"`); n != 2 {
		t.Errorf("sidecar log: %d starts, want 2 (before and after the kill)\n%s", n, logs)
	}
	// The restart resumed the stream and its open run from the checkpoint,
	// not from the start: without that the counts above would be exact too
	// (a fresh process counting every run once), but as a counter reset.
	if m := regexp.MustCompile(`msg="resuming stream" file=\S+ offset=(\d+) open_runs=(\d+)`).FindStringSubmatch(logs); m == nil || m[1] == "0" || m[2] == "0" {
		t.Errorf("the restarted sidecar did not resume the stream and its open run from its checkpoint:\n%s", logs)
	} else {
		t.Logf("the restarted sidecar resumed the stream at offset %s with %s open run", m[1], m[2])
	}
	// The install init container ran (podman removes it once done): the
	// binary it copied is the host's, byte for byte (both builds are
	// reproducible), and the CLI container ran it.
	installed, err := os.ReadFile(volumeFile(t, pm, "bin", "cbc-otel"))
	if err != nil {
		t.Fatalf("the bin volume: %v", err)
	}
	if hostBin, err := os.ReadFile(host); err != nil || !bytes.Equal(installed, hostBin) {
		t.Errorf("the bin volume's cbc-otel (%d bytes) is not the host binary (%d bytes, %v)", len(installed), len(hostBin), err)
	}
	if !nonEmptyDir(stateDir) {
		t.Errorf("the state volume holds no checkpoint")
	}
	t.Logf("sidecar stopped in %v after SIGTERM", stopped.Round(time.Millisecond))
}

// podFromJob turns the rendered Job into the Pod its template makes, in
// the form podman 4.3's kube play takes (it knows no Job): the native
// sidecar becomes a plain container (kube play would wait for an init
// container to exit before the others start), the downward-API fields
// kube play does not know (metadata.namespace, spec.nodeName) become their
// values, the probes go (kube play makes a livenessProbe a healthcheck run
// by systemd timers, absent here, with a curl the image does not have: the
// test does the GETs itself), and the sidecar's port is published on
// 127.0.0.1 (hostPort) for the scrape from the host, in place of the
// Service. It returns the pod and the names of the sidecar and the CLI.
func podFromJob(t *testing.T, job *batchv1.Job, hostPort int) (*corev1.Pod, string, string) {
	t.Helper()
	spec := job.Spec.Template.Spec.DeepCopy()
	var inits, sidecars []corev1.Container
	for _, c := range spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			c.RestartPolicy = nil
			sidecars = append(sidecars, c)
		} else {
			inits = append(inits, c)
		}
	}
	if len(sidecars) != 1 || len(spec.Containers) != 1 || len(inits) != 1 {
		t.Fatalf("rendered pod: %d init containers, %d native sidecars, %d containers; want 1, 1, 1", len(inits), len(sidecars), len(spec.Containers))
	}
	spec.InitContainers = inits
	spec.Containers = append(spec.Containers, sidecars...)
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.StartupProbe, c.LivenessProbe, c.ReadinessProbe = nil, nil, nil
		for j := range c.Env {
			e := &c.Env[j]
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
				continue
			}
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.namespace":
				e.Value, e.ValueFrom = job.Namespace, nil
			case "spec.nodeName":
				e.Value, e.ValueFrom = "podman", nil
			}
		}
	}
	sc := &spec.Containers[1]
	if len(sc.Ports) != 1 {
		t.Fatalf("sidecar ports %v, want one", sc.Ports)
	}
	sc.Ports[0].HostPort, sc.Ports[0].HostIP = int32(hostPort), "127.0.0.1"
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: job.Spec.Template.ObjectMeta,
		Spec:       *spec,
	}
	pod.Name, pod.Namespace = job.Name, job.Namespace
	return pod, sc.Name, spec.Containers[0].Name
}

// podmanInspect is the part of `podman inspect` checked against the spec.
type podmanInspect struct {
	Config struct {
		User string
	}
	HostConfig struct {
		ReadonlyRootfs bool
		CapDrop        []string
		SecurityOpt    []string
		Memory         int64
	}
	Mounts []struct {
		Name        string
		Destination string
		RW          bool
	}
}

func inspectContainer(t *testing.T, pm *podman, name string) podmanInspect {
	t.Helper()
	var out []podmanInspect
	if err := json.Unmarshal([]byte(pm.run(t, "container", "inspect", name)), &out); err != nil || len(out) != 1 {
		t.Fatalf("podman container inspect %s: %v (%d)", name, err, len(out))
	}
	return out[0]
}

// checkPodmanContainer compares what kube play created (before the pod
// starts: podman removes an init container once it has run) with the
// rendered container: user, read-only root, capabilities,
// no-new-privileges, memory limit, volume mounts.
func checkPodmanContainer(t *testing.T, pm *podman, name string, c corev1.Container, spec corev1.PodSpec) {
	t.Helper()
	got := inspectContainer(t, pm, name)
	if want := fmt.Sprintf("%d:%d", *spec.SecurityContext.RunAsUser, *spec.SecurityContext.RunAsGroup); got.Config.User != want {
		t.Errorf("%s: user %q, want %q", name, got.Config.User, want)
	}
	if !got.HostConfig.ReadonlyRootfs {
		t.Errorf("%s: root filesystem writable", name)
	}
	if len(got.HostConfig.CapDrop) < 14 {
		t.Errorf("%s: capabilities dropped %q, want all", name, got.HostConfig.CapDrop)
	}
	if !slices.Contains(got.HostConfig.SecurityOpt, "no-new-privileges") {
		t.Errorf("%s: security options %q, want no-new-privileges", name, got.HostConfig.SecurityOpt)
	}
	if lim := c.Resources.Limits[corev1.ResourceMemory]; got.HostConfig.Memory != lim.Value() {
		t.Errorf("%s: memory limit %d, want %s", name, got.HostConfig.Memory, lim.String())
	}
	var mounts, want []string
	for _, m := range got.Mounts {
		mounts = append(mounts, fmt.Sprintf("%s %s rw=%v", m.Name, m.Destination, m.RW))
	}
	for _, m := range c.VolumeMounts {
		want = append(want, fmt.Sprintf("%s %s rw=%v", m.Name, m.MountPath, !m.ReadOnly))
	}
	sort.Strings(mounts)
	sort.Strings(want)
	if !slices.Equal(mounts, want) {
		t.Errorf("%s: mounts %q, want %q", name, mounts, want)
	}
}

// podmanCreateArgs is `podman create` for the CLI container as kube play
// made it (user, mounts, security, memory, environment), plus -i.
func podmanCreateArgs(t *testing.T, pm *podman, name string, c corev1.Container, spec corev1.PodSpec) []string {
	t.Helper()
	got := inspectContainer(t, pm, name)
	lim := c.Resources.Limits[corev1.ResourceMemory]
	args := []string{"create", "--pod", strings.TrimSuffix(name, "-"+c.Name), "--name", name, "-i",
		"--user", got.Config.User, "--read-only", "--read-only-tmpfs=false", "--cap-drop", "all",
		"--security-opt", "no-new-privileges", "--memory", fmt.Sprint(lim.Value())}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Fatalf("%s: env %s from %v: not carried over", name, e.Name, e.ValueFrom)
		}
		args = append(args, "-e", e.Name+"="+e.Value)
	}
	for _, m := range c.VolumeMounts {
		v := m.Name + ":" + m.MountPath
		if m.ReadOnly {
			v += ":ro"
		}
		args = append(args, "-v", v)
	}
	if c.WorkingDir != "" {
		args = append(args, "-w", c.WorkingDir)
	}
	args = append(args, "--entrypoint", c.Command[0], c.Image)
	return append(append(args, c.Command[1:]...), c.Args...)
}

// volumeFile is the host path of file in the podman volume vol ("" = the
// volume's directory).
func volumeFile(t *testing.T, pm *podman, vol, file string) string {
	t.Helper()
	dir := strings.TrimSpace(pm.run(t, "volume", "inspect", "--format", "{{.Mountpoint}}", vol))
	return filepath.Join(dir, file)
}

func nonEmptyDir(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) > 0
}

// httpStatus is "" when url answers 200, else what it answered.
func httpStatus(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.Status
	}
	return ""
}

// waitFor polls cond ("" = done) until it holds or a minute passes: the
// sidecar is another process, behind the runtime's port forwarding.
func waitFor(t *testing.T, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := cond()
	for last != "" {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after a minute: %s", what, last)
		}
		<-tick.C
		last = cond()
	}
}

// podTruth is the simulator's ground truth (its --expect lines) summed.
type podTruth struct {
	runs, agents     map[string]float64
	tokens, toolUses float64
	workflows        int
}

// readTruth reads the --expect file, which must hold exactly turns
// workflow runs (it is written before each turn's result line).
func readTruth(t *testing.T, path string, turns int) podTruth {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the simulator's ground truth: %v", err)
	}
	tr := podTruth{runs: map[string]float64{}, agents: map[string]float64{}}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r struct {
			Kind     string  `json:"kind"`
			Status   string  `json:"status"`
			Tokens   float64 `json:"tokens"`
			ToolUses float64 `json:"tool_uses"`
			Agents   []struct {
				State string `json:"state"`
			} `json:"agents"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if r.Kind != "workflow" {
			continue
		}
		tr.workflows++
		tr.runs[r.Status]++
		tr.tokens += r.Tokens
		tr.toolUses += r.ToolUses
		for _, a := range r.Agents {
			tr.agents[a.State]++
		}
	}
	if tr.workflows != turns {
		t.Fatalf("%s: %d workflow runs, want %d", path, tr.workflows, turns)
	}
	return tr
}

// compare says how the scraped families differ from the truth ("" = not).
func (tr podTruth) compare(fams map[string]*dto.MetricFamily) string {
	var diffs []string
	for _, c := range []struct {
		name, label string
		want        map[string]float64
	}{
		{"cbc_workflow_runs_total", "status", tr.runs},
		{"cbc_workflow_agents_total", "state", tr.agents},
	} {
		got := promfam.ByLabel(fams, c.name, c.label)
		for _, k := range keysOf(got, c.want) {
			if got[k] != c.want[k] {
				diffs = append(diffs, fmt.Sprintf("%s{%s=%q} %v, want %v", c.name, c.label, k, got[k], c.want[k]))
			}
		}
	}
	for _, c := range []struct {
		name string
		want float64
	}{
		{"cbc_workflow_tokens_total", tr.tokens},
		{"cbc_workflow_tool_uses_total", tr.toolUses},
		{"cbc_workflow_runs_started_total", float64(tr.workflows)},
		{"cbc_workflow_duration_seconds", float64(tr.workflows)},
		{"cbc_workflow_runs_active", 0},
	} {
		if v := promfam.Total(promfam.ByLabel(fams, c.name, "")); v != c.want {
			diffs = append(diffs, fmt.Sprintf("%s %v, want %v", c.name, v, c.want))
		}
	}
	return strings.Join(diffs, "; ")
}

// summary is the scrape in one line, for the test log.
func (tr podTruth) summary(fams map[string]*dto.MetricFamily) string {
	return fmt.Sprintf("runs %v agents %v tokens %v tool uses %v started %v (ground truth: %d runs %v)",
		nonZero(promfam.ByLabel(fams, "cbc_workflow_runs_total", "status")), nonZero(promfam.ByLabel(fams, "cbc_workflow_agents_total", "state")),
		promfam.Total(promfam.ByLabel(fams, "cbc_workflow_tokens_total", "")), promfam.Total(promfam.ByLabel(fams, "cbc_workflow_tool_uses_total", "")),
		promfam.Total(promfam.ByLabel(fams, "cbc_workflow_runs_started_total", "")), tr.workflows, tr.runs)
}

func nonZero(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// keysOf is the sorted union of the keys with a non-zero value.
func keysOf(a, b map[string]float64) []string {
	var keys []string
	for _, m := range []map[string]float64{a, b} {
		for k, v := range m {
			if v != 0 && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}
