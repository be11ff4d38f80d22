package metrics

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/exposition"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/ingesttest"
	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

const t0 = int64(1796205994000) // epoch ms of the synthetic streams

// driver feeds decoded events straight into a Tracker whose only sink is
// a Metrics, so a test states the protocol story it tells.
type driver struct {
	t  *testing.T
	tr *ingest.Tracker
	m  *Metrics
}

func newDriver(t *testing.T, grace time.Duration, opts Options) *driver {
	m := newTest(t, opts)
	return &driver{t: t, m: m, tr: ingest.NewTracker(ingest.TrackerOptions{Grace: grace, Sinks: []ingest.Sink{m}})}
}

func (d *driver) started(now int64, task, name string) {
	d.tr.Handle(&streamjson.Event{Kind: streamjson.KindTaskStarted, TaskID: task, TaskType: "local_workflow", WorkflowName: name}, now)
}

func (d *driver) progress(now int64, task string, usage streamjson.Usage, entries ...streamjson.Entry) {
	d.tr.Handle(&streamjson.Event{Kind: streamjson.KindTaskProgress, TaskID: task, HasProgress: true, HasUsage: true, Usage: usage, Entries: entries}, now)
}

func (d *driver) notify(now int64, task, status string) {
	d.tr.Handle(&streamjson.Event{Kind: streamjson.KindTaskNotification, TaskID: task, Status: status}, now)
}

func (d *driver) value(name, labels string) float64 {
	d.t.Helper()
	return series(d.t, d.m.Registry(), name)[labels]
}

func agent(i int, state string, start, end int64) streamjson.Entry {
	return streamjson.Entry{Index: i, AgentID: fmt.Sprintf("a%d", i), Label: fmt.Sprintf("agent-%d", i), State: state, StartedAt: start, EndedAt: end}
}

// TestLateFlipCountedOnce: cbc flips an in-flight agent to error after the
// stopped notification; within the grace window that is its final state,
// and the agent is counted once, as error, never as abandoned.
func TestLateFlipCountedOnce(t *testing.T) {
	d := newDriver(t, 5*time.Second, Options{})
	d.started(t0, "t1", "flow")
	d.progress(t0+100, "t1", streamjson.Usage{TotalTokens: 10}, agent(1, "done", t0+10, t0+90), agent(2, "start", t0+20, 0))
	d.notify(t0+200, "t1", "stopped")
	if got := d.value("cbc_workflow_agents_total", "state=error,workflow=flow"); got != 0 {
		t.Fatalf("error agents before the flip = %v", got)
	}
	d.progress(t0+300, "t1", streamjson.Usage{}, agent(1, "done", t0+10, t0+90), agent(2, "error", t0+20, t0+290))
	// A second late snapshot repeating the final state changes nothing.
	d.progress(t0+400, "t1", streamjson.Usage{}, agent(1, "done", t0+10, t0+90), agent(2, "error", t0+20, t0+290))
	d.tr.Advance(t0 + 10_000) // the grace window closes
	d.tr.Close(t0 + 20_000)

	for state, want := range map[string]float64{"done": 1, "error": 1, "abandoned": 0, "not_started": 0, "cached": 0} {
		if got := d.value("cbc_workflow_agents_total", "state="+state+",workflow=flow"); got != want {
			t.Errorf("agents_total{state=%s} = %v, want %v", state, got, want)
		}
	}
	if got := d.value("cbc_workflow_agent_duration_seconds", "state=error,workflow=flow"); got != 1 {
		t.Errorf("error agent durations observed = %v, want 1", got)
	}
	if got := d.value("cbc_workflow_runs_total", "status=stopped,workflow=flow"); got != 1 {
		t.Errorf("runs_total{stopped} = %v, want 1", got)
	}
	// Tokens are the usage at the notification (the late snapshot's zero
	// usage arrives after it and must not count).
	if got := d.value("cbc_workflow_tokens_total", "workflow=flow"); got != 10 {
		t.Errorf("tokens_total = %v, want 10", got)
	}
}

