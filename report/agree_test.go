// TestOutputsAgree feeds streams through one pipeline with every sink
// attached (metrics, traces, a Recorder) and checks that the outputs read
// the same times and counts: the `replay --summary.json` object of each finalized
// workflow run, its spans, its waterfall header and the metrics. Issue #17
// made the Tracker the one clock; this is what catches a sink that derives
// a time of its own again.
package report_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/durtext"
	"github.com/cbc-otel/cbc-otel/internal/ingesttest"
	"github.com/cbc-otel/cbc-otel/metrics"
	"github.com/cbc-otel/cbc-otel/report"
	"github.com/cbc-otel/cbc-otel/tap"
	"github.com/cbc-otel/cbc-otel/traces"
)

// agreeT0 is the epoch-ms origin of the generated streams.
const agreeT0 int64 = 1_796_000_000_000

type obj = map[string]any

// outputs is what one pipeline with every sink produced.
type outputs struct {
	runs  []ingest.Run // finalized workflow runs
	tasks []ingest.Run // ended plain tasks
	spans tracetest.SpanStubs
	reg   prometheus.Gatherer
}

// runAll feeds one stream through a pipeline with the metrics sink, the
// traces sink (in-memory exporter, deterministic ids) and a Recorder.
func runAll(t *testing.T, caps ingest.Caps, feed func(p *ingest.Pipeline)) outputs {
	t.Helper()
	m, err := metrics.New(metrics.Options{NoRuntimeCollectors: true})
	if err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(traces.NewIDGenerator()))
	defer tp.Shutdown(context.Background())
	rec := new(ingesttest.Recorder)
	p := ingest.NewPipeline(ingest.PipelineOptions{Tracker: ingest.TrackerOptions{
		Sinks: []ingest.Sink{m, traces.New(tp, traces.Options{}), rec}, Caps: caps, Grace: ingest.DefaultGrace}})
	feed(p)
	p.Close()
	out := outputs{spans: exp.GetSpans(), reg: m.Registry()}
	for _, e := range rec.Events {
		if e.Kind == ingest.RunFinalized && e.Run.Workflow {
			out.runs = append(out.runs, e.Run)
		}
		if e.Kind == ingest.TaskEnded {
			out.tasks = append(out.tasks, e.Run)
		}
	}
	return out
}

func msOf(tm time.Time) int64 { return tm.UnixMilli() }

