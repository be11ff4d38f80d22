//go:build chaos

package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// inputWorkflows is the number of distinct workflow names of the
// cardinality attack.
const inputWorkflows = 1_000_000

// inputDefaultCap is metrics.DefaultMaxWorkflows as `serve -h` documents
// it; the test reads the flag's default from the binary to stay honest if
// it changes.
func inputDefaultCap(t *testing.T) int {
	t.Helper()
	out, _ := exec.Command(wrapperBin, "serve", "-h").CombinedOutput()
	i := bytes.Index(out, []byte("-metrics.max-workflows int"))
	if i < 0 {
		t.Fatalf("serve -h lists no --metrics.max-workflows:\n%s", out)
	}
	rest := string(out[i:])
	j := strings.Index(rest, "(default ")
	if j < 0 {
		t.Fatal("--metrics.max-workflows has no default in serve -h")
	}
	n, err := strconv.Atoi(strings.TrimSuffix(strings.Fields(rest[j+len("(default "):])[0], ")"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestInputWorkflowCardinality feeds one million distinct workflow names
// (tiny lines: started and finished) to `serve --follow.glob` with the default
// label cap and counts the series that /metrics then exposes.
func TestInputWorkflowCardinality(t *testing.T) {
	capN := inputDefaultCap(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "workflows.ndjson")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := range inputWorkflows {
		id := strconv.FormatInt(int64(i), 36)
		fmt.Fprintf(w, `{"type":"system","subtype":"task_started","task_id":"t%s","task_type":"local_workflow","workflow_name":"w%s"}`+"\n"+
			`{"type":"system","subtype":"task_notification","task_id":"t%s","status":"completed"}`+"\n", id, id, id)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	f.Close()

	// --tracker.grace=0: the cap is under test here, not the grace window (whose
	// cost with a million runs inside it is a figure of its own to take).
	cmd := exec.Command(wrapperBin, "serve", "--follow.glob", path, "--web.listen-address=127.0.0.1:0", "--log.level=info",
		"--tracker.grace=0", "--follow.poll-interval=50ms")
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := c5WaitAddr(t, &stderr, 10*time.Second)
	body := c5PollScrape(t, "http://"+addr+"/metrics", 100*time.Second, func(b string) bool {
		return c5SumSeries(b, "cbc_workflow_runs_total") >= inputWorkflows
	})
	elapsed := time.Since(start)
	hwm := vmHWMKiB(cmd.Process.Pid) << 10
	c5Stop(t, cmd, 15*time.Second)

	fams, err := inputParse(body)
	if err != nil {
		t.Fatalf("the scrape does not parse: %v", err)
	}
	values := map[string]bool{}
	series, wfSeries, otherSeries := 0, 0, 0
	for _, mf := range fams {
		for _, m := range mf.Metric {
			series++
			for _, lp := range m.Label {
				if lp.GetName() == "workflow" {
					wfSeries++
					values[lp.GetValue()] = true
					if lp.GetValue() == "other" {
						otherSeries++
					}
				}
			}
		}
	}
	overflow := c5SumSeries(body, "cbc_otel_workflow_labels_overflow_total")
	// Every admitted name has at most the series "other" has; "unknown"
	// and "other" are the two values beyond the cap.
	record(t, SecInput, fmt.Sprintf("%d distinct workflow names: workflow label values", inputWorkflows),
		fmt.Sprint(len(values)), fmt.Sprintf("<= cap %d + 2 (other, unknown)", capN), len(values) <= capN+2)
	record(t, SecInput, fmt.Sprintf("%d distinct workflow names: series with a workflow label", inputWorkflows),
		fmt.Sprint(wfSeries), fmt.Sprintf("<= (cap+2) x %d per name = %d", otherSeries, (capN+2)*otherSeries),
		otherSeries > 0 && wfSeries <= (capN+2)*otherSeries)
	record(t, SecInput, fmt.Sprintf("%d distinct workflow names: all series of /metrics", inputWorkflows),
		fmt.Sprint(series), "< 20000", series < 20000)
	record(t, SecInput, fmt.Sprintf("%d distinct workflow names: runs folded into \"other\"", inputWorkflows),
		fmt.Sprintf("%.0f", overflow), fmt.Sprintf("= %d - cap", inputWorkflows), int(overflow) == inputWorkflows-capN)
	record(t, SecInput, fmt.Sprintf("%d distinct workflow names (%d MB): serve time to count all", inputWorkflows, fi.Size()>>20),
		elapsed.Round(100*time.Millisecond).String(), "< 120s (noisy: shared machine)", elapsed < 120*time.Second)
	record(t, SecInput, fmt.Sprintf("%d distinct workflow names: serve peak RSS", inputWorkflows),
		fmt.Sprintf("%d MB", hwm>>20), "< 256 MB", hwm > 0 && hwm < 256<<20)
}

// inputParse parses a text scrape.
func inputParse(body string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(body))
}

// inputHostile are the strings planted in every untrusted field. Raw, not
// JSON: invalid UTF-8 must reach the decoder as bytes.
var inputHostile = map[string]string{
	"ansi escape":       "evil\x1b[31mRED\x1b[0m\x1b]0;title\x07",
	"newline injection": "evil\"} 1\ninjected_metric{a=\"b\"} 666\n# EOF",
	"nul and c1":        "evil\x00nul\u0085nel\u009bcsi",
	"bidi marks":        "evil\u202egnp.exe\u2066iso\u2069\u200f\u061c",
	"invalid utf-8":     "evil\xff\xfe\xc0\x80\xed\xa0\x80bytes",
	"1 MB label":        "evil" + strings.Repeat("A", 1<<20),
}

// inputJSONString is s as a JSON string literal that keeps invalid UTF-8
// bytes raw (encoding/json would replace them).
func inputJSONString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// inputHostileStream is one workflow per hostile string, the string in
// every untrusted field: workflow name, description, task type, agent
// label, phase title, errors, summary.
func inputHostileStream() []byte {
	var b bytes.Buffer
	i := 0
	for _, name := range []string{"ansi escape", "newline injection", "nul and c1", "bidi marks", "invalid utf-8", "1 MB label"} {
		h := inputJSONString(inputHostile[name])
		id := fmt.Sprintf("hostile%d", i)
		i++
		fmt.Fprintf(&b, `{"type":"system","subtype":"task_started","task_id":"%s","run_id":"r%s","task_type":"local_workflow","workflow_name":%s,"description":%s,"session_id":"s"}`+"\n", id, id, h, h)
		fmt.Fprintf(&b, `{"type":"system","subtype":"task_progress","task_id":"%s","run_id":"r%s","usage":{"total_tokens":1,"tool_uses":0,"duration_ms":5},"workflow_progress":[{"type":"workflow_phase","index":1,"title":%s},{"type":"workflow_agent","index":1,"label":%s,"phaseIndex":1,"phaseTitle":%s,"agentId":"v1:%s","state":"error","startedAt":1796205994000,"endedAt":1796205994050,"error":%s}]}`+"\n", id, id, h, h, h, id, h)
		fmt.Fprintf(&b, `{"type":"system","subtype":"task_updated","task_id":"%s","run_id":"r%s","patch":{"status":"failed","end_time":1796205994100,"error":%s}}`+"\n", id, id, h)
		fmt.Fprintf(&b, `{"type":"system","subtype":"task_notification","task_id":"%s","run_id":"r%s","status":"failed","summary":%s}`+"\n", id, id, h)
		// A plain task whose type is hostile: task_type is a label too.
		fmt.Fprintf(&b, `{"type":"system","subtype":"task_started","task_id":"p%s","task_type":%s,"description":%s}`+"\n", id, h, h)
		fmt.Fprintf(&b, `{"type":"system","subtype":"task_notification","task_id":"p%s","status":"failed","summary":%s}`+"\n", id, h)
	}
	return b.Bytes()
}

// inputUnsafe says what is wrong with a string that reached a label, a log
// or a span, or "" when it is clean.
func inputUnsafe(s string, maxLen int) string {
	if !utf8.ValidString(s) {
		return "invalid UTF-8"
	}
	if len(s) > maxLen {
		return fmt.Sprintf("%d bytes", len(s))
	}
	for _, r := range s {
		switch {
		case r < 0x20 && r != '\t', r >= 0x7f && r < 0xa0:
			return fmt.Sprintf("control %U", r)
		case unicode.Is(unicode.Bidi_Control, r) || r == '\u200e' || r == '\u200f' || r == '\u061c':
			return fmt.Sprintf("bidi %U", r)
		}
	}
	if strings.Contains(s, "injected_metric") && strings.ContainsAny(s, "\n\r") {
		return "line injection"
	}
	return ""
}

// TestInputHostileStrings runs hostile strings through `run` with every
// output and checks every label value of the scrape, every stderr line at
// debug level (with the --summary.waterfall) and every span string.
func TestInputHostileStrings(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "hostile.ndjson")
	if err := os.WriteFile(stream, inputHostileStream(), 0o600); err != nil {
		t.Fatal(err)
	}
	tf := filepath.Join(dir, "t.jsonl")
	// The stream (several 1 MB lines) is written at once: a queue that
	// holds it all keeps this test about sanitizing, not about the tap's
	// drop policy (section 2), even when the consumer starts late.
	cmd := exec.Command(wrapperBin, "run", "--tap.queue-bytes=67108864", "--web.listen-address=127.0.0.1:0", "--log.level=debug", "--tracker.grace=200ms", "--summary.waterfall",
		"--traces.file", tf, "--", testExe, stream)
	cmd.Env = childEnv("secrets-stream")
	var stdout bytes.Buffer
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := c5WaitAddr(t, &stderr, 10*time.Second)
	body := c5PollScrape(t, "http://"+addr+"/metrics", 15*time.Second, func(b string) bool {
		return c5SumSeries(b, "cbc_workflow_runs_total") >= float64(len(inputHostile))
	})
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, c5Tail(stderr.Bytes(), 2000))
	}
	if !bytes.Equal(stdout.Bytes(), inputHostileStream()) {
		t.Error("run changed the hostile stream it passed through")
	}

	// Labels of the scrape.
	fams, err := inputParse(body)
	labels, badLabels := 0, []string{}
	if err != nil {
		badLabels = append(badLabels, "scrape does not parse: "+err.Error())
	}
	for name, mf := range fams {
		if strings.Contains(name, "injected") {
			badLabels = append(badLabels, "injected family "+name)
		}
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				labels++
				if why := inputUnsafe(lp.GetValue(), 128); why != "" {
					badLabels = append(badLabels, fmt.Sprintf("%s{%s}: %s", name, lp.GetName(), why))
				}
			}
		}
	}
	evil := 0
	for _, mf := range fams {
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				if strings.HasPrefix(lp.GetValue(), "evil") {
					evil++
				}
			}
		}
	}
	if evil == 0 {
		// The hostile names must reach the labels (sanitized), or the
		// check above looked at nothing of theirs.
		badLabels = append(badLabels, "no label value from a hostile name")
	}
	record(t, SecInput, "hostile strings: /metrics label values unsanitized", inputFigure(labels, badLabels), "0", len(badLabels) == 0)

	// stderr: debug logs and the waterfall.
	lines, badLines := 0, []string{}
	for l := range bytes.SplitSeq(stderr.Bytes(), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		lines++
		if why := inputUnsafe(string(l), 64<<10); why != "" {
			badLines = append(badLines, fmt.Sprintf("line %d: %s: %.60q", lines, why, l))
		}
	}
	record(t, SecInput, "hostile strings: stderr lines (debug, --summary.waterfall) unsanitized", inputFigure(lines, badLines), "0 (<= 64 KiB a line)", len(badLines) == 0)

	// Spans: every string of the OTLP/JSON file, once decoded.
	tb, err := os.ReadFile(tf)
	if err != nil || len(tb) == 0 {
		t.Fatalf("traces file: %v", err)
	}
	strs, badSpans := 0, []string{}
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(e, path+"."+k)
			}
		case []any:
			for _, e := range x {
				walk(e, path)
			}
		case string:
			strs++
			if why := inputUnsafe(x, 4096); why != "" {
				badSpans = append(badSpans, path+": "+why)
			}
		}
	}
	for l := range bytes.SplitSeq(tb, []byte("\n")) {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		var v any
		if err := json.Unmarshal(l, &v); err != nil {
			badSpans = append(badSpans, "line does not parse: "+err.Error())
			continue
		}
		walk(v, "")
	}
	record(t, SecInput, "hostile strings: span strings (traces file) unsanitized", inputFigure(strs, badSpans), "0 (<= 4 KiB a string)", len(badSpans) == 0)
}

// inputFigure is "N bad of M checked", with the first offenders.
func inputFigure(checked int, bad []string) string {
	s := fmt.Sprintf("%d of %d", len(bad), checked)
	if len(bad) > 0 {
		s += ": " + strings.Join(bad[:min(3, len(bad))], "; ")
	}
	return s
}
