// Tests of result lines: the cumulative cost fields of the recordings,
// refused values, the bound on models, and that a long result text costs
// no more than any other long line.
package streamjson

import (
	"bytes"
	"math/bits"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/tap"
)

// resultLine is a result line as Claude Code 2.1.328 orders it ("type"
// after the result text) with the given modelUsage members and extra
// top-level members.
func resultLine(models, extra string) string {
	return `{"duration_api_ms":140,"session_id":"s1","total_cost_usd":0.5,"usage":{"input_tokens":2},"modelUsage":{` + models +
		`},"is_error":false,"num_turns":2,"subtype":"success","result":"done.","type":"result","duration_ms":477` + extra + `}`
}

const sonnet = `"claude-sonnet-4-5":{"inputTokens":200,"outputTokens":40,"cacheReadInputTokens":7,"cacheCreationInputTokens":3,"webSearchRequests":0,"costUSD":0.0012,"contextWindow":200000}`

func decodeOne(t *testing.T, line string) (*Event, Reason) {
	t.Helper()
	d := NewDecoder(DecodeOptions{})
	ev, r := d.Decode(tap.SourceStdout, []byte(line))
	// Both paths agree (the fast one hands result lines to the plain one).
	p := NewDecoder(DecodeOptions{})
	p.plainOnly = true
	ev2, r2 := p.Decode(tap.SourceStdout, []byte(line))
	if r != r2 || !reflect.DeepEqual(copyEvent(ev), copyEvent(ev2)) {
		t.Fatalf("fast %v %+v, plain %v %+v", r, ev, r2, ev2)
	}
	return ev, r
}