// checkAgree compares every output of one stream.
func checkAgree(t *testing.T, out outputs) {
	t.Helper()
	if len(out.runs) == 0 {
		t.Fatal("no finalized workflow runs")
	}
	byID := map[trace.SpanID]tracetest.SpanStub{}
	perTrace := map[trace.TraceID]int{}
	for _, s := range out.spans {
		byID[s.SpanContext.SpanID()] = s
		perTrace[s.SpanContext.TraceID()]++
		if s.EndTime.Before(s.StartTime) {
			t.Errorf("span %s ends before it starts", s.Name)
		}
	}
	// Every child of a span of its own run lies within it (exported after
	// it: agents end first, phases and the run at finalize). A run nested
	// under its launcher, or resuming its first run, starts no earlier
	// than it, and may outlive it (PROTOCOL.md "Nested runs": a
	// sub-agent's shell, a fork's workflow, a resume).
	runOf := func(s tracetest.SpanStub) string {
		var task, run string
		for _, kv := range s.Attributes {
			switch kv.Key {
			case traces.AttrTaskID:
				task = kv.Value.AsString()
			case traces.AttrRunID:
				run = kv.Value.AsString()
			}
		}
		return task + "/" + run
	}
	for _, s := range out.spans {
		if !s.Parent.IsValid() {
			continue
		}
		p, ok := byID[s.Parent.SpanID()]
		if !ok {
			t.Errorf("span %s: parent %s not exported", s.Name, s.Parent.SpanID())
			continue
		}
		if runOf(s) != runOf(p) {
			if s.StartTime.Before(p.StartTime) {
				t.Errorf("span %s starts at %d, before its launcher %s at %d", s.Name, msOf(s.StartTime), p.Name, msOf(p.StartTime))
			}
			continue
		}
		if s.StartTime.Before(p.StartTime) || s.EndTime.After(p.EndTime) {
			t.Errorf("span %s [%d, %d] outside its parent %s [%d, %d]", s.Name, msOf(s.StartTime), msOf(s.EndTime), p.Name, msOf(p.StartTime), msOf(p.EndTime))
		}
	}

	type lk struct{ a, b string }
	wantPerTrace := map[trace.TraceID]int{}
	defer func() {
		for tid, want := range wantPerTrace {
			if n := perTrace[tid]; n != want {
				t.Errorf("trace %s: %d spans, want %d (one per run, phase and agent)", tid, n, want)
			}
		}
	}()
	for i := range out.tasks {
		tid, _ := traces.IDs(&out.tasks[i])
		wantPerTrace[tid]++ // one invoke_task span, in its trace
	}
	runsTotal, durCount, agents := map[lk]float64{}, map[lk]float64{}, map[lk]float64{}
	durSum := map[lk]float64{}
	for i := range out.runs {
		r := &out.runs[i]
		w := report.WorkflowOf(r)
		what := fmt.Sprintf("run %s/%s", w.TaskID, w.RunID)
		if w.DurationMs != w.End-w.Start {
			t.Errorf("%s: duration_ms %d, end − start %d", what, w.DurationMs, w.End-w.Start)
		}
		tid, rootID := traces.IDs(r)
		spanOf := func(kind string, id trace.SpanID, start, end int64) {
			t.Helper()
			s, ok := byID[id]
			if !ok {
				t.Errorf("%s: no %s span", what, kind)
				return
			}
			if s.SpanContext.TraceID() != tid {
				t.Errorf("%s: %s span in trace %s, want %s", what, kind, s.SpanContext.TraceID(), tid)
			}
			if msOf(s.StartTime) != start || msOf(s.EndTime) != end {
				t.Errorf("%s: %s span %q [%d, %d], JSON [%d, %d]", what, kind, s.Name, msOf(s.StartTime), msOf(s.EndTime), start, end)
			}
		}
		spanOf("invoke_workflow", rootID, w.Start, w.End)
		if s := byID[rootID]; !strings.HasPrefix(s.Name, traces.OpInvokeWorkflow) {
			t.Errorf("%s: root span named %q", what, s.Name)
		}
		for _, p := range w.Phases {
			spanOf(fmt.Sprintf("workflow_phase %d", p.Index), traces.SpanID(w.TaskID, w.RunID, "phase", p.Index), p.Start, p.End)
		}
		for _, a := range w.Agents {
			spanOf(fmt.Sprintf("invoke_agent %d", a.Index), traces.SpanID(w.TaskID, w.RunID, "agent", a.Index), a.Start, a.End)
		}
		// Exactly one span per run, phase and agent: nothing twice (a
		// nested run's are in its chain's trace: counted below).
		wantPerTrace[tid] += 1 + len(w.Phases) + len(w.Agents)

		var wf bytes.Buffer
		if err := report.WriteWaterfall(&wf, []ingest.Run{*r}, nil, report.WaterfallOptions{Width: 100}); err != nil {
			t.Fatal(err)
		}
		header, _, _ := strings.Cut(wf.String(), "\n")
		if want := fmt.Sprintf("  %s  %s  %d tokens", w.Status, durtext.Millis(w.End-w.Start), w.Tokens); !strings.Contains(header, want) {
			t.Errorf("%s: waterfall header %q lacks %q", what, header, want)
		}

		label := w.Workflow
		if label == "" {
			label = metrics.LabelUnknown
		}
		runsTotal[lk{label, w.Status}]++
		if w.Start > 0 { // a run with no known time has no duration
			durCount[lk{label, w.Status}]++
			durSum[lk{label, w.Status}] += float64(w.End-w.Start) / 1000
		}
		for _, a := range w.Agents {
			agents[lk{label, a.State}]++
		}
	}

	// The metrics agree with the JSON objects.
	gotRuns, gotCount, gotSum, gotAgents := map[lk]float64{}, map[lk]float64{}, map[lk]float64{}, map[lk]float64{}
	mfs, err := out.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			switch mf.GetName() {
			case "cbc_workflow_runs_total":
				if v := m.GetCounter().GetValue(); v != 0 {
					gotRuns[lk{l["workflow"], l["status"]}] = v
				}
			case "cbc_workflow_duration_seconds":
				if n := m.GetHistogram().GetSampleCount(); n != 0 {
					gotCount[lk{l["workflow"], l["status"]}] = float64(n)
					gotSum[lk{l["workflow"], l["status"]}] = m.GetHistogram().GetSampleSum()
				}
			case "cbc_workflow_agents_total":
				if v := m.GetCounter().GetValue(); v != 0 {
					gotAgents[lk{l["workflow"], l["state"]}] = v
				}
			}
		}
	}
	cmpMaps := func(what string, got, want map[lk]float64, tol float64) {
		t.Helper()
		keys := map[lk]bool{}
		for k := range got {
			keys[k] = true
		}
		for k := range want {
			keys[k] = true
		}
		for k := range keys {
			if math.Abs(got[k]-want[k]) > tol {
				t.Errorf("%s{%s,%s} = %v, JSON says %v", what, k.a, k.b, got[k], want[k])
			}
		}
	}
	cmpMaps("cbc_workflow_runs_total", gotRuns, runsTotal, 0)
	cmpMaps("cbc_workflow_duration_seconds count", gotCount, durCount, 0)
	cmpMaps("cbc_workflow_duration_seconds sum", gotSum, durSum, 1e-6)
	cmpMaps("cbc_workflow_agents_total", gotAgents, agents, 0)
}

