package runspage

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/count"
	"github.com/cbc-otel/cbc-otel/internal/durtext"
	"github.com/cbc-otel/cbc-otel/internal/runcost"
	"github.com/cbc-otel/cbc-otel/safetext"
)

//go:embed page.html.tmpl
var pageText string

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"count": count.Of[int64], // "1 agent", "2 agents"
}).Parse(pageText))

// axisUnits is the width of every bar's SVG viewBox: a bar's x and width
// are in these units, the SVG is stretched to its cell.
const axisUnits = 1000

// CSP forbids scripts, frames and every load but inline styles and data:
// images: the page needs nothing else.
const CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// ServeHTTP renders the page (GET and HEAD of "/" only).
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var b bytes.Buffer
	if err := p.Render(&b); err != nil {
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(b.Len()))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(b.Bytes())
}

// Render writes the page as of now.
func (p *Page) Render(w io.Writer) error {
	s := p.snapshot()
	now := p.opts.Now()
	v := pageView{
		Version:   clean(p.opts.Version, 100),
		GoVersion: goVersion,
		Started:   stamp(p.opts.Started),
		Now:       stamp(now),
		Uptime:    durtext.Millis(now.Sub(p.opts.Started).Milliseconds()),
		Refresh:   max(1, int(p.opts.Refresh/time.Second)),
		Kept:      p.opts.Runs,
		OpenCap:   p.opts.Open,
		Finished:  s.finished + uint64(len(s.settling)),
		Dropped:   s.dropped,
		Before:    int64(s.before),
	}
	if v.Version == "" {
		v.Version = "unknown"
	}
	if p.opts.Gaps != nil {
		v.Gaps = p.opts.Gaps()
	}
	if s.budget != nil {
		v.Budget = budgetOf(s.budget())
	}
	for i := range s.open {
		v.Open = append(v.Open, runOf(&s.open[i], now.UnixMilli()))
	}
	for i := range s.settling {
		v.Done = append(v.Done, runOf(&s.settling[i], now.UnixMilli()))
	}
	for i := range s.done {
		v.Done = append(v.Done, runOf(&s.done[i], now.UnixMilli()))
	}
	return pageTmpl.Execute(w, v)
}

type pageView struct {
	Version, GoVersion, Started, Now, Uptime string
	Gaps                                     string // see Options.Gaps
	Refresh                                  int
	Kept, OpenCap                            int
	Finished, Dropped                        uint64
	Open, Done                               []runView
	// Before is the finished runs counted in /metrics before a restart
	// (SetFinishedBefore), which the page never saw.
	Before int64
	// Budget is the spend against the cap (SetBudget); nil: none.
	Budget *budgetView
}

// budgetView is the budget line: its label and text (runcost.Budget),
// the meter's filled width in its 100 units, and whether it is past.
type budgetView struct {
	Label, Text string
	Meter       string
	Over        bool
}

// budgetOf lays out b; nil without a cap.
func budgetOf(b runcost.Budget) *budgetView {
	t := b.Text()
	if t == "" {
		return nil
	}
	f := b.Fraction()
	return &budgetView{Label: b.Label(), Text: t, Meter: strconv.FormatFloat(100*min(max(f, 0), 1), 'f', 1, 64), Over: f > 1}
}

type runView struct {
	Name, Status, TaskID, RunID, Session string
	Start, Duration, Axis                string
	Tokens, ToolUses                     int64
	Agents                               int64
	Error, Reason, Interrupt             string
	// Stalled is "stalled" while the run is, else "stalled ×N" when it
	// was (--tracker.stall-after), else "".
	Stalled string
	// AgentsStalled is "N agent(s) stalled" while some of its agents are
	// (issue 31), else "".
	AgentsStalled string
	// Nested says, for a nested run, who launched it ("" otherwise).
	Nested                     string
	Rows                       []rowView
	HiddenAgents, HiddenPhases int64
	// Cost is the run's cost ("" unknown); HasCost adds the cost column,
	// when the run or an agent has one. CostBase is the run's workflow's
	// p95 beside it ("(p95 $0.0384)", "" unknown: runcost), CostOver
	// whether the run cost more.
	Cost     string
	HasCost  bool
	CostBase string
	CostOver bool
	// Settling: the run has finished and waits out its grace window for
	// late snapshots; it is listed with the finished runs.
	Settling bool
}