func TestDecodeResult(t *testing.T) {
	// model is a model whose values are all known; partial one whose
	// values are known as known says.
	partial := func(name string, known uint8, cost float64, tok ...int64) ResultModel {
		return ResultModel{Model: name, CostUSD: cost, Tokens: [4]int64(tok), Known: known}
	}
	model := func(name string, cost float64, tok ...int64) ResultModel {
		return partial(name, KnownAll, cost, tok...)
	}
	tests := []struct {
		name   string
		line   string
		reason Reason
		want   *Event // Kind, SessionID, ResultSubtype, IsError, DurationMs, HasCost, TotalCostUSD, Models, BadFields, WrittenAt
	}{
		{name: "claude code order", line: resultLine(sonnet, ""), want: &Event{SessionID: "s1", ResultSubtype: "success",
			DurationMs: 477, HasCost: true, TotalCostUSD: 0.5, Models: []ResultModel{model("claude-sonnet-4-5", 0.0012, 200, 40, 7, 3)}}},
		{name: "codebuddy: type first, no modelUsage, cost 0",
			line: `{"type":"result","subtype":"error_max_turns","is_error":true,"result":"x","session_id":"s2","duration_ms":679,"total_cost_usd":0,"usage":{"input_tokens":100}}`,
			want: &Event{SessionID: "s2", ResultSubtype: "error_max_turns", IsError: true, DurationMs: 679, HasCost: true}},
		{name: "written_at", line: resultLine(sonnet, `,"written_at":"2026-12-03T09:23:29.469Z"`), want: &Event{SessionID: "s1",
			ResultSubtype: "success", DurationMs: 477, HasCost: true, TotalCostUSD: 0.5, WrittenAt: 1796289809469,
			Models: []ResultModel{model("claude-sonnet-4-5", 0.0012, 200, 40, 7, 3)}}},
		{name: "models in name order, names cleaned",
			line: resultLine(`"b\u001b[31m":{"inputTokens":1,"costUSD":1},"a":{"outputTokens":2}`, ""),
			want: &Event{SessionID: "s1", ResultSubtype: "success", DurationMs: 477, HasCost: true, TotalCostUSD: 0.5,
				Models: []ResultModel{partial("a", KnownTokens<<1, 0, 0, 2, 0, 0), partial("b[31m", KnownTokens|KnownCost, 1, 1, 0, 0, 0)}}},
		{name: "refused numbers: negative, above 2^53, absurd cost, wrong types",
			line: resultLine(`"m":{"inputTokens":-1,"outputTokens":1e300,"cacheReadInputTokens":"7","cacheCreationInputTokens":1e400,"costUSD":-0.1}`,
				`,"total_cost_usd":2e6,"duration_ms":-5,"is_error":"no","session_id":7,"subtype":[]`),
			want: &Event{Models: []ResultModel{partial("m", 0, 0, 0, 0, 0, 0)}, BadFields: 10}},
		{name: "duplicate members: the last wins",
			line: resultLine(sonnet, `,"total_cost_usd":0.75`),
			want: &Event{SessionID: "s1", ResultSubtype: "success", DurationMs: 477, HasCost: true, TotalCostUSD: 0.75,
				Models: []ResultModel{model("claude-sonnet-4-5", 0.0012, 200, 40, 7, 3)}}},
		{name: "bad model entries: not an object, empty name, same name once cleaned",
			line: resultLine(`"x":5,"":{},"y\u0007":{},"y":{"inputTokens":1}`, ""),
			want: &Event{SessionID: "s1", ResultSubtype: "success", DurationMs: 477, HasCost: true, TotalCostUSD: 0.5,
				Models: []ResultModel{partial("y", KnownTokens, 0, 1, 0, 0, 0)}, BadFields: 3}},
		{name: "modelUsage not an object, nulls absent",
			line: `{"type":"result","modelUsage":[1],"total_cost_usd":null,"duration_ms":null,"is_error":null}`,
			want: &Event{BadFields: 1}},
		{name: "type not a string", line: `{"type":["result"],"total_cost_usd":1}`, reason: ReasonBadShape},
		{name: "NaN is not JSON", line: `{"type":"result","total_cost_usd":NaN}`, reason: ReasonInvalidJSON},
		{name: "result in a string is no result line", line: `{"type":"assistant","message":{"content":"\"type\":\"result\""}}`},
		{name: "a result key alone is no result line", line: `{"type":"user","result":"x"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, r := decodeOne(t, tc.line)
			if r != tc.reason {
				t.Fatalf("reason %v, want %v", r, tc.reason)
			}
			if tc.want == nil {
				if ev != nil {
					t.Fatalf("decoded %+v", ev)
				}
				return
			}
			if ev == nil || ev.Kind != KindResult {
				t.Fatalf("got %+v", ev)
			}
			got := Event{SessionID: ev.SessionID, ResultSubtype: ev.ResultSubtype, IsError: ev.IsError, DurationMs: ev.DurationMs,
				HasCost: ev.HasCost, TotalCostUSD: ev.TotalCostUSD, Models: ev.Models, BadFields: ev.BadFields, WrittenAt: ev.WrittenAt}
			if !reflect.DeepEqual(got, *tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, *tc.want)
			}
		})
	}
}

// TestDecodeResultUnknownFields (issue 28): a cost or a count that is
// absent, null, of the wrong type or out of range is unknown (its Known bit
// or HasCost clear), never a 0 that reads as known; it costs that field
// alone (one bad_field unless absent or null), and the other fields of the
// line keep their values. Both decoding paths and the reference agree.
func TestDecodeResultUnknownFields(t *testing.T) {
	good := map[string]string{"inputTokens": "200", "outputTokens": "40", "cacheReadInputTokens": "7",
		"cacheCreationInputTokens": "3", "costUSD": "0.0012"}
	wantModel := ResultModel{Model: "m", CostUSD: 0.0012, Tokens: [4]int64{200, 40, 7, 3}, Known: KnownAll}
	bit := map[string]uint8{"inputTokens": KnownTokens, "outputTokens": KnownTokens << 1, "cacheReadInputTokens": KnownTokens << 2,
		"cacheCreationInputTokens": KnownTokens << 3, "costUSD": KnownCost}
	corrupt := []struct {
		name, value string // value "" leaves the field out
		bad         int
	}{
		{"absent", "", 0}, {"null", "null", 0}, {"string", `"200"`, 1}, {"bool", "true", 1}, {"object", `{"v":1}`, 1},
		{"array", "[200]", 1}, {"negative", "-1", 1}, {"overflow", "1e400", 1}, {"out of range", "1e300", 1},
	}
	entry := func(field, value string) string {
		var parts []string
		for _, f := range modelNums {
			v := good[f]
			if f == field {
				v = value
			}
			if v != "" {
				parts = append(parts, `"`+f+`":`+v)
			}
		}
		return `"m":{` + strings.Join(parts, ",") + `}`
	}
	check := func(t *testing.T, line string, wantCost bool, wantM ResultModel, wantBad int) {
		t.Helper()
		compareReference(t, [][]byte{[]byte(line)})
		ev, r := decodeOne(t, line)
		if r != ReasonNone || ev == nil || ev.Kind != KindResult {
			t.Fatalf("%v %+v", r, ev)
		}
		if ev.HasCost != wantCost || ev.HasCost && ev.TotalCostUSD != 0.5 || !ev.HasCost && ev.TotalCostUSD != 0 {
			t.Errorf("total: HasCost %v %v, want %v", ev.HasCost, ev.TotalCostUSD, wantCost)
		}
		if len(ev.Models) != 1 || ev.Models[0] != wantM {
			t.Errorf("models %+v, want %+v", ev.Models, wantM)
		}
		if ev.BadFields != wantBad {
			t.Errorf("%d bad fields, want %d", ev.BadFields, wantBad)
		}
	}
	for _, field := range modelNums {
		for _, c := range corrupt {
			t.Run(field+"/"+c.name, func(t *testing.T) {
				want := wantModel
				want.Known &^= bit[field]
				if field == "costUSD" {
					want.CostUSD = 0
				} else {
					want.Tokens[bits.TrailingZeros8(bit[field])] = 0
				}
				check(t, resultLine(entry(field, c.value), ""), true, want, c.bad)
			})
		}
	}
	for _, c := range corrupt {
		t.Run("total_cost_usd/"+c.name, func(t *testing.T) {
			line := strings.Replace(resultLine(entry("", ""), ""), `"total_cost_usd":0.5,`, "", 1)
			if c.value != "" {
				line = strings.Replace(line, `"session_id"`, `"total_cost_usd":`+c.value+`,"session_id"`, 1)
			}
			check(t, line, false, wantModel, c.bad)
		})
	}
}

// TestDecodeResultModelBound: beyond MaxResultModels, the models that sort
// last are bad fields, whatever order the line writes them in.
func TestDecodeResultModelBound(t *testing.T) {
	var fwd, rev []string
	for i := range MaxResultModels + 3 {
		fwd = append(fwd, `"m`+string(rune('a'+i))+`":{"inputTokens":1}`)
	}
	for i := len(fwd) - 1; i >= 0; i-- {
		rev = append(rev, fwd[i])
	}
	for _, order := range [][]string{fwd, rev} {
		ev, _ := decodeOne(t, resultLine(strings.Join(order, ","), ""))
		if len(ev.Models) != MaxResultModels || ev.BadFields != 3 || ev.Models[0].Model != "ma" || ev.Models[MaxResultModels-1].Model != "mp" {
			t.Fatalf("%d models (%v ... %v), %d bad fields", len(ev.Models), ev.Models[0], ev.Models[len(ev.Models)-1], ev.BadFields)
		}
	}
}

// TestDecodeResultRecordings: every result line of the recordings decodes
// with its cost fields, none of them bad.
func TestDecodeResultRecordings(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "corpus", "*", "*.ndjson"))
	more, _ := filepath.Glob(filepath.Join("..", "testdata", "written-at", "*.ndjson"))
	n, withModels := 0, 0
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range bytes.Split(b, []byte("\n")) {
			if !bytes.Contains(l, []byte(`"type":"result"`)) {
				continue
			}
			n++
			ev, r := decodeOne(t, string(l))
			if r != ReasonNone || ev == nil || ev.Kind != KindResult || ev.BadFields != 0 || ev.SessionID == "" ||
				ev.ResultSubtype != "success" || !ev.HasCost || ev.DurationMs <= 0 {
				t.Fatalf("%s: %v %+v", f, r, ev)
			}
			if len(ev.Models) > 0 {
				withModels++
				if m := ev.Models[0]; m.Model != "claude-sonnet-4-5" || m.Tokens[0] == 0 || m.CostUSD != ev.TotalCostUSD {
					t.Fatalf("%s: model %+v, total %v", f, m, ev.TotalCostUSD)
				}
			}
		}
	}
	if n < 10 || withModels < 5 {
		t.Fatalf("only %d result lines (%d with modelUsage) in the recordings", n, withModels)
	}
}

// TestResultLongLine: a result line is worth buffering and, over the cap,
// counts as a line of interest when its type is in the prefix (CodeBuddy
// writes it first). Claude Code writes "type" after the result text: a
// prefix that ends inside the text is undecided, like any line whose type
// is not yet known (buffered up to the cap, not counted as too long). The
// next result line carries the same cumulative values, so a lost one only
// moves its cost to the next turn.
func TestResultLongLine(t *testing.T) {
	long := strings.Repeat("x", 8<<10)
	cb := `{"type":"result","subtype":"success","result":"` + long
	if !WorthBuffering([]byte(cb)) || !LongLineOfInterest([]byte(cb)) {
		t.Error("a long CodeBuddy result line is not of interest")
	}
	cc := `{"duration_api_ms":1,"total_cost_usd":0.5,"subtype":"success","result":"` + long
	if !WorthBuffering([]byte(cc)) || LongLineOfInterest([]byte(cc)) {
		t.Error("an undecided prefix was decided")
	}
	if WorthBuffering([]byte(`{"type":"assistant","message":{"content":"` + long)) {
		t.Error("an assistant message is buffered")
	}
}