// TestAbandonedRun: the stream ends without a notification; the run is
// abandoned, its running agent abandoned, its queued agent not_started,
// and the active gauge returns to zero.
func TestAbandonedRun(t *testing.T) {
	d := newDriver(t, time.Second, Options{})
	d.started(t0, "t1", "flow")
	queued := streamjson.Entry{Index: 2, Label: "later", State: "start", QueuedAt: t0 + 5}
	d.progress(t0+100, "t1", streamjson.Usage{TotalTokens: 7, ToolUses: 2}, agent(1, "start", t0+10, 0), queued)
	if got := d.value("cbc_workflow_runs_active", "workflow=flow"); got != 1 {
		t.Fatalf("runs_active = %v while running, want 1", got)
	}
	d.tr.Close(t0 + 1000)
	checks := map[string]float64{
		"cbc_workflow_runs_total/status=abandoned,workflow=flow":    1,
		"cbc_workflow_runs_active/workflow=flow":                    0,
		"cbc_workflow_agents_total/state=abandoned,workflow=flow":   1,
		"cbc_workflow_agents_total/state=not_started,workflow=flow": 1,
		"cbc_workflow_tokens_total/workflow=flow":                   7,
		"cbc_workflow_tool_uses_total/workflow=flow":                2,
		// the abandoned agent ran from its start to the run's end
		"cbc_workflow_agent_duration_seconds/state=abandoned,workflow=flow": 1,
	}
	for k, want := range checks {
		name, labels, _ := strings.Cut(k, "/")
		if got := d.value(name, labels); got != want {
			t.Errorf("%s{%s} = %v, want %v", name, labels, got, want)
		}
	}
}

// TestDuplicateNotification: a second notification, inside or after the
// grace window, is a violation and never a second terminal count.
func TestDuplicateNotification(t *testing.T) {
	d := newDriver(t, time.Second, Options{})
	d.started(t0, "t1", "flow")
	d.progress(t0+100, "t1", streamjson.Usage{TotalTokens: 5}, agent(1, "done", t0+10, t0+90))
	d.notify(t0+200, "t1", "completed")
	d.notify(t0+300, "t1", "completed") // inside the grace window
	d.notify(t0+400, "t1", "failed")    // contradicting, still inside
	d.tr.Advance(t0 + 5000)
	d.notify(t0+6000, "t1", "completed") // after it: a tombstone remembers the run
	d.tr.Close(t0 + 7000)
	if got := sumValues(series(t, d.m.Registry(), "cbc_workflow_runs_total")); got != 1 {
		t.Errorf("runs_total = %v, want 1", got)
	}
	if got := d.value("cbc_workflow_runs_total", "status=completed,workflow=flow"); got != 1 {
		t.Errorf("runs_total{completed} = %v, want 1", got)
	}
	if got := d.value("cbc_workflow_tokens_total", "workflow=flow"); got != 5 {
		t.Errorf("tokens_total = %v, want 5 (counted once)", got)
	}
	if got := d.value("cbc_protocol_violations_total", "kind=duplicate_notification"); got != 3 {
		t.Errorf("violations{duplicate_notification} = %v, want 3", got)
	}
}

