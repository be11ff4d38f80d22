package report

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/golden"
	"github.com/cbc-otel/cbc-otel/internal/mdtable"
)

// hostileRuns are finalized runs whose names the model wrote to break
// the table and inject Markdown and HTML, a stopped and an abandoned run,
// and plain tasks.
func hostileRuns() []ingest.Run {
	names := []string{
		"a | b | c",
		"<script>alert(1)</script> <img src=x onerror=alert(1)>",
		"**bold** _em_ `code` [link](https://evil.example) ![img](x) \\| ~~s~~ &amp; # h",
		"line one\nline two\r\n| --- |\n\u202eevil\u0000\t",
		"",
	}
	var runs []ingest.Run
	for i, n := range names {
		st := []ingest.RunStatus{ingest.StatusCompleted, ingest.StatusFailed, ingest.StatusStopped, ingest.StatusAbandoned, ingest.StatusCompleted}[i]
		runs = append(runs, ingest.Run{TaskID: fmt.Sprintf("h%d", i), Workflow: true, Name: n, Status: st,
			Start: costT0, End: costT0 + int64(i)*61000, InterruptLatencyMs: -1,
			Agents: []ingest.Agent{{Index: 1, Label: n, State: ingest.AgentDone}, {Index: 2, State: ingest.AgentNotStarted}}})
	}
	runs = append(runs,
		ingest.Run{TaskID: "t1", TaskType: "local_bash", Status: ingest.StatusCompleted},
		ingest.Run{TaskID: "t2", TaskType: "local_bash|x", Status: ingest.StatusFailed})
	return runs
}

func stepSummary(t *testing.T, runs []ingest.Run, sessions []Session, opts StepSummaryOptions) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteStepSummary(&b, runs, sessions, opts); err != nil {
		t.Fatal(err)
	}
	checkTableShape(t, b.String())
	return b.Bytes()
}

// TestStepSummaryGolden pins the step summary: with cost (and the main
// conversation's), without any, with hostile names, and bounded.
func TestStepSummaryGolden(t *testing.T) {
	c := costCollector()
	golden.Assert(t, "testdata/step_summary.cost.golden", stepSummary(t, c.Runs, c.Sessions(), StepSummaryOptions{}))
	golden.Assert(t, "testdata/step_summary.nocost.golden", stepSummary(t, costRuns()[1:], nil, StepSummaryOptions{}))
	golden.Assert(t, "testdata/step_summary.hostile.golden", stepSummary(t, hostileRuns(), nil, StepSummaryOptions{Title: "<b>x</b> | y"}))
	golden.Assert(t, "testdata/step_summary.bounded.golden", stepSummary(t, hostileRuns(), nil, StepSummaryOptions{MaxRows: 2}))
	golden.Assert(t, "testdata/step_summary.empty.golden", stepSummary(t, nil, nil, StepSummaryOptions{}))
}

// TestStepSummaryHostile checks that no name reaches the table raw: once
// the escaped pairs are taken out, no row holds a character Markdown or
// HTML reads, nor a line break or bidi override.
func TestStepSummaryHostile(t *testing.T) {
	out := string(stepSummary(t, hostileRuns(), nil, StepSummaryOptions{}))
	out = strings.ReplaceAll(out, "*(unnamed)*", "")
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "| ") {
			continue
		}
		bare := escapedPair.ReplaceAllString(l, "")
		if i := strings.IndexAny(bare, "<>`*_[]&~!\\\r\x00\u202e"); i >= 0 {
			t.Errorf("row holds %q unescaped: %q", bare[i:], l)
		}
	}
}

var escapedPair = regexp.MustCompile(`\\.`)

// TestStepSummaryRowsBounded checks the bound on rows.
func TestStepSummaryRowsBounded(t *testing.T) {
	var runs []ingest.Run
	for i := range 250 {
		runs = append(runs, ingest.Run{TaskID: fmt.Sprint(i), Workflow: true, Name: fmt.Sprint("w", i), Status: ingest.StatusCompleted})
	}
	out := string(stepSummary(t, runs, nil, StepSummaryOptions{}))
	if n := len(regexp.MustCompile(`(?m)^\| w\d`).FindAllString(out, -1)); n != DefaultStepSummaryRows {
		t.Errorf("%d rows, want %d", n, DefaultStepSummaryRows)
	}
	if !strings.Contains(out, "… and 150 more") || !strings.Contains(out, "**Total:** 250 workflow runs") {
		t.Errorf("no or wrong rest line:\n%s", out[len(out)-300:])
	}
}

// checkTableShape checks every table of out is GitHub-flavoured: a header
// row, a delimiter row, then rows with the header's number of cells
// (split as GitHub splits them: mdtable.Cells), and a blank line after the
// last row.
func checkTableShape(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	want := -1
	for i, l := range lines {
		if !strings.HasPrefix(l, "|") {
			if want >= 0 && l != "" {
				t.Errorf("line %d follows a table without a blank line: %q", i+1, l)
			}
			want = -1
			continue
		}
		n := len(mdtable.Cells(l))
		if want < 0 {
			want = n
			if i+1 >= len(lines) || len(mdtable.Cells(lines[i+1])) != n || !strings.Contains(lines[i+1], "---") {
				t.Errorf("line %d: a header without its delimiter row", i+1)
			}
			continue
		}
		if n != want {
			t.Errorf("line %d has %d cells, the header %d: %q", i+1, n, want, l)
		}
	}
}
