package metrics

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// completeRun feeds m one workflow run of name, completed, with one done
// agent: the life of a typical run, as far as the metrics see it.
func completeRun(m *Metrics, name string) { completeRunCost(m, name, 0) }

// completeRunCost is completeRun with usd joined to the run as one model
// call's cost (none when 0).
func completeRunCost(m *Metrics, name string, usd float64) {
	r := &ingest.Run{Workflow: true, Name: name, Status: ingest.StatusCompleted,
		Start: t0, End: t0 + 3000, Usage: streamjson.Usage{TotalTokens: 10, ToolUses: 1}}
	if usd != 0 {
		r.Cost.Add(cost.Model{Model: "m", CostUSD: usd}, 1)
	}
	m.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
	m.Observe(ingest.Lifecycle{Kind: ingest.AgentEnded, Run: r, Agent: &ingest.Agent{Index: 1, State: ingest.AgentDone, Start: t0, End: t0 + 1000}})
	m.Observe(ingest.Lifecycle{Kind: ingest.RunFinished, Run: r})
	m.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: r})
}

// TestWorkflowAllow: the allow-list admits exactly the names it fully
// matches, folds the others into "other" and counts them apart from the
// cap's overflow; the cap then applies to the allowed names only.
func TestWorkflowAllow(t *testing.T) {
	cases := []struct {
		name       string
		allow      string // "" : none
		max        int
		runs       []string
		want       []string // label of each run
		disallowed float64
		overflow   float64
	}{
		{"match", `review|deploy`, 0, []string{"review", "deploy"}, []string{"review", "deploy"}, 0, 0},
		{"no match", `review`, 0, []string{"review", "tidy-up-7f3a"}, []string{"review", "other"}, 1, 0},
		{"anchored", `review`, 0, []string{"review-2", "pre-review", "review"}, []string{"other", "other", "review"}, 2, 0},
		{"regexp says so", `review(-\d+)?`, 0, []string{"review-2", "review-x"}, []string{"review-2", "other"}, 1, 0},
		{"alternation anchored as a whole", `a|b`, 0, []string{"ab", "a", "b"}, []string{"other", "a", "b"}, 1, 0},
		{"repeat counted each time", `keep`, 0, []string{"x", "x", "keep"}, []string{"other", "other", "keep"}, 2, 0},
		{"unknown stays unknown", `keep`, 0, []string{""}, []string{"unknown"}, 0, 0},
		// allow first, then cap: rejected names take no place under it.
		{"allow then cap", `w\d`, 2, []string{"x1", "w1", "x2", "w2", "w3", "w1"}, []string{"other", "w1", "other", "w2", "other", "w1"}, 2, 1},
		{"cap alone", "", 2, []string{"x1", "w1", "w2"}, []string{"x1", "w1", "other"}, 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := Options{MaxWorkflows: c.max}
			if c.allow != "" {
				re, err := CompileWorkflowAllow(c.allow)
				if err != nil {
					t.Fatal(err)
				}
				opts.WorkflowAllow = re
			}
			m := newTest(t, opts)
			want := map[string]float64{}
			for i, name := range c.runs {
				if got := m.workflowLabel(name); got != c.want[i] {
					t.Errorf("run %d %q: label %q, want %q", i, name, got, c.want[i])
				}
				completeRun(m, name)
				want["status=completed,workflow="+c.want[i]]++
			}
			got := series(t, m.Registry(), "cbc_workflow_runs_total")
			for k, v := range want {
				if got[k] != v {
					t.Errorf("runs_total{%s} = %v, want %v", k, got[k], v)
				}
			}
			// workflowLabel above and completeRun each resolve the name.
			if d := testutil.ToFloat64(m.wfDisallowed); d != 2*c.disallowed {
				t.Errorf("disallowed = %v, want %v", d, 2*c.disallowed)
			}
			if o := testutil.ToFloat64(m.wfOverflow); o != 2*c.overflow {
				t.Errorf("overflow = %v, want %v", o, 2*c.overflow)
			}
		})
	}
}

