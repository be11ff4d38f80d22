package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cbc-otel/cbc-otel/egress"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/realtool"
	"github.com/cbc-otel/cbc-otel/tap"
	"github.com/cbc-otel/cbc-otel/traces"
)

// The Jaeger tests export real traces to a real Jaeger v2 all-in-one and
// read them back through its query API, for each way spans leave cbc-otel:
// the library in-process, `replay` over gRPC and over HTTP, and `run`
// wrapping the simulator. The expected tree of every run is what the Sink
// produces for the same bytes in memory (the unit tests pin that against
// goldens); here we check that it arrives intact: every span, its parent,
// name and error status, under the trace id traces.IDs computes.

const corpusComplete = "../testdata/corpus/claude-code-2.1.328/complete.ndjson"

// wantSpan is one expected span, keyed by span id.
type wantSpan struct {
	name, parent string
	err          bool
}

// expectedSpans replays a recording through the Sink in memory.
func expectedSpans(t *testing.T, file string) map[string]map[string]wantSpan {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(traces.NewIDGenerator()))
	defer tp.Shutdown(context.Background())
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{traces.New(tp, traces.Options{})}, Grace: ingest.DefaultGrace}})
	if err := ingest.Feed(context.Background(), p, tap.SourceStdout, f); err != nil {
		t.Fatal(err)
	}
	p.Close()
	byTrace := map[string]map[string]wantSpan{}
	for _, s := range exp.GetSpans() {
		tid := s.SpanContext.TraceID().String()
		if byTrace[tid] == nil {
			byTrace[tid] = map[string]wantSpan{}
		}
		parent := ""
		if s.Parent.IsValid() {
			parent = s.Parent.SpanID().String()
		}
		byTrace[tid][s.SpanContext.SpanID().String()] = wantSpan{name: s.Name, parent: parent, err: s.Status.Code == codes.Error}
	}
	return byTrace
}

// checkTrace compares what Jaeger holds with the expected spans.
func checkTrace(t *testing.T, j *jaeger, traceID string, want map[string]wantSpan, service string) {
	t.Helper()
	got := j.waitTrace(t, traceID, len(want))
	if len(got.Spans) != len(want) {
		t.Errorf("trace %s: %d spans in Jaeger, want %d", traceID, len(got.Spans), len(want))
	}
	for _, s := range got.Spans {
		w, ok := want[s.SpanID]
		if !ok {
			t.Errorf("unexpected span %s %q", s.SpanID, s.OperationName)
			continue
		}
		if s.OperationName != w.name {
			t.Errorf("span %s: name %q, want %q", s.SpanID, s.OperationName, w.name)
		}
		if s.parent() != w.parent {
			t.Errorf("span %s (%s): parent %q, want %q", s.SpanID, w.name, s.parent(), w.parent)
		}
		v, _ := s.tag("error")
		if isErr := v == true; isErr != w.err {
			t.Errorf("span %s (%s): error %v, want %v", s.SpanID, w.name, isErr, w.err)
		}
		if v, _ := s.tag("gen_ai.operation.name"); strings.HasPrefix(w.name, "invoke_") && !strings.HasPrefix(w.name, "invoke_task") && !strings.HasPrefix(w.name, fmt.Sprint(v)) {
			t.Errorf("span %s: gen_ai.operation.name %v", w.name, v)
		}
		if p := got.Processes[s.ProcessID]; p.ServiceName != service {
			t.Errorf("span %s: service %q, want %q", w.name, p.ServiceName, service)
		}
	}
}

// runCLI runs the cbc-otel binary and fails the test on a non-zero exit.
func runCLI(t *testing.T, bin string, stdin []byte, env []string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("cbc-otel %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes()
}

// TestJaegerInProcess exports through egress.Setup directly: it holds
// whatever the command wiring does.
func TestJaegerInProcess(t *testing.T) {
	jbin := realtool.Built(t, "jaeger", "JAEGER_BIN", jaegerHint)
	for _, proto := range []string{egress.ProtocolGRPC, egress.ProtocolHTTP} {
		t.Run(proto, func(t *testing.T) {
			// A Jaeger per protocol: the ids are deterministic, so both
			// would write the very same trace.
			j := startJaeger(t, jbin)
			endpoint := j.otlpGRPC
			if proto == egress.ProtocolHTTP {
				endpoint = j.otlpHTTP
			}
			service := "cbc-otel-inproc-" + strings.ReplaceAll(proto, "/", "-")
			// The SDK reads the resource from the process environment.
			t.Setenv("OTEL_SERVICE_NAME", service)
			prov, err := egress.New(context.Background(), egress.Config{
				Endpoint: "http://" + endpoint, Protocol: proto, IDGenerator: traces.NewIDGenerator(),
			})
			if err != nil {
				t.Fatal(err)
			}
			// The fail recording: an Error agent and an Error workflow.
			file := "../testdata/corpus/claude-code-2.1.328/fail.ndjson"
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			sink := traces.New(prov.TracerProvider(), traces.Options{})
			p := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{sink}, Grace: ingest.DefaultGrace}})
			if err := ingest.Feed(context.Background(), p, tap.SourceStdout, f); err != nil {
				t.Fatal(err)
			}
			p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := prov.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if sink.Dropped() != 0 || sink.ExportErrors() != 0 {
				t.Errorf("dropped %v, export errors %v", sink.Dropped(), sink.ExportErrors())
			}
			want := expectedSpans(t, file)
			tid := traces.TraceID("wgfp0rove", "0mx5yoa6r-82b2b6b8").String()
			if _, ok := want[tid]; !ok || len(want) != 1 {
				t.Fatalf("expected trace %s, have %v", tid, keysOf(want))
			}
			checkTrace(t, j, tid, want[tid], service)
		})
	}
}

