package traces

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/golden"
	"github.com/cbc-otel/cbc-otel/internal/ingesttest"
	"github.com/cbc-otel/cbc-otel/simulate"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// recordings are the real CLI recordings and the simulator's reference
// streams.
func recordings(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, g := range []string{"../testdata/corpus/*/*.ndjson", "../testdata/simulate/*.ndjson"} {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			if strings.HasSuffix(f, ".stdin.ndjson") || strings.HasSuffix(f, ".expected.ndjson") || strings.HasSuffix(f, ".expect.ndjson") {
				continue
			}
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		t.Fatal("no recordings found")
	}
	return files
}

// replay runs a recording through a pipeline with the Sink and returns the
// exported spans.
func replay(t *testing.T, file string, opts Options, previews bool) tracetest.SpanStubs {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(NewIDGenerator()))
	defer tp.Shutdown(context.Background())
	sink := New(tp, opts)
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := ingest.NewPipeline(ingest.PipelineOptions{
		// Errors are kept: the goldens show the status message they make.
		Decode:  streamjson.DecodeOptions{KeepPreviews: previews, KeepErrors: true},
		Tracker: ingest.TrackerOptions{Sinks: []ingest.Sink{sink}, Grace: ingest.DefaultGrace},
	})
	if err := ingest.Feed(context.Background(), p, tap.SourceStdout, f); err != nil {
		t.Fatal(err)
	}
	p.Close()
	return exp.GetSpans()
}

func goldenName(file string) string {
	dir := filepath.Base(filepath.Dir(file))
	return filepath.Join("testdata", dir+"_"+strings.TrimSuffix(filepath.Base(file), ".ndjson")+".golden")
}

func TestGoldenSpanTrees(t *testing.T) {
	for _, file := range recordings(t) {
		t.Run(strings.TrimPrefix(file, "../testdata/"), func(t *testing.T) {
			got := Tree(replay(t, file, Options{}, false))
			checkTreeInvariants(t, replay(t, file, Options{}, false))
			golden.Assert(t, goldenName(file), []byte(got))
		})
	}
}

// checkTreeInvariants holds for every recording: ids valid and unique, every
// parent present in the trace, names and kinds from the contract.
func checkTreeInvariants(t *testing.T, spans tracetest.SpanStubs) {
	t.Helper()
	ids := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		if !s.SpanContext.IsValid() {
			t.Errorf("%s: invalid span context", s.Name)
		}
		if _, dup := ids[s.SpanContext.SpanID()]; dup {
			t.Errorf("%s: duplicate span id %s", s.Name, s.SpanContext.SpanID())
		}
		ids[s.SpanContext.SpanID()] = s
		if s.SpanKind != trace.SpanKindInternal {
			t.Errorf("%s: kind %s, want internal", s.Name, s.SpanKind)
		}
		if s.EndTime.Before(s.StartTime) {
			t.Errorf("%s: ends before it starts", s.Name)
		}
	}
	for _, s := range spans {
		op := strings.SplitN(s.Name, " ", 2)[0]
		switch op {
		case OpInvokeWorkflow, SpanTask:
			// A root, unless nested (or a resume): then under the agent or
			// the task that launched it (or its first run), in the same
			// trace. Its depth only when the stream gave one: a fork's
			// workflow and a sub-agent's shell have none.
			if !s.Parent.IsValid() {
				continue
			}
			p, ok := ids[s.Parent.SpanID()]
			if pop := strings.SplitN(p.Name, " ", 2)[0]; !ok || (pop != OpInvokeAgent && pop != SpanTask) || p.SpanContext.TraceID() != s.SpanContext.TraceID() {
				t.Errorf("%s: a root span with a parent %q that did not launch it", s.Name, p.Name)
			}
		case SpanPhase, OpInvokeAgent:
			p, ok := ids[s.Parent.SpanID()]
			if !ok {
				t.Errorf("%s: parent %s not exported", s.Name, s.Parent.SpanID())
				continue
			}
			if p.SpanContext.TraceID() != s.SpanContext.TraceID() {
				t.Errorf("%s: parent in another trace", s.Name)
			}
			pop := strings.SplitN(p.Name, " ", 2)[0]
			if pop != OpInvokeWorkflow && !(op == OpInvokeAgent && pop == SpanPhase) {
				t.Errorf("%s: parent %s", s.Name, p.Name)
			}
		default:
			t.Errorf("unexpected span name %q", s.Name)
		}
	}
}