// TestDuplicateEventsToSink: the sink itself guards against being told
// twice, whatever the producer (a second Tracker sharing the sink, a bug).
func TestDuplicateEventsToSink(t *testing.T) {
	m := newTest(t, Options{})
	r := &ingest.Run{Workflow: true, Name: "flow", Status: ingest.StatusCompleted, Start: t0, End: t0 + 1500,
		Usage: streamjson.Usage{TotalTokens: 3}}
	a := &ingest.Agent{Index: 1, State: ingest.AgentDone, Start: t0, End: t0 + 100}
	for range 3 {
		m.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
		m.Observe(ingest.Lifecycle{Kind: ingest.AgentEnded, Run: r, Agent: a})
		m.Observe(ingest.Lifecycle{Kind: ingest.RunFinished, Run: r})
	}
	s := series(t, m.Registry(), "cbc_workflow_runs_total")
	if s["status=completed,workflow=flow"] != 1 || sumValues(s) != 1 {
		t.Errorf("runs_total = %v, want one completed", s)
	}
	if got := series(t, m.Registry(), "cbc_workflow_agents_total")["state=done,workflow=flow"]; got != 1 {
		t.Errorf("agents_total{done} = %v, want 1", got)
	}
	if got := series(t, m.Registry(), "cbc_workflow_runs_started_total")["workflow=flow"]; got != 1 {
		t.Errorf("runs_started_total = %v, want 1", got)
	}
	if got := series(t, m.Registry(), "cbc_workflow_tokens_total")["workflow=flow"]; got != 3 {
		t.Errorf("tokens_total = %v, want 3", got)
	}
}

