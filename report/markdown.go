package report

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/count"
	"github.com/cbc-otel/cbc-otel/internal/durtext"
	"github.com/cbc-otel/cbc-otel/internal/runcost"
)

// StepSummaryOptions shapes WriteStepSummary's section.
type StepSummaryOptions struct {
	// Title is the heading's text; "" means "cbc-otel". It is escaped.
	Title string
	// MaxRows bounds the table's rows; 0 means DefaultStepSummaryRows.
	// The rest are counted on one line.
	MaxRows int
	// Stats, when set, adds a warning line when the telemetry did not read
	// everything (bytes dropped, lines cut) or rejected lines, and how much.
	Stats *ingest.Stats
	// Budget, when set, adds a line of the session's spend against the
	// cap (run --budget.max-cost-usd).
	Budget *runcost.Budget
}

// DefaultStepSummaryRows is StepSummaryOptions.MaxRows's default.
const DefaultStepSummaryRows = 100

// mdNameRunes bounds a workflow name in the table, before escaping.
const mdNameRunes = 80

// WriteStepSummary writes a GitHub-flavoured Markdown section (a CI step
// summary, $GITHUB_STEP_SUMMARY): a heading, a table of the workflow runs
// in order of finalization (status, duration, agents by final state,
// tokens, and cost when any run's is known, beside its workflow's p95
// over the runs before it when known: runcost), a line counting the plain
// background tasks, a line for the main conversation's cost when known,
// the spend against the budget when one is set, and a totals line. Every name is escaped (mdEscape): what the model
// wrote cannot break the table or inject Markdown or HTML.
func WriteStepSummary(w io.Writer, runs []ingest.Run, sessions []Session, opts StepSummaryOptions) error {
	maxRows := opts.MaxRows
	if maxRows <= 0 {
		maxRows = DefaultStepSummaryRows
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## %s\n\n", mdEscape(cmp.Or(opts.Title, "cbc-otel"), mdNameRunes))
	var t mdTotals
	withCost := false
	for i := range runs {
		if runs[i].Workflow && runs[i].Cost.Known() {
			withCost = true
		}
	}
	rows := 0
	verdicts := runcost.Verdicts(runs)
	for i := range runs {
		r := &runs[i]
		t.add(r)
		if !r.Workflow {
			continue
		}
		if rows == 0 {
			writeMDHeader(&b, withCost)
		}
		if rows < maxRows {
			writeMDRow(&b, r, verdicts[i], withCost)
		}
		rows++
	}
	if rows == 0 {
		b.WriteString("No workflow runs seen.\n")
	} else if rows > maxRows {
		fmt.Fprintf(&b, "\n… and %d more\n", rows-maxRows)
	}
	b.WriteString("\n")
	if t.tasks > 0 {
		fmt.Fprintf(&b, "Background tasks: %d (%s)\n\n", t.tasks, countsText(t.taskStatus[:], ingest.TerminalStatuses()))
	}
	var main cost.Sum
	mainKnown := false
	for _, s := range sessions {
		if s.CostUSD != nil {
			main.CostUSD += *s.CostUSD
			main.Calls += s.ModelCalls
			mainKnown = true
		}
	}
	if mainKnown {
		fmt.Fprintf(&b, "Main conversation: %s in %s\n\n", runcost.USD(main.CostUSD), count.Of(main.Calls, "model call"))
		t.usd += main.CostUSD
		t.costKnown = true
	}
	if bu := opts.Budget; bu != nil && bu.Text() != "" {
		fmt.Fprintf(&b, "**%s:** %s\n\n", mdDollars(mdEscape(capitalized(bu.Label()), 100)), mdDollars(mdEscape(bu.Text(), 100)))
	}
	b.WriteString(t.line(rows))
	if opts.Stats != nil {
		if g := StatsOf(opts.Stats).GapsText(); g != "" {
			fmt.Fprintf(&b, "\n> **Warning:** %s\n", mdEscape(g, 400))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mdTotals sums what the totals line says.
type mdTotals struct {
	runStatus  [5]int // by ingest.RunStatus
	taskStatus [5]int
	tasks      int
	tokens     int64
	usd        float64
	costKnown  bool
}

func (t *mdTotals) add(r *ingest.Run) {
	if !r.Workflow {
		t.tasks++
		t.taskStatus[r.Status]++
		return
	}
	t.runStatus[r.Status]++
	t.tokens += r.Usage.TotalTokens
	if c := CostOf(&r.Cost); c.CostUSD != nil {
		t.usd += *c.CostUSD
		t.costKnown = true
	}
}

// line is the totals line.
func (t *mdTotals) line(runs int) string {
	s := "**Total:** " + count.Of(runs, "workflow run")
	if runs > 0 {
		s += " (" + countsText(t.runStatus[:], ingest.TerminalStatuses()) + ")"
	}
	s += ", " + count.Of(t.tasks, "background task") + ", " + count.Of(t.tokens, "token")
	if t.costKnown {
		s += ", " + runcost.USD(t.usd)
	}
	return s + "\n"
}

// countsText is "2 completed, 1 failed": the non-zero counts, by status.
func countsText(counts []int, order []ingest.RunStatus) string {
	var parts []string
	for _, st := range append([]ingest.RunStatus{ingest.StatusRunning}, order...) {
		if counts[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[st], st))
		}
	}
	return strings.Join(parts, ", ")
}

func writeMDHeader(b *strings.Builder, withCost bool) {
	if withCost {
		b.WriteString("| workflow | status | duration | agents | tokens | cost |\n|---|---|---:|---|---:|---:|\n")
		return
	}
	b.WriteString("| workflow | status | duration | agents | tokens |\n|---|---|---:|---|---:|\n")
}

func writeMDRow(b *strings.Builder, r *ingest.Run, v runcost.Verdict, withCost bool) {
	name := mdEscape(r.Name, mdNameRunes)
	if name == "" {
		name = "*(unnamed)*"
	}
	if r.Parent.TaskID != "" {
		// Nested: its own row, counted once (its launcher's row has none of it).
		name = strings.Repeat("↳ ", max(1, r.SpawnDepth-1)) + name
	}
	status := r.Status.String()
	if sr := StopReason(r); sr != "" {
		status += " (" + mdEscape(sr, 40) + ")"
	}
	fmt.Fprintf(b, "| %s | %s %s | %s | %s | %d |", name, mdStatusMark(r.Status), status,
		durtext.Millis(r.DurationMs()), agentsText(r.Agents), r.Usage.TotalTokens)
	if withCost {
		cost := "—"
		if c := CostOf(&r.Cost); c.CostUSD != nil {
			cost = runcost.USD(*c.CostUSD)
		}
		switch t := mdDollars(mdEscape(v.BaseText(), 60)); {
		case v.Over():
			cost = "**" + cost + "** ⚠️ " + t
		case t != "":
			cost += " " + t
		}
		fmt.Fprintf(b, " %s |", cost)
	}
	b.WriteString("\n")
}

// mdDollars escapes the dollar signs of s (already mdEscaped): GitHub
// reads text between two of them as a formula ("$0.41 of $1.00").
func mdDollars(s string) string { return strings.ReplaceAll(s, "$", `\$`) }

// capitalized is s with its first letter upper case.
func capitalized(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// agentsText is "3 done, 1 error": the agents by state, final states in
// label order first; "—" without agents.
func agentsText(agents []ingest.Agent) string {
	var n [8]int
	for i := range agents {
		if s := int(agents[i].State); s < len(n) {
			n[s]++
		}
	}
	states := append(ingest.FinalAgentStates(), ingest.AgentQueued, ingest.AgentRunning)
	var parts []string
	for _, s := range states {
		if n[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[s], strings.ReplaceAll(s.String(), "_", " ")))
		}
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ")
}

func mdStatusMark(s ingest.RunStatus) string {
	switch s {
	case ingest.StatusCompleted:
		return "✅"
	case ingest.StatusFailed:
		return "❌"
	case ingest.StatusStopped:
		return "⏹️"
	case ingest.StatusAbandoned:
		return "⚠️"
	default:
		return "⏳"
	}
}

// mdEscape makes untrusted text safe inline in a table cell: cut to n
// runes, every control, format or separator character (newlines, bidi
// overrides) a space, and a backslash before each character Markdown or
// HTML could read: \ ` * _ [ ] < > | ~ & # ! ( ).
func mdEscape(s string, n int) string {
	s = cut(s, n)
	var b strings.Builder
	for _, r := range s {
		switch {
		case r != ' ' && !unicode.IsPrint(r):
			b.WriteByte(' ')
		case strings.ContainsRune("\\`*_[]<>|~&#!()", r):
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return strings.TrimSpace(b.String())
}
