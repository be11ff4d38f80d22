package runspage

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/golden"
	"github.com/cbc-otel/cbc-otel/internal/ingesttest"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// t0 is the fixture's clock: 2026-03-01 10:00:00 UTC.
var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func ms(d time.Duration) int64 { return t0.Add(d).UnixMilli() }

func newTestPage(opts Options) *Page {
	goVersion = "go1.26.0"
	opts.Version = "v1.2.3"
	opts.Started = t0.Add(-time.Hour)
	opts.Now = func() time.Time { return t0.Add(30 * time.Second) }
	return New(opts)
}

// finished runs r through its lifecycle to RunFinalized.
func finished(p ingest.Sink, r *ingest.Run) {
	r.Workflow, r.Finished = true, true
	p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
	for i := range r.Agents {
		p.Observe(ingest.Lifecycle{Kind: ingest.AgentEnded, Run: r, Agent: &r.Agents[i]})
	}
	p.Observe(ingest.Lifecycle{Kind: ingest.RunFinished, Run: r})
	r.Finalized = true
	p.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: r})
}

// agent makes an agent of times s and e after t0; a negative time is
// unknown.
func agent(i, phase int, label string, st ingest.AgentState, s, e time.Duration, tok int64) ingest.Agent {
	a := ingest.Agent{Index: i, AgentID: fmt.Sprintf("a%d", i), Label: label, PhaseIndex: phase, State: st, Tokens: tok}
	if s >= 0 {
		a.Start = ms(s)
	}
	if e >= 0 {
		a.End = ms(e)
	}
	if s >= 0 && e >= s {
		a.DurationMs = (e - s).Milliseconds()
	}
	return a
}

// fixture feeds the golden set: one run of each terminal status and an
// open one.
func fixture(p ingest.Sink) {
	finished(p, &ingest.Run{
		TaskID: "wf-completed", RunID: "run-1", SessionID: "sess-1", Name: "review-pr", Status: ingest.StatusCompleted,
		Start: ms(0), End: ms(12 * time.Second), Usage: streamjson.Usage{TotalTokens: 4200, ToolUses: 9},
		Phases: []ingest.Phase{{Index: 1, Title: "Plan", Start: ms(0), End: ms(3 * time.Second)}, {Index: 2, Title: "Review", Start: ms(3 * time.Second), End: ms(12 * time.Second)}},
		Agents: []ingest.Agent{
			agent(1, 1, "planner", ingest.AgentDone, 0, 3*time.Second, 1200),
			agent(2, 2, "security", ingest.AgentDone, 3*time.Second, 12*time.Second, 2000),
			agent(3, 2, "style", ingest.AgentCached, 3*time.Second, 3*time.Second, 0),
			agent(4, 2, "tests", ingest.AgentDone, 4*time.Second, 9*time.Second, 1000),
		},
		InterruptLatencyMs: -1,
	})
	failedAgent := agent(2, 1, "builder", ingest.AgentError, 2*time.Second, 5*time.Second, 300)
	failedAgent.Error = streamjson.WithheldError
	finished(p, &ingest.Run{
		TaskID: "wf-failed", Name: "build", Status: ingest.StatusFailed, Error: streamjson.WithheldError,
		Start: ms(time.Second), End: ms(6 * time.Second), Usage: streamjson.Usage{TotalTokens: 700},
		Phases:             []ingest.Phase{{Index: 1, Title: "Build", Start: ms(time.Second), End: ms(5 * time.Second)}},
		Agents:             []ingest.Agent{agent(1, 1, "fetch", ingest.AgentDone, time.Second, 2*time.Second, 400), failedAgent},
		InterruptLatencyMs: -1,
	})
	stoppedAgent := agent(1, 1, "long task", ingest.AgentAbandoned, 2*time.Second, 8*time.Second, 0)
	stoppedAgent.EndInferred = true
	finished(p, &ingest.Run{
		TaskID: "wf-stopped", Name: "refactor", Status: ingest.StatusStopped, Reason: "user_interrupt",
		Start: ms(2 * time.Second), End: ms(8 * time.Second), InterruptLatencyMs: 420,
		Phases: []ingest.Phase{{Index: 1, Title: "Edit", Start: ms(2 * time.Second), End: ms(8 * time.Second)}},
		Agents: []ingest.Agent{stoppedAgent, agent(2, 1, "never ran", ingest.AgentNotStarted, -1, -1, 0)},
	})
	finished(p, &ingest.Run{
		TaskID: "wf-abandoned", Status: ingest.StatusAbandoned, Start: ms(5 * time.Second), End: ms(7 * time.Second), InterruptLatencyMs: -1,
	})
	// Open: started 10 s in, one agent done, one running, one queued.
	open := &ingest.Run{
		TaskID: "wf-open", Workflow: true, Name: "deploy", Status: ingest.StatusRunning, StartedAt: ms(10 * time.Second), FirstSeen: ms(10 * time.Second),
		LastSeen: ms(20 * time.Second), InterruptLatencyMs: -1,
		Phases: []ingest.Phase{{Index: 1, Title: "Ship", Start: ms(10 * time.Second), End: ms(20 * time.Second)}},
		Agents: []ingest.Agent{
			agent(1, 1, "package", ingest.AgentDone, 10*time.Second, 20*time.Second, 500),
			agent(2, 1, "upload", ingest.AgentRunning, 20*time.Second, -1, 0),
			{Index: 3, Label: "verify", PhaseIndex: 1, State: ingest.AgentQueued},
		},
	}
	p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: open})
	p.Observe(ingest.Lifecycle{Kind: ingest.AgentEnded, Run: open, Agent: &open.Agents[0]})
	p.Observe(ingest.Lifecycle{Kind: ingest.AgentStarted, Run: open, Agent: &open.Agents[1]})
	// A plain task and a violation are not runs of the page.
	p.Observe(ingest.Lifecycle{Kind: ingest.TaskStarted, Run: &ingest.Run{TaskID: "bash-1", TaskType: "local_bash"}})
	p.Observe(ingest.Lifecycle{Kind: ingest.ViolationSeen, Violation: ingest.ViolationLateEvent, Run: &ingest.Run{TaskID: "late", Workflow: true, Finalized: true}})
}