// TestActiveNeverNegative throws random, partly nonsensical lifecycle
// sequences at the sink and checks the gauge after every event: it never
// goes below zero and equals the runs started but not finished.
func TestActiveNeverNegative(t *testing.T) {
	m := newTest(t, Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	runs := make([]*ingest.Run, 20)
	for i := range runs {
		runs[i] = &ingest.Run{Workflow: true, Name: fmt.Sprintf("wf%d", i%3), Status: ingest.StatusCompleted}
	}
	kinds := []ingest.LifecycleKind{ingest.RunStarted, ingest.RunFinished, ingest.RunFinalized, ingest.RunUpdated}
	open := map[*ingest.Run]bool{}
	gone := map[*ingest.Run]bool{}
	for i := range 2000 {
		idx := rng.IntN(len(runs))
		r := runs[idx]
		k := kinds[rng.IntN(len(kinds))]
		if gone[r] {
			// The Tracker never mentions a finalized run again.
			r = &ingest.Run{Workflow: true, Name: r.Name, Status: ingest.StatusFailed}
			runs[idx] = r
		}
		m.Observe(ingest.Lifecycle{Kind: k, Run: r})
		switch k {
		case ingest.RunStarted:
			if _, seen := open[r]; !seen {
				open[r] = true
			}
		case ingest.RunFinished:
			open[r] = false // finished without a start is never counted active
		case ingest.RunFinalized:
			delete(open, r)
			gone[r] = true
		}
		want := 0.0
		for _, active := range open {
			if active {
				want++
			}
		}
		act := series(t, m.Registry(), "cbc_workflow_runs_active")
		for k, v := range act {
			if v < 0 {
				t.Fatalf("step %d: runs_active{%s} = %v", i, k, v)
			}
		}
		if got := sumValues(act); got != want {
			t.Fatalf("step %d (%v): sum runs_active = %v, want %v", i, k, got, want)
		}
	}
}

// TestAdoptedRun: a follower joining mid-stream sees a snapshot of a run
// whose start it missed; the Tracker adopts it ("unknown" workflow), and it
// is counted started, active, and terminal exactly once.
func TestAdoptedRun(t *testing.T) {
	d := newDriver(t, time.Second, Options{})
	d.progress(t0+100, "late", streamjson.Usage{TotalTokens: 4}, agent(1, "done", t0+10, t0+90))
	// Held back one grace window for a late task_started to name it.
	if got := d.value("cbc_workflow_runs_active", "workflow=unknown"); got != 0 {
		t.Fatalf("runs_active{unknown} = %v before the wait, want 0", got)
	}
	d.tr.Advance(t0 + 1100)
	if got := d.value("cbc_workflow_runs_active", "workflow=unknown"); got != 1 {
		t.Fatalf("runs_active{unknown} = %v, want 1", got)
	}
	d.notify(t0+200, "late", "completed")
	d.tr.Close(t0 + 5000)
	if got := d.value("cbc_workflow_runs_total", "status=completed,workflow=unknown"); got != 1 {
		t.Errorf("runs_total{unknown,completed} = %v, want 1", got)
	}
	if got := d.value("cbc_workflow_runs_active", "workflow=unknown"); got != 0 {
		t.Errorf("runs_active{unknown} = %v, want 0", got)
	}
	if got := d.value("cbc_protocol_violations_total", "kind=unknown_task"); got != 1 {
		t.Errorf("violations{unknown_task} = %v, want 1", got)
	}
}

// TestCardinalityCap: 100,000 distinct workflow names make at most
// MaxWorkflows+1 workflow label values ("other" being the +1); the rest
// are counted as overflow.
func TestCardinalityCap(t *testing.T) {
	const names, maxWF = 100_000, 50
	m := newTest(t, Options{MaxWorkflows: maxWF})
	for i := range names {
		r := &ingest.Run{Workflow: true, Name: fmt.Sprintf("workflow-%d", i), Status: ingest.StatusCompleted,
			Start: t0, End: t0 + int64(i%5000), Usage: streamjson.Usage{TotalTokens: 1}}
		if i%2 == 0 { // half the runs with a known cost: both cost families fold too
			r.Cost.Add(cost.Model{Model: "m", CostUSD: 0.01}, 1)
		}
		m.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
		m.Observe(ingest.Lifecycle{Kind: ingest.AgentEnded, Run: r, Agent: &ingest.Agent{Index: 1, State: ingest.AgentDone, Start: t0, End: t0 + 1}})
		m.Observe(ingest.Lifecycle{Kind: ingest.RunFinished, Run: r})
		m.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: r})
	}
	labels := map[string]bool{}
	for _, name := range []string{"cbc_workflow_runs_total", "cbc_workflow_runs_started_total", "cbc_workflow_agents_total",
		"cbc_workflow_duration_seconds", "cbc_workflow_tokens_total", "cbc_workflow_run_cost_usd", "cbc_workflow_runs_cost_unknown_total"} {
		for k := range series(t, m.Registry(), name) {
			for _, kv := range strings.Split(k, ",") {
				if v, ok := strings.CutPrefix(kv, "workflow="); ok {
					labels[strings.TrimSuffix(v, "__sum")] = true
				}
			}
		}
	}
	if len(labels) != maxWF+1 || !labels[LabelOther] {
		t.Errorf("%d workflow label values (other present: %v), want %d", len(labels), labels[LabelOther], maxWF+1)
	}
	n, err := testutil.GatherAndCount(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	// Per workflow value: 4 runs_total + 5 agents_total + started, active,
	// tokens, tool uses, cost, cost unknown + at most one duration, one
	// agent-duration and one run-cost histogram (counted as one series
	// each here); plus the fixed families.
	if limit := (maxWF+1)*(4+5+6+3) + 64; n > limit {
		t.Errorf("%d series, want at most %d", n, limit)
	}
	if got := testutil.ToFloat64(m.wfOverflow); got != names-maxWF {
		t.Errorf("overflow counter = %v, want %v", got, names-maxWF)
	}
	if got := series(t, m.Registry(), "cbc_workflow_runs_total")["status=completed,workflow=other"]; got != names-maxWF {
		t.Errorf("runs_total{other} = %v, want %v", got, names-maxWF)
	}
	if len(m.runs) != 0 {
		t.Errorf("%d runs remembered after finalization, want 0", len(m.runs))
	}
}

