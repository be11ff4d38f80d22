//go:build chaos

package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// The fields of the stream that may carry a secret or untrusted text. Each
// gets its own canary token and e-mail, so that a hit names the field that
// leaked.
var secretFields = []string{"account", "prompt", "promptPreview", "resultPreview", "summary", "error"}

// secretOptIn maps the fields that --traces.capture-previews exports to the
// only span attribute each may appear in.
var secretOptIn = map[string]string{
	"promptPreview": "cbc.agent.prompt_preview",
	"resultPreview": "cbc.agent.result_preview",
	"summary":       "cbc.summary",
}

func secretToken(field string) string { return "cbcCanaryTok" + field + "Q7z" }
func secretEmail(field string) string {
	return "canary." + strings.ToLower(field) + "@example.invalid"
}

// secretBoth is the text planted in a field: its token and its e-mail.
func secretBoth(field string) string {
	return "token=" + secretToken(field) + " mail=" + secretEmail(field)
}

// secretStream is a Claude Code-shaped session with the canaries planted:
// the initialize answer's account block, a completed workflow (prompt,
// previews, summary) and a failed one (prompt, agent error, task error,
// summary).
func secretStream() []byte {
	const t0 = 1796205994000
	lines := []map[string]any{
		{"type": "control_response", "response": map[string]any{"subtype": "success", "request_id": "init-1", "response": map[string]any{
			"account": map[string]any{"token": secretToken("account"), "email": secretEmail("account"), "apiKey": secretBoth("account")}}}},
		{"type": "system", "subtype": "init", "session_id": "s-secrets"},
	}
	for i, status := range []string{"completed", "failed"} {
		id := fmt.Sprintf("wsec%d", i)
		agent := map[string]any{"type": "workflow_agent", "index": 1, "label": "a", "phaseIndex": 1, "agentId": "v1:abc" + id,
			"state": "done", "startedAt": t0, "endedAt": t0 + 50, "tokens": 5,
			"promptPreview": secretBoth("promptPreview"), "resultPreview": secretBoth("resultPreview")}
		patch := map[string]any{"status": status, "end_time": t0 + 100}
		if status == "failed" {
			agent["state"], agent["error"] = "error", secretBoth("error")
			patch["error"] = secretBoth("error")
		}
		lines = append(lines,
			map[string]any{"type": "system", "subtype": "task_started", "task_id": id, "run_id": "r" + id, "task_type": "local_workflow",
				"workflow_name": "secrets-" + status, "description": "d", "session_id": "s-secrets",
				"prompt": "export const meta = {}; // " + secretBoth("prompt")},
			map[string]any{"type": "system", "subtype": "task_progress", "task_id": id, "run_id": "r" + id,
				"usage":             map[string]any{"total_tokens": 5, "tool_uses": 0, "duration_ms": 100},
				"workflow_progress": []any{map[string]any{"type": "workflow_phase", "index": 1, "title": "P"}, agent}},
			map[string]any{"type": "system", "subtype": "task_updated", "task_id": id, "run_id": "r" + id, "patch": patch},
			map[string]any{"type": "system", "subtype": "task_notification", "task_id": id, "run_id": "r" + id, "status": status,
				"summary": secretBoth("summary"), "usage": map[string]any{"total_tokens": 5, "tool_uses": 0, "duration_ms": 100}},
		)
	}
	var b bytes.Buffer
	for _, l := range lines {
		j, err := json.Marshal(l)
		if err != nil {
			panic(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func init() {
	// secrets-stream prints the file args[0], then waits for EOF on stdin
	// so that the test can scrape the wrapper while it lives.
	chaosChildren["secrets-stream"] = func(args []string) int {
		b, err := os.ReadFile(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if _, err := os.Stdout.Write(b); err != nil {
			return 1
		}
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	}
}

// secretOutput is one output of the process, and how its hits are judged.
type secretOutput struct {
	name string
	data []byte
	// raw is the spooled stream: it is the child's own stdout by design,
	// so only the account block (never spooled) must be absent.
	raw bool
	// traces holds spans (OTLP/JSON lines or protobuf): with the opt-in,
	// hits are allowed there in the opted-in attributes only.
	traces bool
	// emptyOK marks an output that may legitimately be empty (a log with
	// nothing to say); the others must hold data or the check is vacuous.
	emptyOK bool
	// summary holds the runs seen (--summary.file, replay --summary.json, the
	// --summary.waterfall on stderr): with --tracker.capture-errors, error texts
	// are allowed there, outside log lines.
	summary bool
}

// secretHit is one canary found in one output.
type secretHit struct {
	output, field, where string
	allowed              bool
}

func TestSecrets(t *testing.T) {
	for _, optIn := range []bool{false, true} {
		name := "defaults"
		if optIn {
			name = "previews and errors opted in"
		}
		t.Run(name, func(t *testing.T) { secretsPass(t, optIn) })
	}
}

// secretsPass runs run, run --spool.dir + serve, and replay over the
// canary stream with every output on, and judges every output.
func secretsPass(t *testing.T, optIn bool) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "stream.ndjson")
	if err := os.WriteFile(stream, secretStream(), 0o600); err != nil {
		t.Fatal(err)
	}
	rcv := c5StartOTLP(t)
	var opt []string
	if optIn {
		opt = []string{"--traces.capture-previews", "--tracker.capture-errors"}
	}
	var outs []secretOutput
	outs = append(outs, secretsRun(t, dir, stream, rcv, opt)...)
	outs = append(outs, secretsSpoolServe(t, dir, stream, rcv, opt)...)
	outs = append(outs, secretsReplay(t, dir, stream, opt)...)

	var hits []secretHit
	for _, o := range outs {
		if len(o.data) == 0 && !o.emptyOK {
			t.Errorf("output %q is empty: nothing was checked there", o.name)
		}
		hits = append(hits, secretsFind(t, o, optIn)...)
	}
	sec := "default settings"
	if optIn {
		sec = "--traces.capture-previews --tracker.capture-errors"
	}
	record(t, SecSecrets, sec+": outputs checked", fmt.Sprint(len(outs)), ">= 16 (run, spool, serve, replay)", len(outs) >= 16)

	// One figure per planted field: hits outside what the opt-in allows.
	for _, f := range secretFields {
		var bad []string
		for _, h := range hits {
			if h.field == f && !h.allowed {
				w := h.where
				if i := strings.LastIndexByte(w, '.'); i >= 0 && !strings.HasPrefix(w, "attribute ") {
					w = w[i+1:] // the JSON leaf is enough to say where
				}
				bad = append(bad, h.output+" ["+w+"]")
			}
		}
		sort.Strings(bad)
		bad = slices.Compact(bad)
		val := "0"
		if len(bad) > 0 {
			t.Logf("%s canaries found in: %s", f, strings.Join(bad, "; "))
			val = fmt.Sprintf("%d outputs: %s", len(bad), strings.Join(bad, "; "))
		}
		record(t, SecSecrets, fmt.Sprintf("%s: %s canary (token, e-mail) hits", sec, f), val, "0", len(bad) == 0)
	}
	if optIn {
		// The opt-in must work, or the bound above would hold vacuously
		// for the opted-in fields.
		want := map[string]bool{}
		for _, h := range hits {
			if h.allowed && strings.HasSuffix(h.where, "attribute "+secretOptIn[h.field]) {
				want[h.output+"/"+h.field] = true
			}
		}
		traceOuts := 0
		for _, o := range outs {
			if o.traces && bytes.HasPrefix(o.data, []byte("{")) {
				traceOuts++ // protobuf bytes are judged by their JSON twin
			}
		}
		need := traceOuts * len(secretOptIn)
		record(t, SecSecrets, sec+": opted-in fields present in their attribute (outputs x fields)",
			fmt.Sprintf("%d/%d", len(want), need), fmt.Sprintf("%d/%d", need, need), len(want) == need)

		// --tracker.capture-errors: the error texts are in every span-status and
		// summary output.
		errOuts, judged := map[string]bool{}, map[string]bool{}
		for _, o := range outs {
			if o.summary || (o.traces && bytes.HasPrefix(o.data, []byte("{"))) {
				judged[o.name] = true
			}
		}
		errNeed := len(judged)
		for _, h := range hits {
			if h.allowed && h.field == "error" && judged[h.output] {
				errOuts[h.output] = true
			}
		}
		record(t, SecSecrets, sec+": error text present in span statuses and summaries (outputs)",
			fmt.Sprintf("%d/%d", len(errOuts), errNeed), fmt.Sprintf("%d/%d", errNeed, errNeed), len(errOuts) == errNeed)
	}
}

// secretsRun is `run` with every output: the live scrape, the metrics,
// traces and summary files, OTLP over gRPC, debug logs and the summary on
// stderr.
func secretsRun(t *testing.T, dir, stream string, rcv *c5OTLP, opt []string) []secretOutput {
	d := filepath.Join(dir, "run")
	os.Mkdir(d, 0o700)
	mf, tf, sf := filepath.Join(d, "m.prom"), filepath.Join(d, "t.jsonl"), filepath.Join(d, "s.ndjson")
	args := append([]string{"run", "--web.listen-address=127.0.0.1:0", "--log.level=debug", "--tracker.grace=200ms", "--summary.waterfall",
		"--metrics.file", mf, "--traces.file", tf, "--summary.file", sf, "--otlp.endpoint", rcv.GRPCAddr, "--otlp.protocol", "grpc"}, opt...)
	cmd := exec.Command(wrapperBin, append(args, "--", testExe, stream)...)
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
	scrape := c5PollScrape(t, "http://"+addr+"/metrics", 15*time.Second, func(b string) bool {
		return c5SumSeries(b, "cbc_workflow_runs_total") >= 2
	})
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, c5Tail(stderr.Bytes(), 3000))
	}
	if !bytes.Equal(stdout.Bytes(), secretStream()) {
		t.Error("run changed the stream it passed through")
	}
	reqs, raw := rcv.take()
	if c5Spans(reqs) == 0 {
		t.Error("the OTLP gRPC receiver got no span from run")
	}
	return []secretOutput{
		{name: "run stderr (debug logs, --summary.waterfall)", data: stderr.Bytes(), summary: true},
		{name: "run /metrics scrape", data: []byte(scrape)},
		{name: "run --metrics.file", data: secretsRead(t, mf)},
		{name: "run --traces.file", data: secretsRead(t, tf), traces: true},
		{name: "run --summary.file", data: secretsRead(t, sf), summary: true},
		{name: "run OTLP gRPC payloads", data: raw, traces: true},
		{name: "run OTLP gRPC payloads (JSON)", data: secretsJSON(t, reqs), traces: true},
	}
}

// secretsSpoolServe is `run --spool.dir` (the spool file), then `serve`
// over it with every output: scrape, metrics and traces files, OTLP over
// HTTP, debug logs and the checkpoint files of --state.dir.
func secretsSpoolServe(t *testing.T, dir, stream string, rcv *c5OTLP, opt []string) []secretOutput {
	spoolDir, stateDir, d := filepath.Join(dir, "spool"), filepath.Join(dir, "state"), filepath.Join(dir, "serve")
	for _, p := range []string{spoolDir, stateDir, d} {
		os.Mkdir(p, 0o700)
	}
	wrap := exec.Command(wrapperBin, "run", "--spool.dir", spoolDir, "--log.level=debug", "--", testExe, stream)
	wrap.Env = childEnv("secrets-stream")
	var wrapErr bytes.Buffer
	wrap.Stdout, wrap.Stderr = io.Discard, &wrapErr
	if err := wrap.Run(); err != nil {
		t.Fatalf("run --spool.dir: %v\n%s", err, wrapErr.String())
	}
	spooled, n := c5ReadDir(t, spoolDir)
	if n != 1 {
		t.Fatalf("%d spool files, want 1", n)
	}

	mf, tf := filepath.Join(d, "m.prom"), filepath.Join(d, "t.jsonl")
	args := append([]string{"serve", "--spool.dir", spoolDir, "--state.dir", stateDir, "--web.listen-address=127.0.0.1:0",
		"--log.level=debug", "--tracker.grace=200ms", "--follow.poll-interval=50ms", "--metrics.file", mf, "--traces.file", tf,
		"--otlp.endpoint", "http://" + rcv.HTTPAddr, "--otlp.protocol", "http/protobuf"}, opt...)
	srv := exec.Command(wrapperBin, args...)
	var stderr syncBuffer
	srv.Stdout, srv.Stderr = io.Discard, &stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	addr := c5WaitAddr(t, &stderr, 10*time.Second)
	scrape := c5PollScrape(t, "http://"+addr+"/metrics", 20*time.Second, func(b string) bool {
		if c5SumSeries(b, "cbc_workflow_runs_total") < 2 {
			return false
		}
		// Processed spool files are removed after the checkpoint that
		// records them: the state is then on disk.
		left, _ := filepath.Glob(filepath.Join(spoolDir, "*"))
		return len(left) == 0
	})
	c5Stop(t, srv, 15*time.Second)
	state, files := c5ReadDir(t, stateDir)
	if files == 0 {
		t.Error("serve wrote no checkpoint file")
	}
	reqs, raw := rcv.take()
	if c5Spans(reqs) == 0 {
		t.Error("the OTLP HTTP receiver got no span from serve")
	}
	return []secretOutput{
		{name: "run --spool.dir stderr (debug logs)", data: wrapErr.Bytes(), emptyOK: true},
		{name: "spool file", data: spooled, raw: true},
		{name: "serve stderr (debug logs)", data: stderr.Bytes()},
		{name: "serve /metrics scrape", data: []byte(scrape)},
		{name: "serve --metrics.file", data: secretsRead(t, mf)},
		{name: "serve --traces.file", data: secretsRead(t, tf), traces: true},
		{name: "serve OTLP HTTP payloads", data: raw, traces: true},
		{name: "serve OTLP HTTP payloads (JSON)", data: secretsJSON(t, reqs), traces: true},
		{name: fmt.Sprintf("serve checkpoint files (%d)", files), data: state},
	}
}

// secretsReplay is `replay --summary.json` with the file outputs and debug logs.
func secretsReplay(t *testing.T, dir, stream string, opt []string) []secretOutput {
	d := filepath.Join(dir, "replay")
	os.Mkdir(d, 0o700)
	mf, tf := filepath.Join(d, "m.prom"), filepath.Join(d, "t.jsonl")
	args := append([]string{"replay", "--summary.json", "--log.level=debug", "--metrics.file", mf, "--traces.file", tf}, opt...)
	cmd := exec.Command(wrapperBin, append(args, stream)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr.String())
	}
	return []secretOutput{
		{name: "replay --summary.json output", data: stdout.Bytes(), summary: true},
		{name: "replay stderr (debug logs)", data: stderr.Bytes(), emptyOK: true},
		{name: "replay --metrics.file", data: secretsRead(t, mf)},
		{name: "replay --traces.file", data: secretsRead(t, tf), traces: true},
	}
}

func secretsRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("output not written: %v", err)
	}
	return b
}

// secretsJSON renders received OTLP requests as JSON, one per line, for
// the attribute-level check.
func secretsJSON(t *testing.T, reqs []*collectortrace.ExportTraceServiceRequest) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, r := range reqs {
		j, err := protojson.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// secretsFind returns every canary in one output, each judged allowed or
// not.
func secretsFind(t *testing.T, o secretOutput, optIn bool) []secretHit {
	t.Helper()
	var hits []secretHit
	// Attribute-level places of the canaries in OTLP/JSON documents.
	var where map[string][]string
	if o.traces && bytes.HasPrefix(bytes.TrimSpace(o.data), []byte("{")) {
		where = secretsWhere(t, o.data)
	}
	for _, f := range secretFields {
		for _, c := range []string{secretToken(f), secretEmail(f)} {
			if !bytes.Contains(o.data, []byte(c)) {
				continue
			}
			switch {
			case o.raw:
				hits = append(hits, secretHit{o.name, f, "raw stream", f != "account"})
			case where != nil:
				for _, w := range where[c] {
					ok := optIn && (secretOptIn[f] != "" && w == "attribute "+secretOptIn[f] ||
						f == "error" && strings.HasSuffix(w, ".status.message"))
					hits = append(hits, secretHit{o.name, f, w, ok})
				}
			case o.summary:
				// A summary may hold the error text when opted in, but a
				// log line interleaved with it (stderr) never may.
				for _, line := range bytes.Split(o.data, []byte("\n")) {
					if bytes.Contains(line, []byte(c)) {
						log := bytes.Contains(line, []byte("level="))
						hits = append(hits, secretHit{o.name, f, "summary line", optIn && f == "error" && !log})
					}
				}
			default:
				// Binary protobuf: judged by its JSON twin; elsewhere any
				// hit is a leak.
				ok := o.traces && optIn && (secretOptIn[f] != "" || f == "error")
				hits = append(hits, secretHit{o.name, f, "bytes", ok})
			}
		}
	}
	return hits
}

// secretsWhere walks OTLP/JSON lines and says, per canary, where each
// occurrence is: "attribute KEY" for a span attribute value, or the JSON
// path otherwise (a span name, a status message, an event).
func secretsWhere(t *testing.T, data []byte) map[string][]string {
	t.Helper()
	var canaries []string
	for _, f := range secretFields {
		canaries = append(canaries, secretToken(f), secretEmail(f))
	}
	out := map[string][]string{}
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch x := v.(type) {
		case map[string]any:
			if k, ok := x["key"].(string); ok {
				if val, ok := x["value"].(map[string]any); ok {
					if s, ok := val["stringValue"].(string); ok {
						for _, c := range canaries {
							if strings.Contains(s, c) {
								out[c] = append(out[c], "attribute "+k)
							}
						}
						return
					}
				}
			}
			for k, e := range x {
				walk(e, path+"."+k)
			}
		case []any:
			for _, e := range x {
				walk(e, path+"[]")
			}
		case string:
			for _, c := range canaries {
				if strings.Contains(x, c) {
					out[c] = append(out[c], path)
				}
			}
		}
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			t.Errorf("an OTLP/JSON line does not parse: %v", err)
			continue
		}
		walk(v, "")
	}
	return out
}
