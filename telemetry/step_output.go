package telemetry

import (
	"encoding/json"
	"errors"
	"os"
	"strconv"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/ghoutput"
	"github.com/cbc-otel/cbc-otel/report"
)

// Step outputs (--summary.step-output, $GITHUB_OUTPUT): the session's spend and
// its workflow runs by status, for a later step of the job to gate or
// comment on. The table of docs/json.md lists the same names.
const (
	outCostUSD       = "cbc-cost-usd"
	outTokensPrefix  = "cbc-tokens-" // + input, output, cache-read, cache-creation
	outRunsPrefix    = "cbc-runs-"   // + completed, failed, stopped, abandoned, total
	outRunsJSON      = "cbc-runs-json"
	maxRunsJSON      = report.DefaultStepSummaryRows
	maxRunsJSONRunes = 200 // a workflow name's runes in cbc-runs-json
)

// runOutput is one workflow run in cbc-runs-json.
type runOutput struct {
	Workflow   string   `json:"workflow"`
	Status     string   `json:"status"`
	DurationMs int64    `json:"duration_ms"`
	Tokens     int64    `json:"tokens"`
	CostUSD    *float64 `json:"cost_usd,omitempty"`
}

// stepOutputs are the outputs of a session: its spend (an unknown value
// is empty, never 0), its workflow runs by terminal status and in all,
// and the first maxRunsJSON runs as JSON, whose names came from the
// stream: that one is written as untrusted.
func stepOutputs(runs []ingest.Run, spend report.SpendTotals) []ghoutput.Output {
	var cost string
	if spend.CostUSD != nil {
		// 12 significant digits: a sum's float noise (0.015599999999999998)
		// goes, and no exponent a shell or a comment would trip on.
		v, _ := strconv.ParseFloat(strconv.FormatFloat(*spend.CostUSD, 'g', 12, 64), 64)
		cost = strconv.FormatFloat(v, 'f', -1, 64)
	}
	outs := []ghoutput.Output{{Name: outCostUSD, Value: cost}}
	var tok [4]string
	if t := spend.Tokens; t != nil {
		for i, v := range []int64{t.Input, t.Output, t.CacheRead, t.CacheCreation} {
			tok[i] = strconv.FormatInt(v, 10)
		}
	}
	for i, k := range []string{"input", "output", "cache-read", "cache-creation"} {
		outs = append(outs, ghoutput.Output{Name: outTokensPrefix + k, Value: tok[i]})
	}
	byStatus := map[ingest.RunStatus]int{}
	list := []runOutput{}
	total := 0
	for i := range runs {
		r := &runs[i]
		if !r.Workflow {
			continue
		}
		total++
		byStatus[r.Status]++
		if len(list) < maxRunsJSON {
			list = append(list, runOutput{Workflow: cutRunes(r.Name, maxRunsJSONRunes), Status: r.Status.String(),
				DurationMs: r.DurationMs(), Tokens: r.Usage.TotalTokens, CostUSD: report.CostOf(&r.Cost).CostUSD})
		}
	}
	for _, st := range ingest.TerminalStatuses() {
		outs = append(outs, ghoutput.Output{Name: outRunsPrefix + st.String(), Value: strconv.Itoa(byStatus[st])})
	}
	outs = append(outs, ghoutput.Output{Name: outRunsPrefix + "total", Value: strconv.Itoa(total)})
	b, err := json.Marshal(list)
	if err != nil { // a cost that is not finite is already left out: cannot happen
		b = []byte("[]")
	}
	return append(outs, ghoutput.Output{Name: outRunsJSON, Value: string(b), Untrusted: true})
}

// cutRunes is s cut to n runes.
func cutRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// appendStepOutputs appends the session's outputs to path (--summary.step-output,
// $GITHUB_OUTPUT) in one write, creating it if need be: the file holds
// the job's other steps' outputs too, never truncated.
func appendStepOutputs(path string, runs []ingest.Run, spend report.SpendTotals) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	err = ghoutput.Write(f, stepOutputs(runs, spend), nil)
	return errors.Join(err, f.Close())
}