// hostileStream generates a stream of interleaved workflow runs: agents
// ending in random order, stops with late flips (some past the grace
// window), progress before task_started, missing and implausible times,
// ends before starts, an end_time behind the agents', abandoned runs.
func hostileStream(rng *rand.Rand) []hostileWrite {
	type line struct {
		at    int64
		seq   int
		stdin bool
		v     obj
	}
	var lines []line
	add := func(at int64, in bool, v obj) { lines = append(lines, line{at, len(lines), in, v}) }
	tm := func(m obj, k string, v int64) {
		switch p := rng.Float64(); {
		case p < 0.07:
		case p < 0.11:
			m[k] = []any{v / 1000, -5, 9e15, 4_102_444_800_000}[rng.IntN(4)]
		default:
			m[k] = v
		}
	}
	for ri := range 1 + rng.IntN(4) {
		task, sess := fmt.Sprintf("h%d", ri), fmt.Sprintf("S%d", ri)
		t0 := agreeT0 + rng.Int64N(20_000)
		nPh, nAg := 1+rng.IntN(3), 1+rng.IntN(6)
		type ag struct{ q, s, e int64 }
		ags := make([]ag, nAg)
		final := make([]string, nAg)
		var last int64
		for i := range ags {
			q := t0 + rng.Int64N(2000)
			s := q + rng.Int64N(1000)
			ags[i] = ag{q, s, s + 1 + rng.Int64N(4000)}
			final[i] = []string{"done", "done", "done", "error", "cached"}[rng.IntN(5)]
			last = max(last, ags[i].e)
		}
		end := []string{"completed", "failed", "stopped", "stopped", "abandoned"}[rng.IntN(5)]
		tEnd := last + 1 + rng.Int64N(300)
		if end != "completed" {
			tEnd = t0 + 200 + rng.Int64N(last-t0+300)
		}
		snap := func(now int64, flip bool) obj {
			var rows []any
			for p := 1; p <= nPh; p++ {
				rows = append(rows, obj{"type": "workflow_phase", "index": p, "title": fmt.Sprintf("p%d", p)})
			}
			for i, a := range ags {
				r := obj{"type": "workflow_agent", "index": i + 1, "phaseIndex": 1 + i%nPh, "label": fmt.Sprintf("a%d", i+1), "agentId": fmt.Sprintf("v1:%d", i)}
				tm(r, "queuedAt", a.q)
				switch {
				case flip && a.s <= tEnd && a.e > tEnd:
					r["state"], r["error"] = "error", "subagent aborted"
					tm(r, "startedAt", a.s)
					if rng.IntN(2) == 0 {
						tm(r, "endedAt", now)
					}
				case a.e <= now:
					r["state"] = final[i]
					tm(r, "startedAt", a.s)
					if rng.Float64() < 0.05 {
						r["endedAt"] = a.s - 1000
					} else {
						tm(r, "endedAt", a.e)
					}
				case a.s <= now:
					r["state"] = "start"
					tm(r, "startedAt", a.s)
				default:
					r["state"] = "start"
				}
				rows = append(rows, r)
			}
			return obj{"type": "system", "subtype": "task_progress", "task_id": task, "session_id": sess, "workflow_progress": rows,
				"usage": obj{"total_tokens": rng.IntN(900), "tool_uses": rng.IntN(9), "duration_ms": now - t0}}
		}
		now := t0
		if rng.Float64() < 0.2 {
			// Adopted, named 1 ms later. written_at keeps the hold on the
			// run's own clock (TestOutputsAgreeLateName is the other case).
			first := snap(now, false)
			first["written_at"] = time.UnixMilli(now).UTC().Format("2006-01-02T15:04:05.000Z")
			add(now, false, first)
			now++
		}
		st := obj{"type": "system", "subtype": "task_started", "task_id": task, "task_type": "local_workflow", "workflow_name": "flow-" + task, "session_id": sess}
		if rng.IntN(2) == 0 {
			st["written_at"] = time.UnixMilli(t0).UTC().Format("2006-01-02T15:04:05.000Z")
		}
		add(now, false, st)
		for now < tEnd {
			now = min(tEnd, now+100+rng.Int64N(1500))
			add(now, false, snap(now, false))
		}
		if end == "abandoned" {
			continue
		}
		if end == "stopped" {
			add(tEnd, true, obj{"type": "control_request", "request_id": "x", "request": obj{"subtype": "interrupt", "session_id": sess}})
		}
		patch := obj{"status": map[string]string{"completed": "completed", "failed": "failed", "stopped": "killed"}[end]}
		tm(patch, "end_time", tEnd-rng.Int64N(300))
		add(tEnd, false, obj{"type": "system", "subtype": "task_updated", "task_id": task, "patch": patch})
		add(tEnd, false, obj{"type": "system", "subtype": "task_notification", "task_id": task, "status": end, "session_id": sess,
			"usage": obj{"total_tokens": rng.IntN(5000), "tool_uses": rng.IntN(50), "duration_ms": max(0, tEnd-t0-rng.Int64N(300))}})
		if end == "stopped" && rng.Float64() < 0.8 {
			at := tEnd + rng.Int64N(7000)
			add(at, false, snap(at, true))
		}
	}
	sort.SliceStable(lines, func(i, j int) bool {
		if lines[i].at != lines[j].at {
			return lines[i].at < lines[j].at
		}
		return lines[i].seq < lines[j].seq
	})
	out := make([]hostileWrite, 0, len(lines))
	for _, l := range lines {
		b, err := json.Marshal(l.v)
		if err != nil {
			panic(err)
		}
		src := tap.SourceStdout
		if l.stdin {
			src = tap.SourceStdin
		}
		out = append(out, hostileWrite{src, append(b, '\n')})
	}
	return out
}