type rowView struct {
	Phase       bool
	Label       string
	Class       string // a CSS class of the fixed set in the template
	X, W        string // in axisUnits
	Bar         bool
	Duration    string
	State       string
	Tokens      int64
	Error       string
	EndInferred bool
	Cost        string // "" unknown
	// Stalled is an agent's "stalled" while it is, else "stalled ×N" when
	// it was, else "".
	Stalled string
}

// runOf lays out one run: its axis runs from its start to its end (an
// open run's: now, or the latest time it showed), widened to enclose every
// phase and agent.
func runOf(e *entry, nowMs int64) runView {
	r := &e.run
	t0, t1 := bounds(r, nowMs)
	name := clean(r.Name, 200)
	if name == "" {
		name = "(unnamed workflow)"
	}
	rv := runView{
		Name: name, Status: r.Status.String(), TaskID: clean(r.TaskID, 80), RunID: clean(r.RunID, 80), Session: clean(r.SessionID, 80),
		Start: stamp(time.UnixMilli(t0)), Axis: durtext.Millis(t1 - t0), Tokens: r.Usage.TotalTokens, ToolUses: r.Usage.ToolUses,
		Agents: int64(len(r.Agents) + e.hiddenAgents), Error: clean(r.Error, 300), Reason: clean(r.Reason, 80),
		HiddenAgents: int64(e.hiddenAgents), HiddenPhases: int64(e.hiddenPhases), Settling: r.Finished && !r.Finalized,
	}
	if t0 == 0 {
		rv.Start = "-"
	}
	if r.Finished && r.Start > 0 && r.End >= r.Start {
		rv.Duration = durtext.Millis(r.DurationMs())
	} else {
		rv.Duration = durtext.Millis(t1-t0) + " so far"
	}
	if rv.Tokens == 0 {
		for _, a := range r.Agents {
			rv.Tokens += a.Tokens
		}
	}
	if r.InterruptLatencyMs > 0 {
		rv.Interrupt = durtext.Millis(r.InterruptLatencyMs)
	}
	switch {
	case r.Stalled:
		rv.Stalled = "stalled"
	case r.Stalls > 0:
		rv.Stalled = fmt.Sprintf("stalled ×%d", r.Stalls)
	}
	if n := r.AgentsStalled; n > 0 {
		rv.AgentsStalled = fmt.Sprintf("%d agent%s stalled", n, map[bool]string{true: "s"}[n > 1])
	}
	if p := &r.Parent; p.TaskID != "" {
		// No depth when the stream gave none (a workflow's task_started).
		depth := ""
		if r.SpawnDepth > 0 {
			depth = fmt.Sprintf(" (depth %d)", r.SpawnDepth)
		}
		rv.Nested = fmt.Sprintf("nested%s, launched by task %s", depth, clean(p.TaskID, 80))
		if p.Index >= 0 {
			rv.Nested = fmt.Sprintf("nested%s, launched by agent %d %s of %s", depth, p.Index, clean(p.Label, 80), clean(p.Workflow, 120))
		}
	}
	rv.Cost = costText(&r.Cost)
	rv.CostBase, rv.CostOver = e.cost.BaseText(), e.cost.Over()
	ax := axis{t0: t0, t1: t1}
	shown := make([]bool, len(r.Agents))
	for _, ph := range r.Phases {
		label := fmt.Sprintf("phase %d %s", ph.Index, ph.Title)
		if ph.Child {
			label = fmt.Sprintf("phase %d child %s", ph.Index, ph.Title) // a script's workflow() run
		}
		row := rowView{Phase: true, Label: clean(label, 120), Class: "phase", State: "phase"}
		row.X, row.W, row.Bar = ax.bar(ph.Start, ph.End, 0)
		row.Duration = spanText(ph.Start, ph.End)
		rv.Rows = append(rv.Rows, row)
		for i := range r.Agents {
			if r.Agents[i].PhaseIndex == ph.Index {
				rv.Rows = append(rv.Rows, agentRow(&r.Agents[i], ax, t1, r.Finished))
				shown[i] = true
			}
		}
	}
	for i := range r.Agents {
		if !shown[i] {
			rv.Rows = append(rv.Rows, agentRow(&r.Agents[i], ax, t1, r.Finished))
		}
	}
	rv.HasCost = rv.Cost != ""
	for _, row := range rv.Rows {
		rv.HasCost = rv.HasCost || row.Cost != ""
	}
	return rv
}

