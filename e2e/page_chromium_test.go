package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/internal/realtool"
)

// chromiumFlags run Debian's chromium headless, offline and without a
// profile of its own (TOOLING.md).
var chromiumFlags = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync"}

func requireChromium(t *testing.T) string {
	t.Helper()
	return realtool.Find(t, "chromium", "CHROMIUM_BIN", "apt-get install -y --no-install-recommends chromium")
}

// dumpDOM loads url in headless Chromium and returns the DOM it built,
// serialized.
func dumpDOM(t *testing.T, chromium, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append(append([]string(nil), chromiumFlags...), "--user-data-dir="+t.TempDir(), "--dump-dom", url)
	cmd := exec.CommandContext(ctx, chromium, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium --dump-dom %s: %v\nstderr:\n%s", url, err, errb.String())
	}
	if !strings.Contains(out.String(), "</html>") {
		t.Fatalf("chromium dumped no page for %s:\n%s\nstderr:\n%s", url, out.String(), errb.String())
	}
	return out.String()
}

// startPageProc starts the binary with args and waits until /readyz of
// addr answers 200; it is killed when the test ends. It returns the
// process's stdout so far and to come.
func startPageProc(t *testing.T, bin, addr string, args ...string) *promLockedBuffer {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, stderr := &promLockedBuffer{}, &promLockedBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %v: %v", args, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return stdout
			}
		}
		select {
		case <-exited:
			t.Fatalf("cbc-otel %s exited early; stderr:\n%s", strings.Join(args, " "), stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz of %s never answered 200; stderr:\n%s", addr, stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitPage polls / until it holds every string of want (the pipeline may
// still be finalizing runs when /readyz answers).
func waitPage(t *testing.T, addr string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var body string
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addr + "/"); err == nil {
			var b bytes.Buffer
			b.ReadFrom(resp.Body)
			resp.Body.Close()
			body = b.String()
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(body, w)
			}
			if ok {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the page never held all of %q:\n%s", want, body)
}

// elements lists the tag names of the elements of a serialized DOM, in
// order: a "<" inside an attribute value or escaped text starts none.
func elements(dom string) []string {
	var tags []string
	for i := 0; i < len(dom); i++ {
		if dom[i] != '<' || i+1 == len(dom) || !isLetter(dom[i+1]) {
			continue
		}
		j := i + 1
		for j < len(dom) && (isLetter(dom[j]) || dom[j] >= '0' && dom[j] <= '9' || dom[j] == '-') {
			j++
		}
		tags = append(tags, strings.ToLower(dom[i+1:j]))
		var quote byte // skip the attributes, quoted values included, to the tag's end
		for ; j < len(dom); j++ {
			c := dom[j]
			if quote != 0 {
				if c == quote {
					quote = 0
				}
			} else if c == '"' || c == '\'' {
				quote = c
			} else if c == '>' {
				break
			}
		}
		i = j
	}
	return tags
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

var statusAttr = regexp.MustCompile(`<section class="run [a-z]+" data-status="([a-z]+)">\s*<div class="head"><span class="badge [a-z]+">[a-z]+</span><span class="name">([^<]*)</span>`)

// runsOf returns "status name" for each run section of a dumped DOM.
func runsOf(dom string) []string {
	var out []string
	for _, m := range statusAttr.FindAllStringSubmatch(dom, -1) {
		out = append(out, m[1]+" "+m[2])
	}
	return out
}

// TestPageChromiumDemo: the page of `demo --hold`, loaded in a real
// headless Chromium, shows every run of the demo with its status (those
// of demo's own --json summary), the build info and the links.
func TestPageChromiumDemo(t *testing.T) {
	chromium := requireChromium(t)
	bin := promBuildCLI(t)
	addr := fmt.Sprintf("127.0.0.1:%d", realtool.FreePorts(t, 1)[0])
	stdout := startPageProc(t, bin, addr, "demo", "--speed", "0", "--hold", "--json", "--web.listen-address", addr)
	waitPage(t, addr, "sim-review-fail", "the last 5 of 5")
	var want []string // the summary is printed before the hold, after the runs are final
	for _, line := range strings.Split(stdout.String(), "\n") {
		var w struct{ Kind, Workflow, Status string }
		if json.Unmarshal([]byte(line), &w) == nil && w.Kind == "workflow" {
			want = append(want, w.Status+" "+w.Workflow)
		}
	}
	slices.Sort(want)
	dom := dumpDOM(t, chromium, "http://"+addr+"/")
	got := slices.Sorted(slices.Values(runsOf(dom)))
	if len(want) != 5 || !slices.Equal(got, want) {
		t.Errorf("the DOM's runs are\n%s\nwant demo's\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, st := range []string{"completed", "failed"} {
		if !slices.ContainsFunc(got, func(r string) bool { return strings.HasPrefix(r, st+" ") }) {
			t.Errorf("no %s run in the DOM", st)
		}
	}
	for _, want := range []string{`href="metrics"`, `href="healthz"`, `href="readyz"`, "version ", "reader:alpha", "<svg"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the DOM lacks %q", want)
		}
	}
	for _, tag := range elements(dom) {
		if tag == "script" || tag == "iframe" || tag == "img" {
			t.Errorf("the DOM holds a <%s> element", tag)
		}
	}
}

// TestPageChromiumCost: the page of a demo that spends, loaded in a real
// headless Chromium: a run's cost beside its workflow's p95 once five runs
// came before it, and the demo's budget for show past its amount, its
// meter full and red, nothing stopped by it.
func TestPageChromiumCost(t *testing.T) {
	chromium := requireChromium(t)
	bin := promBuildCLI(t)
	addr := fmt.Sprintf("127.0.0.1:%d", realtool.FreePorts(t, 1)[0])
	startPageProc(t, bin, addr, "demo", "--speed", "0", "--hold", "--join-cli-telemetry", "--budget.show-usd", "0.05",
		"--scenarios", "completed,completed,completed,completed,completed,completed", "--web.listen-address", addr)
	waitPage(t, addr, "the last 6 of 6")
	dom := dumpDOM(t, chromium, "http://"+addr+"/")
	for _, want := range []string{
		`<p class="meta budget over" id="budget">budget (the demo's, for show: nothing is stopped): $0.`,
		` of $0.0500 (`, `%: over)<svg`, `<rect class="spent" x="0" y="0" width="100.0" height="10">`,
		`<span class="cost">$0.0255 (p95 $0.0255)</span>`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the DOM lacks %q:\n%s", want, dom)
		}
	}
	if n := strings.Count(dom, "(p95 "); n != 1 {
		t.Errorf("%d runs beside a p95, want the sixth only", n)
	}
	if got := runsOf(dom); len(got) != 6 || slices.ContainsFunc(got, func(r string) bool { return !strings.HasPrefix(r, "completed ") }) {
		t.Errorf("runs %q: want 6 completed, none stopped by the budget", got)
	}
}

// hostileStream is one finished and one open workflow run whose names,
// titles and labels are markup and bidirectional overrides, and whose
// previews hold a canary the page must never show.
func hostileStream() []byte {
	const now = 1796205994923
	lines := []map[string]any{
		{"type": "system", "subtype": "init", "session_id": "s1"},
		{"type": "system", "subtype": "task_started", "task_id": "w1", "run_id": "r1", "task_type": "local_workflow",
			"workflow_name": "<script>alert(1)</script>\u202eevil", "description": "d", "session_id": "s1"},
		{"type": "system", "subtype": "task_progress", "task_id": "w1", "run_id": "r1", "usage": map[string]any{"total_tokens": 5, "tool_uses": 0, "duration_ms": 10},
			"workflow_progress": []any{
				map[string]any{"type": "workflow_phase", "index": 1, "title": "</title><iframe src=//x>"},
				map[string]any{"type": "workflow_agent", "index": 1, "label": `"><img src=x onerror=alert(2)>`, "phaseIndex": 1, "agentId": "x", "state": "done",
					"startedAt": now, "durationMs": 5, "tokens": 5, "promptPreview": "CANARY-PREVIEW", "resultPreview": "CANARY-RESULT"},
			}},
		{"type": "system", "subtype": "task_notification", "task_id": "w1", "run_id": "r1", "status": "completed", "summary": "CANARY-SUMMARY",
			"usage": map[string]any{"total_tokens": 5, "tool_uses": 0, "duration_ms": 77}},
		{"type": "system", "subtype": "task_started", "task_id": "w2", "run_id": "r2", "task_type": "local_workflow",
			"workflow_name": "still-open", "description": "d", "session_id": "s1"},
		{"type": "system", "subtype": "task_progress", "task_id": "w2", "run_id": "r2", "usage": map[string]any{"total_tokens": 1, "tool_uses": 0, "duration_ms": 10},
			"workflow_progress": []any{
				map[string]any{"type": "workflow_phase", "index": 1, "title": "Work"},
				map[string]any{"type": "workflow_agent", "index": 1, "label": "worker", "phaseIndex": 1, "agentId": "y", "state": "running", "startedAt": now},
			}},
	}
	var b bytes.Buffer
	for _, l := range lines {
		j, _ := json.Marshal(l)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// TestPageChromiumHostileLabels: `run` over a stream of hostile names
// serves a page where Chromium finds them as text, never as elements, and
// no preview.
func TestPageChromiumHostileLabels(t *testing.T) {
	chromium := requireChromium(t)
	bin := promBuildCLI(t)
	file := filepath.Join(t.TempDir(), "hostile.ndjson")
	if err := os.WriteFile(file, hostileStream(), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", realtool.FreePorts(t, 1)[0])
	startPageProc(t, bin, addr, "run", "--web.listen-address", addr, "--grace", "100ms", "--", "sh", "-c", `cat "$0"; exec sleep 60`, file)
	waitPage(t, addr, "still-open", "alert(1)")
	dom := dumpDOM(t, chromium, "http://"+addr+"/")
	runs := runsOf(dom)
	want := []string{"running still-open", "completed &lt;script&gt;alert(1)&lt;/script&gt;evil"}
	if strings.Join(runs, "\n") != strings.Join(want, "\n") {
		t.Errorf("the DOM's runs are\n%s\nwant\n%s", strings.Join(runs, "\n"), strings.Join(want, "\n"))
	}
	for _, tag := range elements(dom) {
		if tag == "script" || tag == "iframe" || tag == "img" {
			t.Errorf("a hostile label became a <%s> element", tag)
		}
	}
	for _, text := range []string{`&lt;img src=x onerror=alert(2)&gt;</td>`, `&lt;/title&gt;&lt;iframe src=//x&gt;</td>`} {
		if !strings.Contains(dom, text) {
			t.Errorf("the DOM lacks the text %q", text)
		}
	}
	for _, bad := range []string{"\u202e", "CANARY-"} {
		if strings.Contains(dom, bad) {
			t.Errorf("the DOM holds %q", bad)
		}
	}
}
