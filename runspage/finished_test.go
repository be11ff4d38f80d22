package runspage

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// sections splits a rendered page into its open and finished sections.
func sections(t *testing.T, page string) (open, done string) {
	t.Helper()
	_, rest, ok1 := strings.Cut(page, `<h2 id="open">`)
	open, done, ok2 := strings.Cut(rest, `<h2 id="finished">`)
	if !ok1 || !ok2 {
		t.Fatalf("no open and finished sections in\n%s", page)
	}
	return open, done
}

// TestSettlingRunIsFinished: a run that has finished and waits out its
// grace window for late snapshots is listed with the finished runs, with
// its status and a note, not under "Open runs" with a terminal badge; once
// finalized it is there once, without the note. Every terminal status.
func TestSettlingRunIsFinished(t *testing.T) {
	for _, st := range ingest.TerminalStatuses() {
		t.Run(st.String(), func(t *testing.T) {
			p := newTestPage(Options{})
			r := &ingest.Run{TaskID: "wf-1", Workflow: true, Name: "review", Status: ingest.StatusRunning, Start: ms(0), InterruptLatencyMs: -1}
			p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
			open, done := sections(t, render(t, p))
			if !strings.Contains(open, "wf-1") || strings.Contains(done, "wf-1") {
				t.Fatalf("a running run is not (only) under Open runs")
			}
			r.Status, r.Finished, r.End = st, true, ms(2*time.Second)
			p.Observe(ingest.Lifecycle{Kind: ingest.RunFinished, Run: r})
			open, done = sections(t, render(t, p))
			if strings.Contains(open, "wf-1") || !strings.Contains(open, "No workflow run is open.") {
				t.Errorf("a finished run in its grace window is under Open runs:\n%s", open)
			}
			if !strings.Contains(done, "Finished runs (the last 1 of 1,") || !strings.Contains(done, `data-status="`+st.String()+`"`) || !strings.Contains(done, "settling") {
				t.Errorf("a finished run in its grace window is not listed as finished (settling):\n%s", done)
			}
			r.Finalized = true
			p.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: r})
			open, done = sections(t, render(t, p))
			if strings.Contains(open, "wf-1") || strings.Count(done, "task wf-1") != 1 || strings.Contains(done, "settling") || !strings.Contains(done, "the last 1 of 1,") {
				t.Errorf("finalized: open\n%s\nfinished\n%s", open, done)
			}
		})
	}
}

// TestFinishedBeforeRestart: after a restart from a state directory the
// page says how many finished runs /metrics counts that it does not list,
// with or without runs of its own; without a restart it says nothing.
func TestFinishedBeforeRestart(t *testing.T) {
	for _, c := range []struct {
		before  uint64
		own     bool
		want    []string
		notWant []string
	}{
		{0, false, []string{"No workflow run has finished yet."}, []string{"before the last restart"}},
		{2, false, []string{"No workflow run has finished since this process started.", "2 workflow runs finished before the last restart: counted in /metrics"}, []string{"finished yet"}},
		{1, false, []string{"1 workflow run finished before the last restart"}, nil},
		{2, true, []string{"2 workflow runs finished before the last restart", "the last 1 of 1,"}, []string{"No workflow run has finished"}},
	} {
		p := newTestPage(Options{})
		p.SetFinishedBefore(c.before)
		if c.own {
			finished(p, &ingest.Run{TaskID: "wf-1", Name: "review", Status: ingest.StatusCompleted, Start: ms(0), End: ms(time.Second)})
		}
		_, done := sections(t, render(t, p))
		for _, w := range c.want {
			if !strings.Contains(done, w) {
				t.Errorf("before %d, own run %v: lacks %q:\n%s", c.before, c.own, w, done)
			}
		}
		for _, w := range c.notWant {
			if strings.Contains(done, w) {
				t.Errorf("before %d, own run %v: says %q:\n%s", c.before, c.own, w, done)
			}
		}
	}
}

// onePlural matches a count of one with a plural noun: "1 agents",
// "1 tool uses", "1 more agents".
var onePlural = regexp.MustCompile(`(^|[^0-9.,])1 (more |workflow |tool |model )?(agent|token|tool use|phase|run|call|line)s\b`)

// TestCountsOfOne: a run whose every count is one says "1 token · 1 tool
// use · 1 agent", and a cut run "1 more agent/phase not shown"; counts of
// two keep the plural.
func TestCountsOfOne(t *testing.T) {
	p := newTestPage(Options{})
	p.SetFinishedBefore(1)
	finished(p, &ingest.Run{TaskID: "wf-1", Name: "one", Status: ingest.StatusCompleted, Start: ms(0), End: ms(time.Second),
		Usage:  streamjson.Usage{TotalTokens: 1, ToolUses: 1},
		Agents: []ingest.Agent{agent(1, 1, "solo", ingest.AgentDone, 0, time.Second, 1)}})
	finished(p, &ingest.Run{TaskID: "wf-2", Name: "two", Status: ingest.StatusCompleted, Start: ms(0), End: ms(time.Second),
		Usage: streamjson.Usage{TotalTokens: 2, ToolUses: 2},
		Agents: []ingest.Agent{agent(1, 1, "a", ingest.AgentDone, 0, time.Second, 1),
			agent(2, 1, "b", ingest.AgentDone, 0, time.Second, 1)}})
	page := render(t, p)
	for _, w := range []string{"1 token · 1 tool use · 1 agent ·", "2 tokens · 2 tool uses · 2 agents ·", "1 workflow run finished before"} {
		if !strings.Contains(page, w) {
			t.Errorf("page lacks %q", w)
		}
	}
	if m := onePlural.FindAllString(page, -1); m != nil {
		t.Errorf("plural nouns after a count of one: %q", m)
	}
	e := entry{hiddenAgents: 1, hiddenPhases: 1, run: ingest.Run{Workflow: true, Finished: true, Start: ms(0), End: ms(1)}}
	var b strings.Builder
	if err := pageTmpl.ExecuteTemplate(&b, "run", runOf(&e, ms(2))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "1 more agent not shown. 1 more phase not shown.") || onePlural.MatchString(b.String()) {
		t.Errorf("a run cut by one agent and one phase says:\n%s", b.String())
	}
}