func TestDeterministicIDs(t *testing.T) {
	for _, file := range recordings(t) {
		a, b := replay(t, file, Options{}, false), replay(t, file, Options{}, false)
		if len(a) != len(b) {
			t.Fatalf("%s: %d vs %d spans", file, len(a), len(b))
		}
		for i := range a {
			if !a[i].SpanContext.Equal(b[i].SpanContext) || !a[i].Parent.Equal(b[i].Parent) || !a[i].StartTime.Equal(b[i].StartTime) || !a[i].EndTime.Equal(b[i].EndTime) {
				t.Errorf("%s: span %d (%s) differs between replays", file, i, a[i].Name)
			}
		}
	}
}

func TestIDsMatchExport(t *testing.T) {
	spans := replay(t, "../testdata/corpus/claude-code-2.1.328/complete.ndjson", Options{}, false)
	r := &ingest.Run{TaskID: "ww1t7k50l", RunID: "0mx5yo7rw-0b933e5a"}
	tid, sid := IDs(r)
	found := false
	for _, s := range spans {
		if strings.HasPrefix(s.Name, OpInvokeWorkflow) {
			found = true
			if s.SpanContext.TraceID() != tid || s.SpanContext.SpanID() != sid {
				t.Errorf("workflow span %s/%s, IDs says %s/%s", s.SpanContext.TraceID(), s.SpanContext.SpanID(), tid, sid)
			}
		}
	}
	if !found {
		t.Fatal("no workflow span")
	}
	ht, hs := HexIDs(r)
	if ht != tid.String() || hs != sid.String() || len(ht) != 32 || len(hs) != 16 {
		t.Errorf("HexIDs = %s %s", ht, hs)
	}
	// Pin the hash so that a change of the id scheme is a conscious one:
	// sidecars and replays of old files rely on it.
	if got := TraceID("ww1t7k50l", "0mx5yo7rw-0b933e5a").String(); got != goldenTraceID {
		t.Errorf("TraceID = %s, want %s", got, goldenTraceID)
	}
}

const goldenTraceID = "7fcc5cf3d03140c8045360f946cd8b02"