func TestCompileWorkflowAllow(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	list := write("allow.txt", "# the team's workflows\n\nreview\n  deploy-(staging|prod)  \n# release is retired\n")
	re, err := CompileWorkflowAllow(list)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"review": true, "deploy-prod": true, "deploy-staging": true,
		"deploy-dev": false, "release": false, "review|deploy-prod": false, "# the team's workflows": false, "": false} {
		if got := re.MatchString(name); got != want {
			t.Errorf("file form: %q matched %v, want %v", name, got, want)
		}
	}

	bad := write("bad.txt", "review\n(unclosed\n")
	noRE := write("empty.txt", "# nothing yet\n\n")
	for _, c := range []struct{ value, errSub string }{
		{"(", "missing closing )"},
		{"", "empty"},
		{bad, "bad.txt:2:"},
		{noRE, "no regexp"},
	} {
		if _, err := CompileWorkflowAllow(c.value); err == nil || !strings.Contains(err.Error(), c.errSub) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error %v, want one line about %q", c.value, err, c.errSub)
		}
	}
	if os.Geteuid() != 0 { // root reads anything
		unreadable := write("secret.txt", "review\n")
		if err := os.Chmod(unreadable, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := CompileWorkflowAllow(unreadable); err == nil {
			t.Errorf("an unreadable file was accepted")
		}
	}
	// A value that names no file is a regexp, even if it looks like a path.
	if re, err := CompileWorkflowAllow(filepath.Join(dir, "none.txt")); err != nil || !re.MatchString(filepath.Join(dir, "none.txt")) {
		t.Errorf("a missing file's name: %v, %v; want it taken as a regexp", re, err)
	}
}

// TestRestoreWithOtherAllowList: a restarted process with a narrower
// allow-list does not re-admit the saved names it rejects (their new runs
// count as "other" and free their place under the cap); a run in flight
// keeps the label it was counted under.
func TestRestoreWithOtherAllowList(t *testing.T) {
	before := newTest(t, Options{MaxWorkflows: 2})
	completeRun(before, "review")
	completeRun(before, "random-1")
	open := &ingest.Run{Workflow: true, Name: "random-1", Start: t0}
	before.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: open})
	mk, _ := before.markOf(open)
	wfs, types := before.labels()

	re, err := CompileWorkflowAllow(`review|deploy`)
	if err != nil {
		t.Fatal(err)
	}
	after := newTest(t, Options{MaxWorkflows: 2, WorkflowAllow: re})
	after.restoreLabels(wfs, types)
	restored := &ingest.Run{Workflow: true, Name: "random-1", Start: t0}
	after.restoreRun(restored, mk)
	if got := after.state(restored, true).label; got != "random-1" {
		t.Errorf("the run in flight is now under %q, want its old label", got)
	}
	for _, c := range []struct{ name, want string }{{"review", "review"}, {"random-1", LabelOther}, {"deploy", "deploy"}} {
		if got := after.workflowLabel(c.name); got != c.want {
			t.Errorf("%q after the restart: %q, want %q", c.name, got, c.want)
		}
	}
	if d := testutil.ToFloat64(after.wfDisallowed); d != 1 {
		t.Errorf("disallowed = %v, want 1", d)
	}
	if o := testutil.ToFloat64(after.wfOverflow); o != 0 {
		t.Errorf("overflow = %v, want 0 (random-1 gave its place to deploy)", o)
	}
}

// samples counts the samples of g's text exposition (what a scrape
// ingests) and its series as testutil counts them (a histogram is one).
func samples(t *testing.T, g prometheus.Gatherer) (samples, series int) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
		series += len(mf.GetMetric())
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			samples++
		}
	}
	return samples, series
}

