package telemetry

import (
	"bufio"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"

	"github.com/cbc-otel/cbc-otel/egress"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
	"github.com/cbc-otel/cbc-otel/traces"

	"github.com/cbc-otel/cbc-otel/internal/oteltest"
)

func parseTracesFlags(t *testing.T, live bool, args ...string) *tracesFlags {
	t.Helper()
	var f tracesFlags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs, live)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &f
}

func TestTracesFlagsValidate(t *testing.T) {
	for _, c := range []struct {
		args    []string
		wantErr string
	}{
		{nil, ""},
		{[]string{"--otlp.endpoint", "localhost:4317"}, ""},
		{[]string{"--otlp.endpoint", "https://collector:4318", "--otlp.protocol", "http/protobuf"}, ""},
		{[]string{"--traces.exporter", "zipkin"}, "--traces.exporter"},
		{[]string{"--otlp.protocol", "thrift"}, "--otlp.protocol"},
		{[]string{"--otlp.endpoint", "ftp://x"}, "--otlp.endpoint"},
		{[]string{"--traces.exporter", "none", "--otlp.endpoint", "localhost:1"}, "conflicts"},
		{[]string{"--otlp.endpoint", "NONE"}, ""},
		{[]string{"--traces.exporter", "none", "--otlp.endpoint", "none"}, ""},
		{[]string{"--traces.file", "/nonexistent-dir/x.jsonl"}, "--traces.file"},
		{[]string{"--traces.flush-timeout", "0s"}, "--traces.flush-timeout"},
		{[]string{"--traces.queue", "0"}, "--traces.queue"},
	} {
		err := parseTracesFlags(t, true, c.args...).validate()
		if c.wantErr == "" && err != nil {
			t.Errorf("%v: %v", c.args, err)
		}
		if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%v: err = %v, want %q", c.args, err, c.wantErr)
		}
	}
	f := parseTracesFlags(t, false)
	if f.flushTimeout != defaultTracesFlushTimeout || f.queue != 2048 {
		t.Errorf("defaults: %s %d", f.flushTimeout, f.queue)
	}
}

func TestTracesRuntimeOff(t *testing.T) {
	oteltest.ClearEnv(t)
	f := parseTracesFlags(t, true)
	r, err := f.start(context.Background(), func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.enabled() || r.sink() != nil || r.exemplar() != nil || r.dropped() != nil || r.exportErrors() != nil || r.capturePreviews() || r.shutdown(context.Background()) != nil {
		t.Error("tracing should be off without endpoint or file")
	}
	if r.describe() != "traces off" {
		t.Errorf("describe = %q", r.describe())
	}
	var nilR *tracesRuntime
	if nilR.enabled() || nilR.sink() != nil || nilR.shutdown(context.Background()) != nil {
		t.Error("nil runtime misbehaves")
	}
	// --traces.capture-previews alone exports nothing, so decodes nothing.
	f = parseTracesFlags(t, true, "--traces.capture-previews")
	r, _ = f.start(context.Background(), func(string) string { return "" }, nil)
	if r.capturePreviews() {
		t.Error("previews kept with tracing off")
	}
}

func TestTracesRuntimeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	// --otlp.endpoint none: the file alone, no OTLP export to a host
	// called "none" failing every span.
	f := parseTracesFlags(t, false, "--traces.file", path, "--traces.capture-previews", "--otlp.endpoint", "none")
	if err := f.validate(); err != nil {
		t.Fatal(err)
	}
	oteltest.ClearEnv(t)
	// OTEL_SERVICE_NAME is the SDK's: the process environment. TRACEPARENT
	// is ours: env.
	t.Setenv("OTEL_SERVICE_NAME", "svc")
	env := map[string]string{"TRACEPARENT": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	r, err := f.start(context.Background(), func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.enabled() || !r.capturePreviews() || !strings.Contains(r.describe(), path) {
		t.Fatalf("runtime: enabled %v previews %v describe %q", r.enabled(), r.capturePreviews(), r.describe())
	}
	in, err := os.Open("../testdata/corpus/claude-code-2.1.328/complete.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	p := ingest.NewPipeline(ingest.PipelineOptions{
		Decode:  streamjson.DecodeOptions{KeepPreviews: r.capturePreviews()},
		Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{r.sink()}, Grace: ingest.DefaultGrace},
	})
	if err := ingest.Feed(context.Background(), p, tap.SourceStdout, in); err != nil {
		t.Fatal(err)
	}
	p.Close()
	tid, sid := r.exemplar()(&ingest.Run{TaskID: "ww1t7k50l", RunID: "0mx5yo7rw-0b933e5a"})
	if tid != "0af7651916cd43dd8448eb211c80319c" || len(sid) != 16 {
		t.Errorf("exemplar = %s %s, want the TRACEPARENT's trace id", tid, sid)
	}
	if err := r.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.dropped()() != 0 || r.exportErrors()() != 0 {
		t.Errorf("dropped %v errors %v", r.dropped()(), r.exportErrors()())
	}
	out, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 16<<20)
	spans := 0
	for sc.Scan() {
		req, err := egress.UnmarshalRequest(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		for _, rs := range req.ResourceSpans {
			if svc := resourceAttr(rs.Resource, "service.name"); svc != "svc" {
				t.Errorf("service.name = %q, want OTEL_SERVICE_NAME's", svc)
			}
			for _, ss := range rs.ScopeSpans {
				spans += len(ss.Spans)
			}
		}
	}
	if spans != 7 {
		t.Errorf("%d spans in the file, want 7", spans)
	}
}