// TestHostileNames: control characters, bidi marks, invalid UTF-8 and huge
// names become bounded, valid, printable label values.
func TestHostileNames(t *testing.T) {
	m := newTest(t, Options{})
	hostile := []string{
		"evil\x00\x1b[31mred\x7f\u0085",
		"\u202eenod\u202c \u2066x\u2069 \u200bzero-width\ufeff",
		"bad\xff\xfeutf8\xc0",
		strings.Repeat("long-name-", 1024), // 10 KiB
		strings.Repeat("名", 4000),          // multi-byte, cut on a rune boundary
		"\n\t \r",                          // only whitespace: unknown
		"",
		`quote"back\slash{}=,`,
	}
	for _, name := range hostile {
		// The names reach the sink through ingest's boundary (a
		// checkpoint's Restore), as they really can: the sink only cuts.
		runs, err := ingesttest.Restored(ingest.Run{TaskID: "w", Workflow: true, Name: name, Status: ingest.StatusFailed, Start: t0, End: t0 + 1000},
			ingest.Run{TaskID: "t", TaskType: name, Status: ingest.StatusCompleted})
		if err != nil {
			t.Fatal(err)
		}
		r := runs[0]
		m.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
		m.Observe(ingest.Lifecycle{Kind: ingest.RunFinished, Run: r})
		m.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: r})
		task := runs[1]
		m.Observe(ingest.Lifecycle{Kind: ingest.TaskStarted, Run: task})
		m.Observe(ingest.Lifecycle{Kind: ingest.TaskEnded, Run: task})
	}
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	seen := 0
	for _, mf := range mfs {
		for _, met := range mf.GetMetric() {
			for _, l := range met.GetLabel() {
				v := l.GetValue()
				seen++
				if !utf8.ValidString(v) || len(v) > maxLabelLen {
					t.Errorf("%s{%s}: invalid or long label value (%d bytes)", mf.GetName(), l.GetName(), len(v))
				}
				for _, r := range v {
					if unicode.IsControl(r) || r == '\u202e' || r == '\u2066' || r == '\u200b' || r == '\ufeff' {
						t.Errorf("%s{%s=%q}: contains %U", mf.GetName(), l.GetName(), v, r)
					}
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no labels gathered")
	}
	if got := series(t, m.Registry(), "cbc_workflow_runs_total")["status=failed,workflow=unknown"]; got != 2 {
		t.Errorf("runs_total{unknown} = %v, want 2 (empty and whitespace-only names)", got)
	}
	// The exposition is well-formed text.
	srv := httptest.NewServer(exposition.Handler(exposition.Options{Gatherer: m.Registry()}))
	defer srv.Close()
	body := get(t, srv.Client(), srv.URL+"/metrics", nil)
	if !strings.Contains(body, `workflow="quote\"back\\slash{}=,"`) {
		t.Errorf("escaped label missing from exposition")
	}
}

// TestExemplars: with an Exemplar func, runs_total and the duration
// histogram carry {trace_id, span_id} exemplars in OpenMetrics, made once
// per run.
func TestExemplars(t *testing.T) {
	calls := 0
	m := newTest(t, Options{Exemplar: func(r *ingest.Run) (string, string) {
		calls++
		if r.TaskID == "bad" {
			return strings.Repeat("x", 200), "y" // too long: dropped, no panic
		}
		return "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	}})
	for _, id := range []string{"good", "bad"} {
		r := &ingest.Run{TaskID: id, Workflow: true, Name: "flow-" + id, Status: ingest.StatusCompleted, Start: t0, End: t0 + 42_000}
		m.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
		m.Observe(ingest.Lifecycle{Kind: ingest.RunFinished, Run: r})
		// The duration is observed when the run's times are final.
		m.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: r})
	}
	if calls != 2 {
		t.Errorf("exemplar func called %d times, want once per run (runs_total and duration share it)", calls)
	}
	// A run whose chain's root is named only in its grace window (a
	// task_started after its adopted run ended) is in that root's trace
	// when finalized: its exemplar is made again.
	calls = 0
	r := &ingest.Run{TaskID: "late", Workflow: true, Name: "flow-late", Status: ingest.StatusCompleted, Start: t0, End: t0 + 1_000}
	m.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
	m.Observe(ingest.Lifecycle{Kind: ingest.RunFinished, Run: r})
	r.Parent = ingest.AgentRef{TaskID: "launcher", RootTask: "launcher", RootRun: "r1"}
	m.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: r})
	if calls != 2 {
		t.Errorf("exemplar func called %d times for a run nested after its end, want 2", calls)
	}
	srv := httptest.NewServer(exposition.Handler(exposition.Options{Gatherer: m.Registry()}))
	defer srv.Close()
	om := get(t, srv.Client(), srv.URL+"/metrics", map[string]string{"Accept": "application/openmetrics-text;version=1.0.0"})
	// Exemplar label order is not specified; look for both pairs.
	hasEx := func(line string) bool {
		_, ex, ok := strings.Cut(line, " # {")
		return ok && strings.Contains(ex, `trace_id="4bf92f3577b34da6a3ce929d0e0e4736"`) &&
			strings.Contains(ex, `span_id="00f067aa0ba902b7"`)
	}
	var runLine, bucketLine bool
	for _, line := range strings.Split(om, "\n") {
		if strings.HasPrefix(line, `cbc_workflow_runs_total{status="completed",workflow="flow-good"} 1`) && hasEx(line) {
			runLine = true
		}
		if strings.HasPrefix(line, `cbc_workflow_duration_seconds_bucket{status="completed",workflow="flow-good",le="60.0"} 1`) &&
			hasEx(line) && strings.Contains(line, "} 42") {
			bucketLine = true
		}
		if strings.Contains(line, "flow-bad") && strings.Contains(line, "# {") {
			t.Errorf("invalid exemplar exposed: %s", line)
		}
	}
	if !runLine || !bucketLine {
		t.Errorf("exemplars missing (runs_total: %v, duration bucket: %v) in:\n%s", runLine, bucketLine, grep(om, "flow-good"))
	}
	// Plain text exposition has no exemplars and still works.
	if txt := get(t, srv.Client(), srv.URL+"/metrics", nil); strings.Contains(txt, "trace_id") {
		t.Errorf("exemplar in text format")
	}
}

// TestInterruptMetrics: an interrupt on stdin and the stopped
// notification that answers it make one count and one latency sample.
func TestInterruptMetrics(t *testing.T) {
	d := newDriver(t, time.Second, Options{})
	d.started(t0, "t1", "flow")
	d.progress(t0+100, "t1", streamjson.Usage{}, agent(1, "start", t0+10, 0))
	d.tr.Handle(&streamjson.Event{Kind: streamjson.KindControlRequest, Source: tap.SourceStdin, RequestSubtype: "interrupt"}, t0+1000)
	d.notify(t0+3500, "t1", "stopped")
	d.tr.Close(t0 + 9000)
	if got := testutil.ToFloat64(d.m.interrupts); got != 1 {
		t.Errorf("interrupts_total = %v, want 1", got)
	}
	s := series(t, d.m.Registry(), "cbc_interrupt_stop_seconds")
	if s[""] != 1 || s["__sum"] != 2.5 {
		t.Errorf("interrupt_stop_seconds count/sum = %v/%v, want 1/2.5", s[""], s["__sum"])
	}
}

// TestStatsAndExportCounters: the pipeline's counters and the traces
// exporter's funcs are read at scrape time; closed label sets are
// pre-created.
func TestStatsAndExportCounters(t *testing.T) {
	stats := new(ingest.Stats)
	stats.AddDropped(tap.SourceStdin, 4096)
	m := newTest(t, Options{Stats: stats, SpansDropped: func() float64 { return 3 }})
	if got := series(t, m.Registry(), "cbc_otel_tap_dropped_bytes_total")["source=stdin"]; got != 4096 {
		t.Errorf("tap_dropped_bytes_total{stdin} = %v", got)
	}
	if got := series(t, m.Registry(), "cbc_otel_spans_dropped_total")[""]; got != 3 {
		t.Errorf("spans_dropped_total = %v, want 3", got)
	}
	if got := series(t, m.Registry(), "cbc_otel_export_errors_total")[""]; got != 0 {
		t.Errorf("export_errors_total = %v, want 0", got)
	}
	n := 7.0
	m.SetExportCounters(nil, func() float64 { return n })
	if got := series(t, m.Registry(), "cbc_otel_export_errors_total")[""]; got != 7 {
		t.Errorf("export_errors_total = %v, want 7 after SetExportCounters", got)
	}
	if got := series(t, m.Registry(), "cbc_otel_spans_dropped_total")[""]; got != 0 {
		t.Errorf("spans_dropped_total = %v, want 0 after SetExportCounters(nil, ...)", got)
	}
	if got := len(series(t, m.Registry(), "cbc_otel_lines_rejected_total")); got != len(streamjson.Reasons()) {
		t.Errorf("%d rejected series, want all %d reasons pre-created", got, len(streamjson.Reasons()))
	}
	if got := len(series(t, m.Registry(), "cbc_protocol_violations_total")); got != len(ingest.Violations()) {
		t.Errorf("%d violation series, want all %d kinds pre-created", got, len(ingest.Violations()))
	}
	bi := series(t, m.Registry(), "cbc_otel_build_info")
	if len(bi) != 1 {
		t.Fatalf("build_info = %v", bi)
	}
	for k, v := range bi {
		if v != 1 || !strings.Contains(k, "version=test") || !strings.Contains(k, "goversion=go") {
			t.Errorf("build_info{%s} = %v", k, v)
		}
	}
}

// TestRuntimeCollectors: go_* and process_* are there by default, and the
// registry is the Metrics' own (two instances do not collide).
func TestRuntimeCollectors(t *testing.T) {
	a, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{}); err != nil {
		t.Fatalf("second New in one process: %v", err)
	}
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var goSeen bool
	for _, mf := range mfs {
		goSeen = goSeen || strings.HasPrefix(mf.GetName(), "go_")
	}
	if !goSeen {
		t.Error("no go_* metrics")
	}
	if _, err := New(Options{MaxWorkflows: -1}); err == nil {
		t.Error("New accepted a negative MaxWorkflows")
	}
}