// hostileWrite is one line of a generated stream and where it goes.
type hostileWrite struct {
	src  tap.Source
	line []byte
}

func TestOutputsAgree(t *testing.T) {
	streams, err := filepath.Glob("../testdata/simulate/*.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	streams = slices.DeleteFunc(streams, func(s string) bool { return strings.HasSuffix(s, ".expect.ndjson") })
	if len(streams) == 0 {
		t.Fatal("no simulator streams")
	}
	for _, s := range streams {
		t.Run(filepath.Base(s), func(t *testing.T) {
			b, err := os.ReadFile(s)
			if err != nil {
				t.Fatal(err)
			}
			checkAgree(t, runAll(t, ingest.Caps{}, func(p *ingest.Pipeline) { p.Write(tap.SourceStdout, b) }))
		})
	}
	for seed := range uint64(40) {
		t.Run(fmt.Sprintf("hostile-%d", seed), func(t *testing.T) {
			writes := hostileStream(rand.New(rand.NewPCG(seed, 7)))
			var caps ingest.Caps
			if seed%5 == 4 {
				caps = ingest.Caps{Runs: 2, Grace: 1, Agents: 4} // Phases: TestOutputsAgreePhaseCap
			}
			checkAgree(t, runAll(t, caps, func(p *ingest.Pipeline) {
				for _, w := range writes {
					p.Write(w.src, w.line)
				}
			}))
		})
	}
}

// TestOutputsAgreeLateName: a run adopted from a task_progress is announced
// unnamed once a grace window passes without its task_started; a
// task_started that comes later still names the run. Every output must then
// call the run the same: here the JSON object and the spans take the late
// name while the metrics keep the label fixed at announcement.
func TestOutputsAgreeLateName(t *testing.T) {
	ln := func(v obj) []byte {
		b, _ := json.Marshal(v)
		return append(b, '\n')
	}
	out := runAll(t, ingest.Caps{}, func(p *ingest.Pipeline) {
		p.Write(tap.SourceStdout, ln(obj{"type": "system", "subtype": "task_progress", "task_id": "w1",
			"workflow_progress": []any{obj{"type": "workflow_agent", "index": 1, "state": "start", "startedAt": agreeT0}}}))
		p.Write(tap.SourceStdout, ln(obj{"type": "system", "subtype": "task_started", "task_id": "w1", "task_type": "local_workflow",
			"workflow_name": "real", "written_at": time.UnixMilli(agreeT0 + 6000).UTC().Format("2006-01-02T15:04:05.000Z")}))
		p.Write(tap.SourceStdout, ln(obj{"type": "system", "subtype": "task_notification", "task_id": "w1", "status": "completed"}))
	})
	checkAgree(t, out)
}

// TestOutputsAgreePhaseCap: past the Phases cap the Tracker no longer
// derives the phases agents name, so an agent of such a phase must not be
// exported as the child of a phase span that never exists.
func TestOutputsAgreePhaseCap(t *testing.T) {
	ln := func(v obj) []byte {
		b, _ := json.Marshal(v)
		return append(b, '\n')
	}
	out := runAll(t, ingest.Caps{Phases: 1}, func(p *ingest.Pipeline) {
		p.Write(tap.SourceStdout, ln(obj{"type": "system", "subtype": "task_started", "task_id": "w1", "task_type": "local_workflow", "workflow_name": "wf"}))
		p.Write(tap.SourceStdout, ln(obj{"type": "system", "subtype": "task_progress", "task_id": "w1", "workflow_progress": []any{
			obj{"type": "workflow_phase", "index": 1, "title": "one"},
			obj{"type": "workflow_agent", "index": 1, "phaseIndex": 1, "state": "done", "startedAt": agreeT0, "endedAt": agreeT0 + 10},
			obj{"type": "workflow_agent", "index": 2, "phaseIndex": 2, "state": "done", "startedAt": agreeT0, "endedAt": agreeT0 + 20},
		}}))
		p.Write(tap.SourceStdout, ln(obj{"type": "system", "subtype": "task_notification", "task_id": "w1", "status": "completed"}))
	})
	checkAgree(t, out)
}