func render(t *testing.T, p *Page) string {
	t.Helper()
	var b bytes.Buffer
	if err := p.Render(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestPageGolden(t *testing.T) {
	p := newTestPage(Options{})
	fixture(p)
	golden.Assert(t, "testdata/page.golden.html", []byte(render(t, p)))
}

func TestPageEmpty(t *testing.T) {
	got := render(t, newTestPage(Options{}))
	for _, want := range []string{"No workflow run is open.", "No workflow run has finished yet.", `href="metrics"`, `href="healthz"`, `href="readyz"`, "version v1.2.3", "go1.26.0", `<meta http-equiv="refresh" content="5">`} {
		if !strings.Contains(got, want) {
			t.Errorf("empty page lacks %q", want)
		}
	}
}

// TestPageHostileLabels: names, titles, labels and errors from the stream
// are text, never markup, and lose their bidirectional overrides.
func TestPageHostileLabels(t *testing.T) {
	p := newTestPage(Options{})
	a := agent(1, 1, `"><img src=x onerror=alert(2)>`, ingest.AgentError, 0, time.Second, 1)
	a.Error = `</td></tr></table><script>alert(3)</script>`
	// The text reaches the page through ingest's boundary (a checkpoint's
	// Restore), as it really can: the page cuts, html/template escapes.
	runs, err := ingesttest.Restored(ingest.Run{
		TaskID: `t"><svg onload=alert(4)>`, RunID: "r\u202egnp.exe", Name: "<script>alert(1)</script>\u202eevil", Status: ingest.StatusFailed,
		Error: `</style><style>body{display:none}</style>`,
		Start: ms(0), End: ms(time.Second),
		Phases: []ingest.Phase{{Index: 1, Title: "</title><iframe src=//x>", Start: ms(0), End: ms(time.Second)}},
		Agents: []ingest.Agent{a},
	})
	if err != nil {
		t.Fatal(err)
	}
	finished(p, runs[0])
	got := render(t, p)
	for _, bad := range []string{"<script", "<img", "<iframe", "<svg onload", "\u202e", "</style><style>", "onerror=alert(2)>"} {
		if strings.Contains(got, bad) {
			t.Errorf("page holds %q as markup", bad)
		}
	}
	for _, want := range []string{"&lt;script&gt;alert(1)&lt;/script&gt;evil", "&lt;img src=x onerror=alert(2)&gt;", "&lt;/title&gt;&lt;iframe src=//x&gt;", "&lt;script&gt;alert(3)&lt;/script&gt;", "rgnp.exe"} {
		if !strings.Contains(got, want) {
			t.Errorf("page lacks the escaped text %q", want)
		}
	}
	if n := strings.Count(got, "<svg class=\"bar\""); n != 2 {
		t.Errorf("%d bar SVGs, want 2 (the phase and its agent)", n)
	}
}

// TestPageBounded: N finalized runs and Open open ones are kept, the
// oldest go first; agents and phases beyond the caps are counted.
func TestPageBounded(t *testing.T) {
	p := newTestPage(Options{Runs: 3, Open: 2})
	for i := range 4 {
		finished(p, &ingest.Run{TaskID: fmt.Sprintf("done-%d", i), Name: fmt.Sprintf("flow-%d", i), Status: ingest.StatusCompleted, Start: ms(0), End: ms(time.Second)})
	}
	for i := range 3 {
		p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: &ingest.Run{TaskID: fmt.Sprintf("open-%d", i), Name: fmt.Sprintf("open-%d", i), Workflow: true, FirstSeen: ms(0)}})
	}
	s := p.snapshot()
	if len(s.done) != 3 || s.done[0].run.TaskID != "done-3" || s.done[2].run.TaskID != "done-1" {
		t.Errorf("finalized kept: %v, want done-3, done-2, done-1", ids(s.done))
	}
	if len(s.open) != 2 || s.open[0].run.TaskID != "open-2" || s.open[1].run.TaskID != "open-1" {
		t.Errorf("open kept: %v, want open-2, open-1", ids(s.open))
	}
	if s.finished != 4 || s.dropped != 1 {
		t.Errorf("finished %d dropped %d, want 4 and 1", s.finished, s.dropped)
	}
	got := render(t, p)
	if strings.Contains(got, "flow-0") || strings.Contains(got, "open-0") || !strings.Contains(got, "the last 3 of 4") {
		t.Errorf("page shows dropped runs or miscounts")
	}

	big := &ingest.Run{TaskID: "big", Workflow: true, FirstSeen: ms(0)}
	for i := range MaxAgents + 50 {
		big.Agents = append(big.Agents, agent(i+1, 1, "a", ingest.AgentRunning, time.Second, -1, 0))
	}
	for i := range MaxPhases + 5 {
		big.Phases = append(big.Phases, ingest.Phase{Index: i + 1})
	}
	p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: big})
	for i := range big.Agents {
		p.Observe(ingest.Lifecycle{Kind: ingest.AgentStarted, Run: big, Agent: &big.Agents[i]})
	}
	e := p.open[big]
	if len(e.run.Agents) != MaxAgents || e.hiddenAgents != 50 || len(e.run.Phases) != MaxPhases || e.hiddenPhases != 5 {
		t.Errorf("big run: %d agents (%d hidden), %d phases (%d hidden)", len(e.run.Agents), e.hiddenAgents, len(e.run.Phases), e.hiddenPhases)
	}
	if !strings.Contains(render(t, p), "50 more agents not shown") {
		t.Error("hidden agents not said")
	}
}

