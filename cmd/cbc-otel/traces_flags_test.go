package main

import (
	"bufio"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
	"github.com/cbc-otel/cbc-otel/traces"
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
		{[]string{"--traces-file", "/nonexistent-dir/x.jsonl"}, "--traces-file"},
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
	f := parseTracesFlags(t, false, "--traces-file", path, "--traces.capture-previews", "--otlp.endpoint", "none")
	if err := f.validate(); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TRACEPARENT": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "OTEL_SERVICE_NAME": "svc"}
	r, err := f.start(context.Background(), func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.enabled() || !r.capturePreviews() || !strings.Contains(r.describe(), path) {
		t.Fatalf("runtime: enabled %v previews %v describe %q", r.enabled(), r.capturePreviews(), r.describe())
	}
	in, err := os.Open("../../testdata/corpus/claude-code-2.1.328/complete.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	p := ingest.NewPipeline(ingest.PipelineOptions{
		Decode:  streamjson.DecodeOptions{KeepPreviews: r.capturePreviews()},
		Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{r.sink()}},
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
		req, err := traces.UnmarshalRequest(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				spans += len(ss.Spans)
			}
		}
	}
	if spans != 7 {
		t.Errorf("%d spans in the file, want 7", spans)
	}
}

func TestTracesRuntimeBadEnv(t *testing.T) {
	f := parseTracesFlags(t, true, "--traces.exporter", "otlp")
	if _, err := f.start(context.Background(), func(string) string { return "" }, nil); err == nil {
		t.Error("otlp without any endpoint must fail")
	}
}