// TestConcurrentObserveAndScrape is for the race detector: pipelines on
// several goroutines and scrapes at the same time.
func TestConcurrentObserveAndScrape(t *testing.T) {
	m := newTest(t, Options{})
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 500 {
				r := &ingest.Run{Workflow: true, Name: fmt.Sprintf("wf%d", (g+i)%7), Status: ingest.StatusCompleted, Start: t0, End: t0 + 10}
				m.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
				m.Observe(ingest.Lifecycle{Kind: ingest.RunFinished, Run: r})
				m.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: r})
			}
		}()
	}
	for range 20 {
		if _, err := m.Registry().Gather(); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		<-done
	}
	if got := sumValues(series(t, m.Registry(), "cbc_workflow_runs_total")); got != 2000 {
		t.Errorf("runs_total = %v, want 2000", got)
	}
}

func get(t *testing.T, c *http.Client, url string, hdr map[string]string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestConstLabelsOnEverySeries: the demo's label is on every series of
// every family, the runtime collectors' too, and on none without it.
func TestConstLabelsOnEverySeries(t *testing.T) {
	for _, cl := range []map[string]string{{DemoLabel: "true"}, nil} {
		m, err := New(Options{Version: "t", ConstLabels: cl})
		if err != nil {
			t.Fatal(err)
		}
		fams, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		series := 0
		for _, f := range fams {
			for _, s := range f.GetMetric() {
				series++
				got := ""
				for _, l := range s.GetLabel() {
					if l.GetName() == DemoLabel {
						got = l.GetValue()
					}
				}
				if got != cl[DemoLabel] {
					t.Errorf("const labels %v: %s has demo=%q", cl, f.GetName(), got)
				}
			}
		}
		if series < 30 {
			t.Errorf("%d series gathered", series)
		}
	}
}
