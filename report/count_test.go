package report

import (
	"regexp"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// onePlural matches a count of one with a plural noun ("1 tool uses").
var onePlural = regexp.MustCompile(`(^|[^0-9.,$])1 (background |workflow |tool |model )?(agent|token|task|use|run|call|line)s\b`)

// TestCountsOfOne: the waterfall and the step summary of one run, one
// task, one token, one tool use and one model call say each in the
// singular; of two, in the plural. An agent without an end says what its
// bar is drawn to.
func TestCountsOfOne(t *testing.T) {
	usd := 0.5
	for _, n := range []int64{1, 2} {
		r := ingest.Run{TaskID: "w1", Workflow: true, Finished: true, Name: "one", Status: ingest.StatusCompleted, Start: 1000, End: 2000,
			Usage:  streamjson.Usage{TotalTokens: n, ToolUses: n},
			Agents: []ingest.Agent{{Index: 1, Label: "solo", State: ingest.AgentAbandoned, Start: 1000, End: 2000, EndInferred: true}}}
		task := ingest.Run{TaskID: "b1", TaskType: "local_bash", Finished: true, Status: ingest.StatusCompleted}
		sess := []Session{{Kind: "session", SessionID: "s", Cost: Cost{CostUSD: &usd, ModelCalls: n}}}
		var wf, md strings.Builder
		if err := WriteWaterfall(&wf, []ingest.Run{r, task}, nil, WaterfallOptions{Sessions: sess}); err != nil {
			t.Fatal(err)
		}
		if err := WriteStepSummary(&md, []ingest.Run{r, task}, sess, StepSummaryOptions{}); err != nil {
			t.Fatal(err)
		}
		out := wf.String() + md.String()
		want := []string{"1 token  1 tool use  ", "1 model call\n", "1 workflow run", "1 background task, 1 token", "(no end given: drawn to the run's end)"}
		if n == 2 {
			want = []string{"2 tokens  2 tool uses  ", "2 model calls\n", "1 workflow run", "1 background task, 2 tokens"}
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("n=%d: lacks %q in\n%s", n, w, out)
			}
		}
		if m := onePlural.FindAllString(out, -1); m != nil {
			t.Errorf("n=%d: plural nouns after a count of one: %q in\n%s", n, m, out)
		}
	}
}