// TestJaegerReplay runs `cbc-otel replay --otlp.endpoint ... --otlp.protocol
// P` on the corpus's complete recording, one fresh Jaeger per protocol (the
// ids are deterministic, so both protocols write the very same trace).
func TestJaegerReplay(t *testing.T) {
	jbin := realtool.Built(t, "jaeger", "JAEGER_BIN", jaegerHint)
	bin := jaegerBuildCLI(t)
	want := expectedSpans(t, corpusComplete)
	tid, _ := traces.IDs(&ingest.Run{TaskID: "ww1t7k50l", RunID: "0mx5yo7rw-0b933e5a"})
	if len(want[tid.String()]) != 7 {
		t.Fatalf("expected 7 spans (workflow, 2 phases, 4 agents) in %s, have %d", tid, len(want[tid.String()]))
	}
	for _, proto := range []string{egress.ProtocolGRPC, egress.ProtocolHTTP} {
		t.Run(proto, func(t *testing.T) {
			j := startJaeger(t, jbin)
			endpoint := "http://" + j.otlpGRPC
			if proto == egress.ProtocolHTTP {
				endpoint = "http://" + j.otlpHTTP
			}
			runCLI(t, bin, nil, []string{"OTEL_SERVICE_NAME=cbc-otel-replay"},
				"replay", "--otlp.endpoint", endpoint, "--otlp.protocol", proto, corpusComplete)
			checkTrace(t, j, tid.String(), want[tid.String()], "cbc-otel-replay")
		})
	}
}

// TestJaegerRun wraps the simulator with `cbc-otel run`, over OTLP gRPC and
// again over OTLP HTTP: initialize and one user message on stdin, then EOF.
// The simulator records its stdout and the ground truth, from which the
// expected trace is derived.
func TestJaegerRun(t *testing.T) {
	jbin := realtool.Built(t, "jaeger", "JAEGER_BIN", jaegerHint)
	bin := jaegerBuildCLI(t)
	for _, proto := range []string{egress.ProtocolGRPC, egress.ProtocolHTTP} {
		t.Run(proto, func(t *testing.T) {
			j := startJaeger(t, jbin)
			endpoint := "http://" + j.otlpGRPC
			if proto == egress.ProtocolHTTP {
				endpoint = "http://" + j.otlpHTTP
			}
			jaegerRunOnce(t, j, bin, endpoint, proto)
		})
	}
}

func jaegerRunOnce(t *testing.T, j *jaeger, bin, endpoint, proto string) {
	dir := t.TempDir()
	record, expect := filepath.Join(dir, "stdout.ndjson"), filepath.Join(dir, "expect.ndjson")
	stdin := []byte(`{"type":"control_request","request_id":"init","request":{"subtype":"initialize","hooks":{},"capabilities":{},"hasPrompt":true}}` + "\n" +
		`{"type":"user","message":{"role":"user","content":"[[SCENARIO:failed]] review A and B"},"parent_tool_use_id":null,"session_id":""}` + "\n")
	out := runCLI(t, bin, stdin, []string{"OTEL_SERVICE_NAME=cbc-otel-run"},
		"run", "--web.listen-address=", "--otlp.endpoint", endpoint, "--otlp.protocol", proto, "--",
		bin, "simulate", "--speed", "0", "--dialect", "claude", "--seed", "7", "--record", record, "--expect", expect)
	rec, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, rec) {
		t.Errorf("run's stdout differs from the child's (%d vs %d bytes)", len(out), len(rec))
	}
	type truthRun struct {
		Kind   string `json:"kind"`
		TaskID string `json:"task_id"`
		RunID  string `json:"run_id"`
		Status string `json:"status"`
		Phases []struct{ Index int }
		Agents []struct{ Index int }
	}
	var runs []truthRun
	f, err := os.Open(expect)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var r truthRun
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Kind == "workflow" {
			runs = append(runs, r)
		}
	}
	if len(runs) != 1 || runs[0].Status != "failed" {
		t.Fatalf("ground truth: %+v, want one failed workflow", runs)
	}
	want := expectedSpans(t, record)
	tid, _ := traces.IDs(&ingest.Run{TaskID: runs[0].TaskID, RunID: runs[0].RunID})
	w := want[tid.String()]
	if n := 1 + len(runs[0].Phases) + len(runs[0].Agents); len(w) != n {
		t.Fatalf("expected %d spans for %s, the replayed recording gives %d", n, tid, len(w))
	}
	checkTrace(t, j, tid.String(), w, "cbc-otel-run")
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