func TestTraceparent(t *testing.T) {
	env := map[string]string{"TRACEPARENT": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "TRACESTATE": "k=v"}
	parent := ParentFromEnv(func(k string) string { return env[k] })
	if !parent.IsValid() || !parent.IsRemote() {
		t.Fatalf("ParentFromEnv = %+v", parent)
	}
	file := "../testdata/corpus/claude-code-2.1.328/complete.ndjson"
	plain := replay(t, file, Options{}, false)
	spans := replay(t, file, Options{Parent: parent}, false)
	if len(spans) != len(plain) {
		t.Fatalf("%d spans with a parent, %d without", len(spans), len(plain))
	}
	for i, s := range spans {
		if s.SpanContext.TraceID() != parent.TraceID() {
			t.Errorf("%s: trace id %s, want the parent's", s.Name, s.SpanContext.TraceID())
		}
		if s.SpanContext.SpanID() != plain[i].SpanContext.SpanID() {
			t.Errorf("%s: span id changed with a parent", s.Name)
		}
		if s.SpanContext.TraceState().Get("k") != "v" {
			t.Errorf("%s: trace state lost", s.Name)
		}
		if strings.HasPrefix(s.Name, OpInvokeWorkflow) {
			if s.Parent.SpanID() != parent.SpanID() || !s.Parent.IsRemote() {
				t.Errorf("workflow parent = %s, want %s (remote)", s.Parent.SpanID(), parent.SpanID())
			}
		}
	}
	var sk Sink
	sk.parent = parent
	tid, _ := sk.IDs(&ingest.Run{TaskID: "x"})
	if tid != parent.TraceID() {
		t.Errorf("Sink.IDs ignores the parent")
	}
	// An unsampled parent is honoured: nothing is recorded.
	env["TRACEPARENT"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	if n := len(replay(t, file, Options{Parent: ParentFromEnv(func(k string) string { return env[k] })}, false)); n != 0 {
		t.Errorf("unsampled parent: %d spans exported", n)
	}
	if ParentFromEnv(func(string) string { return "" }).IsValid() {
		t.Error("no TRACEPARENT must give an invalid parent")
	}
	env["TRACEPARENT"] = "garbage"
	if ParentFromEnv(func(k string) string { return env[k] }).IsValid() {
		t.Error("a malformed TRACEPARENT must be ignored")
	}
}

// allText is every string a span carries, to grep for canaries.
func allText(spans tracetest.SpanStubs) string {
	var b strings.Builder
	for _, s := range spans {
		b.WriteString(s.Name + "\n" + s.Status.Description + "\n")
		for _, kv := range s.Attributes {
			fmt.Fprintf(&b, "%s=%s\n", kv.Key, kv.Value.String())
		}
		for _, l := range s.Links {
			for _, kv := range l.Attributes {
				fmt.Fprintf(&b, "%s=%s\n", kv.Key, kv.Value.String())
			}
		}
		for _, kv := range s.Resource.Attributes() {
			fmt.Fprintf(&b, "%s=%s\n", kv.Key, kv.Value.String())
		}
	}
	return b.String()
}

func TestPreviewsOptIn(t *testing.T) {
	// The simulator's cached-claude stream has result and prompt previews
	// and the canary prompt; the corpus has a real workflow prompt.
	for _, file := range []string{"../testdata/simulate/cached-claude.ndjson", "../testdata/simulate/mixed-cbc.ndjson", "../testdata/corpus/claude-code-2.1.328/complete.ndjson"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		off := allText(replay(t, file, Options{}, true))                             // kept by ingest, not exported
		offIngest := allText(replay(t, file, Options{CapturePreviews: true}, false)) // asked for, not kept
		on := allText(replay(t, file, Options{CapturePreviews: true}, true))
		for _, v := range []string{off, offIngest} {
			for _, key := range []string{AttrPromptPreview, AttrResultPreview, AttrSummary} {
				if strings.Contains(v, key+"=") {
					t.Errorf("%s: %s exported without the opt-in", file, key)
				}
			}
		}
		if bytes.Contains(raw, []byte(`"resultPreview"`)) && !strings.Contains(on, AttrResultPreview+"=") {
			t.Errorf("%s: result previews missing with the opt-in", file)
		}
		if bytes.Contains(raw, []byte(`"promptPreview"`)) && !strings.Contains(on, AttrPromptPreview+"=") {
			t.Errorf("%s: prompt previews missing with the opt-in", file)
		}
		for _, canary := range []string{simulate.CanaryToken, simulate.CanaryPrompt, simulate.CanaryEmail, "REDACTED"} {
			if strings.Contains(on, canary) {
				t.Errorf("%s: %q leaked into spans", file, canary)
			}
		}
	}
}

// TestPreviewBounded feeds a hostile preview through a Sink directly.
func TestPreviewBounded(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(NewIDGenerator()))
	s := New(tp, Options{CapturePreviews: true})
	// Hostile text reaches the sink through ingest's boundary (here a
	// checkpoint's Restore): the sink only cuts what ingest cleaned.
	runs, err := ingesttest.Restored(ingest.Run{TaskID: "t", Workflow: true, Name: "w", Status: ingest.StatusFailed, Start: 1000, End: 5000,
		Error: "boom\x1b[31m\u202e" + strings.Repeat("x", 1000), InterruptLatencyMs: -1,
		Agents: []ingest.Agent{{Index: 1, State: ingest.AgentError, Start: 1000, End: 2000, Error: strings.Repeat("e\n", 400),
			ResultPreview: "ok\x00\x07" + strings.Repeat("r", 2000)}}})
	if err != nil {
		t.Fatal(err)
	}
	r := runs[0]
	s.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
	s.Observe(ingest.Lifecycle{Kind: ingest.AgentEnded, Run: r, Agent: &r.Agents[0]})
	s.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: r})
	for _, sp := range exp.GetSpans() {
		if len(sp.Status.Description) > maxStatusLen || strings.ContainsAny(sp.Status.Description, "\x1b\u202e\n") {
			t.Errorf("%s: status %q not bounded/sanitized", sp.Name, sp.Status.Description)
		}
		for _, kv := range sp.Attributes {
			if kv.Key == AttrResultPreview {
				v := kv.Value.AsString()
				if len(v) > maxPreviewLen || strings.ContainsAny(v, "\x00\x07") {
					t.Errorf("preview not bounded/sanitized: %d bytes", len(v))
				}
			}
		}
	}
}