func ids(es []entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.run.TaskID)
	}
	return out
}

// TestPageCopyOnWrite: what a request took does not change under it.
func TestPageCopyOnWrite(t *testing.T) {
	p := newTestPage(Options{})
	r := &ingest.Run{TaskID: "w", Workflow: true, FirstSeen: ms(0), Agents: []ingest.Agent{{Index: 1, State: ingest.AgentQueued}}}
	p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
	s := p.snapshot()
	r.Agents[0].State, r.Agents[0].Start = ingest.AgentRunning, ms(time.Second)
	p.Observe(ingest.Lifecycle{Kind: ingest.AgentStarted, Run: r, Agent: &r.Agents[0]})
	if st := s.open[0].run.Agents[0].State; st != ingest.AgentQueued {
		t.Errorf("the snapshot's agent changed to %s", st)
	}
	if st := p.snapshot().open[0].run.Agents[0].State; st != ingest.AgentRunning {
		t.Errorf("the page's agent is %s, want running", st)
	}
	r.Agents[0].Label = "changed by the Tracker"
	if p.open[r].run.Agents[0].Label != "" {
		t.Error("the page shares the Tracker's agents")
	}
}

func TestPageHTTP(t *testing.T) {
	p := newTestPage(Options{})
	fixture(p)
	srv := httptest.NewServer(p)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "review-pr") {
		t.Fatalf("GET /: %d", resp.StatusCode)
	}
	for h, want := range map[string]string{
		"Content-Type": "text/html; charset=utf-8", "Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store",
	} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	if !strings.Contains(CSP, "default-src 'none'") || strings.Contains(CSP, "script-src") {
		t.Errorf("CSP %q must forbid scripts", CSP)
	}
	resp, err = http.Post(srv.URL+"/", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /x: %d, want 404", resp.StatusCode)
	}
}

