package report

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/count"
	"github.com/cbc-otel/cbc-otel/internal/durtext"
	"github.com/cbc-otel/cbc-otel/internal/runcost"
)

// WaterfallOptions bounds the rendering.
type WaterfallOptions struct {
	// Width is the total line width in columns; 0 means 100. The bar gets
	// what the name and figure columns leave.
	Width int
	// Sessions, if any, are printed after the runs: the main
	// conversation's cost (Collector.Sessions).
	Sessions []Session
	// Budget, when set, adds a line of the session's spend against the
	// cap (run --budget.max-cost-usd, or the demo's budget for show).
	Budget *runcost.Budget
}

const nameCols = 28

// WriteWaterfall prints a per-run summary: for each workflow a header line,
// then each phase and its agents with a bar placed on the run's time axis,
// then one line per plain task and the stream's counters. A run's cost
// stands beside its workflow's p95 over the runs before it when known
// (runcost: at least runcost.MinRuns of them), marked "over" when above.
// Every name is already sanitized by ingest; here it is also cut to its
// column.
func WriteWaterfall(w io.Writer, runs []ingest.Run, stats *ingest.Stats, opts WaterfallOptions) error {
	width := opts.Width
	if width <= 0 {
		width = 100
	}
	barCols := max(10, width-nameCols-34)
	var b strings.Builder
	nw, nt := 0, 0
	verdicts := runcost.Verdicts(runs)
	for i := range runs {
		r := &runs[i]
		if !r.Workflow {
			nt++
			continue
		}
		nw++
		writeRun(&b, r, verdicts[i], barCols)
	}
	if nt > 0 {
		fmt.Fprintf(&b, "tasks:\n")
		for i := range runs {
			r := &runs[i]
			if r.Workflow {
				continue
			}
			fmt.Fprintf(&b, "  %-*s %-10s %s", nameCols, cut(r.TaskType, nameCols), r.Status, cut(r.TaskID, 40))
			if r.RunID != "" {
				fmt.Fprintf(&b, " run %s", cut(r.RunID, 40))
			}
			if n := nesting(r); n != "" {
				b.WriteString("  " + n)
			}
			b.WriteString("\n")
		}
	}
	if nw == 0 && nt == 0 {
		b.WriteString("no workflow runs or tasks seen\n")
	}
	for _, s := range opts.Sessions {
		if s.CostUSD != nil {
			fmt.Fprintf(&b, "session %s: main conversation %s in %s\n", cut(s.SessionID, 40), runcost.USD(*s.CostUSD), count.Of(s.ModelCalls, "model call"))
		}
	}
	if bu := opts.Budget; bu != nil && bu.Text() != "" {
		fmt.Fprintf(&b, "%s: %s\n", bu.Label(), bu.Text())
	}
	if stats != nil {
		s := StatsOf(stats)
		fmt.Fprintf(&b, "stream: %s, %s", count.Of(s.Lines, "line"), bytesText(s.Bytes))
		if r := s.RejectedText(); r != "" {
			b.WriteString(", " + r)
		}
		if g := s.DropsText(); g != "" {
			b.WriteString("; " + g)
		}
		for _, k := range sortedKeys(s.Violations) {
			fmt.Fprintf(&b, ", violation %s=%d", k, s.Violations[k])
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeRun(b *strings.Builder, r *ingest.Run, v runcost.Verdict, barCols int) {
	wf := WorkflowOf(r)
	name := r.Name
	if name == "" {
		name = "(unnamed workflow)"
	}
	fmt.Fprintf(b, "%s %s  %s  %s  %s  %s  ", statusMark(r.Status), cut(name, 60), r.Status, durtext.Millis(wf.DurationMs), count.Of(wf.Tokens, "token"), count.Of(wf.ToolUses, "tool use"))
	if wf.CostUSD != nil {
		fmt.Fprintf(b, "%s  ", runcost.USD(*wf.CostUSD))
		if t := v.BaseText(); t != "" {
			b.WriteString(t + "  ")
		}
	}
	if r.Stalls > 0 {
		fmt.Fprintf(b, "stalled ×%d  ", r.Stalls)
	}
	fmt.Fprintf(b, "[task %s", cut(r.TaskID, 40))
	if r.RunID != "" {
		fmt.Fprintf(b, " run %s", cut(r.RunID, 40))
	}
	b.WriteString("]\n")
	if n := nesting(r); n != "" {
		fmt.Fprintf(b, "  %s\n", n)
	}
	if r.Error != "" {
		fmt.Fprintf(b, "  error: %s\n", cut(r.Error, 200))
	}
	if sr := StopReason(r); sr != "" {
		fmt.Fprintf(b, "  stop reason: %s\n", cut(sr, 80))
	}
	if r.InterruptLatencyMs >= 0 {
		fmt.Fprintf(b, "  interrupt → stopped in %s\n", durtext.Millis(r.InterruptLatencyMs))
	}
	// The Tracker's run encloses its phases and agents: one clock.
	axis := axis{t0: r.Start, t1: r.End, cols: barCols}
	printed := map[int]bool{}
	for _, p := range r.Phases {
		fmt.Fprintf(b, "  %-*s %s %8s\n", nameCols, cut(phaseName(&p), nameCols), axis.bar(p.Start, p.End, '▒'), durtext.Millis(span(p.Start, p.End)))
		for _, a := range r.Agents {
			if a.PhaseIndex == p.Index {
				writeAgent(b, &a, axis)
				printed[a.Index] = true
			}
		}
	}
	for _, a := range r.Agents {
		if !printed[a.Index] {
			writeAgent(b, &a, axis)
		}
	}
}

// phaseName is a phase's line label: a workflow() child run says so.
func phaseName(p *ingest.Phase) string {
	if p.Child {
		return fmt.Sprintf("phase %d child %s", p.Index, p.Title)
	}
	return fmt.Sprintf("phase %d %s", p.Index, p.Title)
}

// nesting says where a run hangs: nested under (or linked to) what
// launched it, at the depth the stream said (none when it did not: a
// workflow's task_started has no spawn_depth), and the run it resumes.
// "" for a top-level run that resumes nothing.
func nesting(r *ingest.Run) string {
	var parts []string
	if p := launcher(r); p != nil {
		by := "task " + cut(p.TaskID, 40)
		switch {
		case p.Index >= 0:
			by = fmt.Sprintf("agent %d", p.Index)
			if p.Label != "" {
				by += " " + cut(p.Label, 40)
			}
			by += " of " + cut(p.Workflow, 60)
		case p.Workflow != "":
			by = "workflow " + cut(p.Workflow, 60) + " (" + by + ")"
		}
		what := "nested"
		if r.Parent.TaskID == "" {
			what = "linked" // the launcher had ended: a link, not a parent
		}
		if r.SpawnDepth > 0 {
			what += fmt.Sprintf(" (depth %d)", r.SpawnDepth)
		}
		parts = append(parts, what+": launched by "+by)
	}
	if r.Resumes != nil && r.Resumes.RunID != "" {
		parts = append(parts, "resumes run "+cut(r.Resumes.RunID, 40))
	}
	return strings.Join(parts, "; ")
}

func writeAgent(b *strings.Builder, a *ingest.Agent, ax axis) {
	label := a.Label
	if label == "" {
		label = "agent"
	}
	line := fmt.Sprintf("    %-*s %s %8s  %-11s", nameCols-2, cut(fmt.Sprintf("#%d %s", a.Index, label), nameCols-2), ax.bar(a.Start, a.End, '█'), durtext.Millis(span(a.Start, a.End)), a.State)
	if a.Tokens > 0 {
		line += fmt.Sprintf(" %d tok", a.Tokens)
	}
	if c := CostOf(&a.Cost); c.CostUSD != nil {
		line += " " + runcost.USD(*c.CostUSD)
	}
	if a.Stalls > 0 {
		line += fmt.Sprintf("  stalled ×%d", a.Stalls)
	}
	if a.EndInferred {
		line += "  (no end given: drawn to the run's end)"
	}
	if a.Error != "" {
		line += "  " + cut(a.Error, 60)
	}
	b.WriteString(strings.TrimRight(line, " "))
	b.WriteString("\n")
}

type axis struct {
	t0, t1 int64
	cols   int
}

// bar draws [s, e] on the axis; an unknown end draws a single mark at the start.
func (ax axis) bar(s, e int64, fill rune) string {
	cells := make([]rune, ax.cols)
	for i := range cells {
		cells[i] = '·'
	}
	if s > 0 && ax.t1 > ax.t0 {
		scale := float64(ax.cols) / float64(ax.t1-ax.t0)
		from := int(float64(s-ax.t0) * scale)
		to := from
		if e >= s {
			to = int(float64(e-ax.t0) * scale)
		}
		from = min(max(from, 0), ax.cols-1)
		to = min(max(to, from), ax.cols-1)
		for i := from; i <= to; i++ {
			cells[i] = fill
		}
	}
	return "|" + string(cells) + "|"
}

func span(s, e int64) int64 {
	if s > 0 && e >= s {
		return e - s
	}
	return -1
}

func statusMark(s ingest.RunStatus) string {
	switch s {
	case ingest.StatusCompleted:
		return "✔"
	case ingest.StatusFailed:
		return "✘"
	case ingest.StatusStopped:
		return "■"
	default:
		return "?"
	}
}

func bytesText(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}

// cut shortens s to n runes, marking the cut with "…".
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