// Tree renders spans as an indented tree per trace, with times in epoch ms
// and sorted attributes: the golden format, and what docs/traces.md shows.
func Tree(spans tracetest.SpanStubs) string {
	children := map[trace.SpanID][]tracetest.SpanStub{}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if ids[s.Parent.SpanID()] {
			children[s.Parent.SpanID()] = append(children[s.Parent.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	order := func(l []tracetest.SpanStub) {
		sort.SliceStable(l, func(i, j int) bool {
			if !l[i].StartTime.Equal(l[j].StartTime) {
				return l[i].StartTime.Before(l[j].StartTime)
			}
			return l[i].SpanContext.SpanID().String() < l[j].SpanContext.SpanID().String()
		})
	}
	order(roots)
	var b strings.Builder
	var walk func(s tracetest.SpanStub, depth int)
	walk = func(s tracetest.SpanStub, depth int) {
		ind := strings.Repeat("  ", depth)
		status := s.Status.Code.String()
		if s.Status.Description != "" {
			status += fmt.Sprintf(" %q", s.Status.Description)
		}
		parent := "-"
		if s.Parent.IsValid() {
			parent = s.Parent.SpanID().String()
		}
		fmt.Fprintf(&b, "%s%s  [span %s parent %s] %s %d..%d (%s) %s\n", ind, s.Name, s.SpanContext.SpanID(), parent, s.SpanKind,
			s.StartTime.UnixMilli(), s.EndTime.UnixMilli(), s.EndTime.Sub(s.StartTime).Round(time.Millisecond), status)
		fmt.Fprintf(&b, "%s    %s\n", ind, attrLine(s.Attributes))
		for _, l := range s.Links {
			fmt.Fprintf(&b, "%s    link %s/%s %s\n", ind, l.SpanContext.TraceID(), l.SpanContext.SpanID(), attrLine(l.Attributes))
		}
		kids := children[s.SpanContext.SpanID()]
		order(kids)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		fmt.Fprintf(&b, "trace %s\n", r.SpanContext.TraceID())
		walk(r, 1)
	}
	if len(spans) == 0 {
		b.WriteString("(no spans)\n")
	}
	return b.String()
}

func attrLine(kvs []attribute.KeyValue) string {
	parts := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		parts = append(parts, fmt.Sprintf("%s=%s", kv.Key, kv.Value.String()))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// TestParentTaskLink: a workflow launched by a task seen in the stream links
// to that task's root span.
func TestParentTaskLink(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(NewIDGenerator()))
	s := New(tp, Options{})
	parent := &ingest.Run{TaskID: "agent1", RunID: "r0", TaskType: "local_agent", Status: ingest.StatusCompleted, Start: 1000, End: 9000, InterruptLatencyMs: -1}
	child := &ingest.Run{TaskID: "wf1", RunID: "r1", TaskType: "local_workflow", Workflow: true, ParentTaskID: "agent1", Status: ingest.StatusStopped, Reason: "worker_restart", Start: 2000, End: 3000, InterruptLatencyMs: 12}
	orphan := &ingest.Run{TaskID: "wf2", Workflow: true, ParentTaskID: "never-seen", Status: ingest.StatusAbandoned, Start: 2000, End: 3000, InterruptLatencyMs: -1}
	s.Observe(ingest.Lifecycle{Kind: ingest.TaskStarted, Run: parent})
	s.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: child})
	s.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: child})
	s.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: orphan})
	s.Observe(ingest.Lifecycle{Kind: ingest.TaskEnded, Run: parent})
	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans", len(spans))
	}
	wf := spans[0]
	if len(wf.Links) != 1 {
		t.Fatalf("links = %v", wf.Links)
	}
	ptid, psid := IDs(parent)
	if l := wf.Links[0].SpanContext; l.TraceID() != ptid || l.SpanID() != psid {
		t.Errorf("link to %s/%s, want %s/%s", l.TraceID(), l.SpanID(), ptid, psid)
	}
	if spans[2].SpanContext.SpanID() != psid {
		t.Errorf("task span id %s, want %s", spans[2].SpanContext.SpanID(), psid)
	}
	if wf.Status.Code != 0 || !strings.Contains(attrLine(wf.Attributes), "cbc.workflow.status=stopped") ||
		!strings.Contains(attrLine(wf.Attributes), "cbc.stop.reason=worker_restart") || !strings.Contains(attrLine(wf.Attributes), "cbc.interrupt.latency_ms=12") {
		t.Errorf("stopped workflow: status %v attrs %s", wf.Status, attrLine(wf.Attributes))
	}
	if o := spans[1]; len(o.Links) != 0 || o.Status.Code.String() != "Error" || !strings.Contains(attrLine(o.Attributes), "cbc.workflow.abandoned=true") {
		t.Errorf("abandoned orphan: links %v status %v attrs %s", o.Links, o.Status, attrLine(o.Attributes))
	}
}