// TestSeriesPerWorkflow measures what one more workflow name costs (the
// numbers of docs/metrics.md's Cardinality section): pre-created series of a
// name just seen, and those of a name with one completed run whose one
// agent is done, without and with a known cost.
func TestSeriesPerWorkflow(t *testing.T) {
	const n = 200
	const (
		seen = iota
		run
		runCost
	)
	cost := func(how int) (perSample, perSeries int) {
		var s, ser [2]int
		for i, k := range []int{n, n + 1} {
			m := newTest(t, Options{MaxWorkflows: 1000})
			for j := range k {
				name := fmt.Sprintf("wf-%d", j)
				switch how {
				case run:
					completeRun(m, name)
				case runCost:
					completeRunCost(m, name, 0.42)
				default:
					m.workflowLabel(name)
				}
			}
			s[i], ser[i] = samples(t, m.Registry())
		}
		if how == run { // linear: 200 names cost 200 times one
			m := newTest(t, Options{MaxWorkflows: 1000})
			base, _ := samples(t, m.Registry())
			for j := range n {
				completeRun(m, fmt.Sprintf("wf-%d", j))
			}
			if got, _ := samples(t, m.Registry()); got-base != n*(s[1]-s[0]) {
				t.Errorf("%d names: %d samples over the empty registry, want %d×%d", n, got-base, n, s[1]-s[0])
			}
		}
		return s[1] - s[0], ser[1] - ser[0]
	}
	seenS, seenSer := cost(seen)
	runS, runSer := cost(run)
	costS, costSer := cost(runCost)
	t.Logf("one workflow name: seen %d samples (%d series); with a completed run and a done agent %d samples (%d series, histograms as one); with a known cost too %d samples (%d series); %d names: %d samples",
		seenS, seenSer, runS, runSer, costS, costSer, n, n*runS)
	// 6 single-series families (started, active, tokens, tool uses, cost,
	// cost unknown) + runs_total×4 statuses + agents_total×5 states.
	if seenS != 15 || seenSer != 15 {
		t.Errorf("a name just seen: %d samples, %d series; want 15, 15", seenS, seenSer)
	}
	// + duration{completed} (14 buckets, +Inf, sum, count) and
	// agent_duration{done} (13 buckets, +Inf, sum, count).
	if runS != 15+17+16 || runSer != 17 {
		t.Errorf("a name with a run: %d samples, %d series; want 48, 17", runS, runSer)
	}
	// + run_cost (16 buckets, +Inf, sum, count).
	if costS != runS+19 || costSer != runSer+1 {
		t.Errorf("a name with a run of known cost: %d samples, %d series; want %d, %d", costS, costSer, runS+19, runSer+1)
	}

	// Every terminal status and every final agent state (not_started has
	// no duration): the most one name costs without the CLI's telemetry.
	full := func(k int) (int, int) {
		m := newTest(t, Options{MaxWorkflows: 1000})
		for j := range k {
			for _, st := range ingest.TerminalStatuses() {
				r := &ingest.Run{Workflow: true, Name: fmt.Sprintf("wf-%d", j), Status: st, Start: t0, End: t0 + 3000}
				m.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
				for i, as := range ingest.FinalAgentStates() {
					m.Observe(ingest.Lifecycle{Kind: ingest.AgentEnded, Run: r, Agent: &ingest.Agent{Index: i, State: as, Start: t0, End: t0 + 1000}})
				}
				m.Observe(ingest.Lifecycle{Kind: ingest.RunFinished, Run: r})
				m.Observe(ingest.Lifecycle{Kind: ingest.RunFinalized, Run: r})
			}
		}
		return samples(t, m.Registry())
	}
	s0, ser0 := full(n)
	s1, ser1 := full(n + 1)
	t.Logf("one workflow name with every status and agent state: %d samples (%d series)", s1-s0, ser1-ser0)
	if s1-s0 != 15+4*17+4*16 || ser1-ser0 != 23 {
		t.Errorf("a name with every status: %d samples, %d series; want 147, 23", s1-s0, ser1-ser0)
	}
}