func resourceAttr(r *resourcepb.Resource, key string) string {
	for _, kv := range r.GetAttributes() {
		if kv.Key == key {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// feedCorpus runs the corpus's complete recording through r's sink.
func feedCorpus(t *testing.T, r *tracesRuntime) {
	t.Helper()
	in, err := os.Open("../testdata/corpus/claude-code-2.1.328/complete.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	p := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{r.sink()}, Grace: ingest.DefaultGrace}})
	if err := ingest.Feed(context.Background(), p, tap.SourceStdout, in); err != nil {
		t.Fatal(err)
	}
	p.Close()
}

// TestTracesRuntimeEnvHidesParent: an env that hides TRACEPARENT, as
// serve's does, wins over the process environment for what cbc-otel reads.
func TestTracesRuntimeEnvHidesParent(t *testing.T) {
	oteltest.ClearEnv(t)
	t.Setenv("TRACEPARENT", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	env := func(k string) string {
		if k == "TRACEPARENT" {
			return ""
		}
		return os.Getenv(k)
	}
	f := parseTracesFlags(t, false, "--traces.file", filepath.Join(t.TempDir(), "spans.jsonl"))
	r, err := f.start(context.Background(), env, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.shutdown(context.Background())
	feedCorpus(t, r)
	run := &ingest.Run{TaskID: "ww1t7k50l", RunID: "0mx5yo7rw-0b933e5a"}
	tid, _ := r.exemplar()(run)
	if want := traces.TraceID(run.TaskID, run.RunID).String(); tid != want {
		t.Errorf("trace id %s, want the run's own %s: the hidden TRACEPARENT was used", tid, want)
	}
}

// TestTracesFlagsOverrideEnv: --otlp.endpoint and --otlp.protocol beat the
// environment's endpoint and protocol; the SDK still applies the
// environment's headers and resource.
func TestTracesFlagsOverrideEnv(t *testing.T) {
	oteltest.ClearEnv(t)
	envSide, envAddr := oteltest.StartReceiver(t)
	flagSide, flagAddr := oteltest.StartReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+envAddr)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=agents")
	t.Setenv("OTEL_SERVICE_NAME", "svc-env")
	f := parseTracesFlags(t, true, "--otlp.endpoint", flagAddr, "--otlp.protocol", "grpc")
	if err := f.validate(); err != nil {
		t.Fatal(err)
	}
	r, err := f.start(context.Background(), os.Getenv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "OTLP grpc → http://" + flagAddr; r.describe() != want {
		t.Errorf("describe = %q, want %q", r.describe(), want)
	}
	feedCorpus(t, r)
	if err := r.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.dropped()() != 0 || r.exportErrors()() != 0 {
		t.Errorf("dropped %v errors %v", r.dropped()(), r.exportErrors()())
	}
	if reqs, _, _ := envSide.Received(); len(reqs) != 0 {
		t.Error("the environment's endpoint got spans")
	}
	reqs, headers, _ := flagSide.Received()
	spans := 0
	for i, req := range reqs {
		if got := headers[i].Get("x-team"); len(got) != 1 || got[0] != "agents" {
			t.Errorf("x-team = %v: OTEL_EXPORTER_OTLP_HEADERS not applied", got)
		}
		for _, rs := range req.ResourceSpans {
			if svc := resourceAttr(rs.Resource, "service.name"); svc != "svc-env" {
				t.Errorf("service.name = %q", svc)
			}
			for _, ss := range rs.ScopeSpans {
				spans += len(ss.Spans)
			}
		}
	}
	if spans != 7 {
		t.Errorf("%d spans at the flag's endpoint, want 7", spans)
	}
}

func TestTracesRuntimeBadEnv(t *testing.T) {
	oteltest.ClearEnv(t)
	f := parseTracesFlags(t, true, "--traces.exporter", "otlp")
	if _, err := f.start(context.Background(), func(string) string { return "" }, nil); err == nil {
		t.Error("otlp without any endpoint must fail")
	}
}