// TestPageConcurrent: pipelines observe while requests render (run with
// -race).
func TestPageConcurrent(t *testing.T) {
	p := New(Options{Runs: 5, Open: 3})
	srv := httptest.NewServer(p)
	defer srv.Close()
	var wg sync.WaitGroup
	for w := range 3 { // serve's pipelines share one page
		wg.Add(1)
		go func() {
			defer wg.Done()
			now := time.Now()
			for i := range 200 {
				r := &ingest.Run{TaskID: fmt.Sprintf("w%d-%d", w, i), Workflow: true, FirstSeen: now.UnixMilli()}
				for j := range 5 {
					r.Agents = append(r.Agents, ingest.Agent{Index: j + 1, State: ingest.AgentQueued})
				}
				p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
				for j := range r.Agents {
					r.Agents[j].State, r.Agents[j].Start = ingest.AgentRunning, now.UnixMilli()
					p.Observe(ingest.Lifecycle{Kind: ingest.AgentStarted, Run: r, Agent: &r.Agents[j]})
				}
				if i%2 == 0 {
					r.Status, r.Finished, r.Finalized, r.Start, r.End = ingest.StatusCompleted, true, true, now.UnixMilli(), now.UnixMilli()+5
					p.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: r})
				}
			}
		}()
	}
	stop := make(chan struct{})
	var rg sync.WaitGroup
	for range 4 {
		rg.Add(1)
		go func() {
			defer rg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Get(srv.URL + "/")
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	close(stop)
	rg.Wait()
	s := p.snapshot()
	if len(s.done) != 5 || len(s.open) != 3 || s.finished != 300 {
		t.Errorf("kept %d finalized (of %d) and %d open, want 5 (of 300) and 3", len(s.done), s.finished, len(s.open))
	}
}

// TestPageKeepsNoLine: the page copies the strings it keeps: the
// Tracker's may be slices of a whole line (megabytes), which a kept run
// must not hold alive.
func TestPageKeepsNoLine(t *testing.T) {
	line := strings.Repeat("x", 1<<20) + "flow" + "label" + "title"
	n := len(line)
	r := &ingest.Run{TaskID: "t", Workflow: true, Name: line[n-14 : n-10], FirstSeen: ms(0),
		Phases: []ingest.Phase{{Index: 1, Title: line[n-5:]}},
		Agents: []ingest.Agent{{Index: 1, Label: line[n-10 : n-5], State: ingest.AgentRunning, Start: ms(0)}}}
	p := newTestPage(Options{})
	p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
	p.Observe(ingest.Lifecycle{Kind: ingest.AgentStarted, Run: r, Agent: &r.Agents[0]})
	e := p.open[r]
	for _, pair := range [][2]string{{e.run.Name, r.Name}, {e.run.Phases[0].Title, r.Phases[0].Title}, {e.run.Agents[0].Label, r.Agents[0].Label}} {
		if pair[0] != pair[1] || unsafe.StringData(pair[0]) == unsafe.StringData(pair[1]) {
			t.Errorf("%q: kept the Tracker's string, not a copy", pair[0])
		}
	}
}

// Issue 29.3: what the telemetry missed is said at the top of the page,
// escaped; nothing is said when it missed nothing.
func TestPageSaysGaps(t *testing.T) {
	gaps := "telemetry incomplete: 9.3 MiB dropped (it fell behind) <b>"
	for _, tc := range []struct {
		gaps func() string
		want bool
	}{{func() string { return gaps }, true}, {func() string { return "" }, false}, {nil, false}} {
		out := render(t, New(Options{Gaps: tc.gaps}))
		if got := strings.Contains(out, `<p class="err">⚠ telemetry incomplete: 9.3 MiB dropped (it fell behind) &lt;b&gt;</p>`); got != tc.want {
			t.Errorf("gaps shown = %v, want %v:\n%s", got, tc.want, out)
		}
		if !tc.want && strings.Contains(out, "⚠") {
			t.Errorf("a warning with nothing missed:\n%s", out)
		}
	}
}