// costText is a known cost in dollars (runcost.USD), "" when unknown.
func costText(c *cost.Sum) string {
	if !c.Known() {
		return ""
	}
	return runcost.USD(c.CostUSD)
}

func agentRow(a *ingest.Agent, ax axis, t1 int64, finished bool) rowView {
	label := clean(a.Label, 120)
	if label == "" {
		label = "agent"
	}
	row := rowView{Label: fmt.Sprintf("#%d %s", a.Index, label), Class: a.State.String(), State: a.State.String(), Tokens: a.Tokens, Error: clean(a.Error, 300), EndInferred: a.EndInferred, Cost: costText(&a.Cost)}
	end := a.End
	if end == 0 && a.State == ingest.AgentRunning && !finished {
		end = t1 // still running: up to now
	}
	row.X, row.W, row.Bar = ax.bar(a.Start, end, 2)
	row.Duration = spanText(a.Start, end)
	switch {
	case a.Stalled:
		row.Stalled = "stalled"
	case a.Stalls > 0:
		row.Stalled = fmt.Sprintf("stalled ×%d", a.Stalls)
	}
	return row
}

// bounds is the run's time axis in epoch ms.
func bounds(r *ingest.Run, nowMs int64) (t0, t1 int64) {
	t0, t1 = r.Start, r.End
	if t0 == 0 {
		t0 = r.StartedAt
	}
	if t0 == 0 {
		t0 = r.FirstSeen
	}
	if !r.Finished || t1 == 0 {
		t1 = max(nowMs, r.LastSeen)
	}
	widen := func(s, e int64) {
		if s > 0 && (t0 == 0 || s < t0) {
			t0 = s
		}
		t1 = max(t1, e)
	}
	for _, p := range r.Phases {
		widen(p.Start, p.End)
	}
	for _, a := range r.Agents {
		widen(a.Start, a.End)
	}
	if t1 < t0 {
		t1 = t0
	}
	return t0, t1
}

type axis struct{ t0, t1 int64 }

// bar places [s, e] on the axis, at least minW units wide; ok is false
// when s is unknown. An unknown end is a mark at the start.
func (ax axis) bar(s, e int64, minW float64) (x, w string, ok bool) {
	if s <= 0 || ax.t0 <= 0 {
		return "", "", false
	}
	span := float64(max(ax.t1-ax.t0, 1))
	from := float64(s-ax.t0) / span * axisUnits
	to := from
	if e >= s {
		to = float64(e-ax.t0) / span * axisUnits
	}
	from = min(max(from, 0), axisUnits)
	to = min(max(to, from), axisUnits)
	width := max(to-from, minW, 2)
	if from+width > axisUnits {
		from = axisUnits - width
	}
	return strconv.FormatFloat(from, 'f', 1, 64), strconv.FormatFloat(width, 'f', 1, 64), true
}

func spanText(s, e int64) string {
	if s > 0 && e >= s {
		return durtext.Millis(e - s)
	}
	return "-"
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// clean cuts text that ingest cleaned (safetext.Cut: no control or
// bidirectional formatting character to strip) to n runes with a mark.
func clean(s string, n int) string {
	s = safetext.Cut(s, 4*n)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
