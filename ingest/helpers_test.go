// Shared helpers for the black-box tests of package ingest (tracker_test.go,
// fuzz_test.go): builders for the stream-json lines of PROTOCOL.md, two rigs
// that feed them (a Pipeline, or a Tracker driven with an explicit clock) and
// accessors over what an ingesttest.Recorder captured.
package ingest_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/ingesttest"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// T0 is the epoch-ms origin of the synthetic streams.
const T0 int64 = 1_796_000_000_000

// jobj is one JSON object (a stream line or a timeline entry).
type jobj = map[string]any

// set adds key/value pairs to m and returns it.
func set(m jobj, kv ...any) jobj {
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func lnStarted(task, run, typ, name string) jobj {
	m := jobj{"type": "system", "subtype": "task_started", "task_id": task, "task_type": typ,
		"tool_use_id": "toolu-" + task, "session_id": "S1", "description": "desc " + task, "uuid": "u-" + task}
	if name != "" {
		m["workflow_name"] = name
	}
	if run != "" {
		m["run_id"] = run
	}
	return m
}

func lnWorkflow(task string) jobj { return lnStarted(task, "", "local_workflow", "wf-"+task) }

// lnProgress is a task_progress snapshot with a workflow_progress array.
func lnProgress(task string, entries ...jobj) jobj {
	arr := make([]any, len(entries))
	for i, e := range entries {
		arr[i] = e
	}
	return jobj{"type": "system", "subtype": "task_progress", "task_id": task, "tool_use_id": "toolu-" + task,
		"description": "progress", "workflow_progress": arr}
}

// lnTick is a usage-only task_progress (no workflow_progress).
func lnTick(task string, u jobj) jobj {
	return jobj{"type": "system", "subtype": "task_progress", "task_id": task, "usage": u}
}

func usage(tokens, tools, durMs int64) jobj {
	return jobj{"total_tokens": tokens, "tool_uses": tools, "duration_ms": durMs}
}

func agentRow(index int, state string, kv ...any) jobj {
	return set(jobj{"type": "workflow_agent", "index": index, "state": state}, kv...)
}

func phaseRow(index int, title string) jobj {
	return jobj{"type": "workflow_phase", "index": index, "title": title}
}

func lnUpdated(task, status string, end int64, kv ...any) jobj {
	patch := jobj{}
	if status != "" {
		patch["status"] = status
	}
	if end != 0 {
		patch["end_time"] = end
	}
	set(patch, kv...)
	return jobj{"type": "system", "subtype": "task_updated", "task_id": task, "patch": patch}
}

func lnNotify(task, status string) jobj {
	return jobj{"type": "system", "subtype": "task_notification", "task_id": task, "tool_use_id": "toolu-" + task,
		"status": status, "output_file": "/tmp/" + task + ".output", "summary": "summary of " + task}
}

func lnInterrupt(session string) jobj {
	req := jobj{"subtype": "interrupt", "reason": "user cancel"}
	if session != "" {
		req["session_id"] = session
	}
	return jobj{"type": "control_request", "request_id": "x", "request": req}
}

func lnStopTask(task string) jobj {
	return jobj{"type": "control_request", "request_id": "st", "request": jobj{"subtype": "stop_task", "task_id": task}}
}

// encodeLines encodes lines, each terminated by "\n".
func encodeLines(lines ...jobj) []byte {
	var b []byte
	for _, l := range lines {
		j, err := json.Marshal(l)
		if err != nil {
			panic(err)
		}
		b = append(b, j...)
		b = append(b, '\n')
	}
	return b
}

// pipeRig feeds lines through a Pipeline into a Recorder.
type pipeRig struct {
	p     *ingest.Pipeline
	rec   *ingesttest.Recorder
	stats *ingest.Stats
}

func newPipeRig(opts ingest.PipelineOptions) *pipeRig {
	rec := new(ingesttest.Recorder)
	opts.Tracker.Sinks = append(opts.Tracker.Sinks, rec)
	if opts.Tracker.Stats == nil {
		opts.Tracker.Stats = new(ingest.Stats)
	}
	return &pipeRig{p: ingest.NewPipeline(opts), rec: rec, stats: opts.Tracker.Stats}
}

func (r *pipeRig) out(lines ...jobj) { r.p.Write(tap.SourceStdout, encodeLines(lines...)) }
func (r *pipeRig) in(lines ...jobj)  { r.p.Write(tap.SourceStdin, encodeLines(lines...)) }

// clockRig drives a Tracker directly, with the caller's clock, decoding
// JSON lines (at) or taking hand-made Events (ev).
type clockRig struct {
	t     testing.TB
	tr    *ingest.Tracker
	rec   *ingesttest.Recorder
	stats *ingest.Stats
	dec   *streamjson.Decoder
}

func newClockRig(t testing.TB, grace time.Duration) *clockRig {
	return newClockRigWith(t, ingest.TrackerOptions{Grace: grace})
}

// newClockRigWith is newClockRig with every Tracker option; a recorder is
// added to the sinks and the stats are the rig's.
func newClockRigWith(t testing.TB, opts ingest.TrackerOptions) *clockRig {
	rec := new(ingesttest.Recorder)
	opts.Sinks = append(opts.Sinks, rec)
	if opts.Stats == nil {
		opts.Stats = new(ingest.Stats)
	}
	// Error texts are kept: these rigs check how the Tracker merges them;
	// the decoder's default of withholding them is TestDecodeWithholdsErrors.
	return &clockRig{t: t, rec: rec, stats: opts.Stats, dec: streamjson.NewDecoder(streamjson.DecodeOptions{KeepErrors: true}),
		tr: ingest.NewTracker(opts)}
}

// ev hands a hand-made event to the tracker at time now.
func (r *clockRig) ev(now int64, e streamjson.Event) { r.tr.Handle(&e, now) }

// at decodes line and hands it to the tracker at time now.
func (r *clockRig) at(now int64, line jobj) {
	r.t.Helper()
	b, _ := json.Marshal(line)
	src := tap.SourceStdout
	if line["type"] == "control_request" {
		src = tap.SourceStdin
	}
	ev, reason := r.dec.Decode(src, b)
	if reason != streamjson.ReasonNone || ev == nil {
		r.t.Fatalf("line %s: decode gave (%v, %v)", b, ev, reason)
	}
	r.tr.Handle(ev, now)
}

// kindsOf lists the recorded kinds, space separated, without violations.
func kindsOf(rec *ingesttest.Recorder) string {
	var s []string
	for _, e := range rec.Events {
		if e.Kind != ingest.ViolationSeen {
			s = append(s, e.Kind.String())
		}
	}
	return strings.Join(s, " ")
}

func countKind(rec *ingesttest.Recorder, k ingest.LifecycleKind) int {
	n := 0
	for _, e := range rec.Events {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// countAgent counts events of kind k for agent index idx of task.
func countAgent(rec *ingesttest.Recorder, k ingest.LifecycleKind, task string, idx int) int {
	n := 0
	for _, e := range rec.Events {
		if e.Kind == k && e.Run.TaskID == task && e.Agent.Index == idx {
			n++
		}
	}
	return n
}

// finalRun returns the run (task, run) as recorded by its only RunFinalized.
func finalRun(t testing.TB, rec *ingesttest.Recorder, task, run string) ingest.Run {
	t.Helper()
	var out []ingest.Run
	for _, e := range rec.Events {
		if e.Kind == ingest.RunFinalized && e.Run.TaskID == task && e.Run.RunID == run {
			out = append(out, e.Run)
		}
	}
	if len(out) != 1 {
		t.Fatalf("run %s/%s finalized %d times, want 1; kinds: %s", task, run, len(out), kindsOf(rec))
	}
	return out[0]
}

func agentOf(t testing.TB, r ingest.Run, idx int) ingest.Agent {
	t.Helper()
	for _, a := range r.Agents {
		if a.Index == idx {
			return a
		}
	}
	t.Fatalf("run %s has no agent %d (agents %+v)", r.TaskID, idx, r.Agents)
	return ingest.Agent{}
}

// violationCounts returns the non-zero violation counters.
func violationCounts(s *ingest.Stats) map[ingest.Violation]int64 {
	m := map[ingest.Violation]int64{}
	for _, v := range ingest.Violations() {
		if n := s.Violations(v); n != 0 {
			m[v] = n
		}
	}
	return m
}

// corpusFiles lists every recording of ../testdata/corpus.
func corpusFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "testdata", "corpus", "*", "*.ndjson"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files (%v)", err)
	}
	return files
}

// corpusLines returns every line of every corpus file.
func corpusLines(t testing.TB) [][]byte {
	t.Helper()
	var out [][]byte
	for _, f := range corpusFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" {
				out = append(out, []byte(l))
			}
		}
	}
	return out
}
