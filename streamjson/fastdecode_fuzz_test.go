// Differential tests of the scanner (fastscan.go, fastdecode.go) against
// the plain path (decodePlain: encoding/json into maps of raw members),
// which is the reference: same Events, same reasons, for any input.
package streamjson

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/tap"
)

// decodeOptionSets are the option combinations the comparisons run with:
// previews and error texts change which strings are read.
var decodeOptionSets = []DecodeOptions{{}, {KeepPreviews: true, KeepErrors: true}, {KeepErrors: true}}

// compareFastPlain decodes lines in order with the fast path and with
// encoding/json alone, and fails on the first line where they differ.
func compareFastPlain(t *testing.T, lines [][]byte, opts DecodeOptions) {
	t.Helper()
	fast, plain := NewDecoder(opts), NewDecoder(opts)
	plain.plainOnly = true
	for i, l := range lines {
		ev1, r1 := fast.Decode(tap.SourceStdout, l)
		got := copyEvent(ev1)
		ev2, r2 := plain.Decode(tap.SourceStdout, l)
		want := copyEvent(ev2)
		if r1 != r2 || !reflect.DeepEqual(got, want) {
			t.Fatalf("options %+v, line %d %q:\nfast:  %v %+v\nplain: %v %+v", opts, i, l, r1, got, r2, want)
		}
	}
}

// trickyLines are lines where the scanner must agree with the plain path
// on a detail: escapes, numbers, literals, types (each costing its field
// alone), keys (matched exactly, case included), nesting, garbage.
var trickyLines = []string{
	// Result lines (decoded by the scanner since issue 22): every field of
	// the wrong type, null, out of range; modelUsage entries that are not
	// objects, repeated, escaped or non-ASCII names (left to encoding/json),
	// more models than are kept, and fields repeated inside an entry.
	`{"type":"result","subtype":"success","is_error":false,"duration_ms":12,"total_cost_usd":0.5,"session_id":"s","modelUsage":{"b":{"inputTokens":1,"outputTokens":2,"cacheReadInputTokens":3,"cacheCreationInputTokens":4,"costUSD":0.25},"a":{"inputTokens":5,"costUSD":0.25}}}`,
	`{"type":"result","subtype":"error_max_turns","is_error":"yes","duration_ms":-5,"total_cost_usd":"1","session_id":"s","modelUsage":[1]}`,
	`{"type":"result","is_error":null,"duration_ms":null,"total_cost_usd":null,"modelUsage":null,"session_id":"s"}`,
	`{"type":"result","total_cost_usd":-1,"duration_ms":1e400,"session_id":"s"}`,
	`{"type":"result","total_cost_usd":1e400,"session_id":"s","modelUsage":{"m":null,"n":7,"o":{"inputTokens":"x","outputTokens":-1,"costUSD":"c"},"p":{"costUSD":2e6},"":{"inputTokens":1}}}`,
	`{"type":"result","session_id":"s","modelUsage":{"m":{"inputTokens":1},"m":{"inputTokens":2}}}`,
	`{"type":"result","session_id":"s","modelUsage":{"m\u0031":{"inputTokens":1},"m1":{"inputTokens":2}}}`,
	"{\"type\":\"result\",\"session_id\":\"s\",\"modelUsage\":{\"mod\\u00e9le\":{\"inputTokens\":1},\"café\":{\"inputTokens\":2},\"bad\xffname\":{\"inputTokens\":3},\"bad\xfename\":{\"inputTokens\":4}}}",
	`{"type":"result","session_id":"s","modelUsage":{"m":{"inputTokens":1,"inputTokens":2}}}`,
	`{"type":"result","session_id":"s","modelUsage":{"m":{"costUSD":1,"costUSD":2}}}`,
	`{"type":"result","session_id":"s","modelUsage":{"m":{"inputTokens":1},"M":{"inputTokens":2}," m":{"inputTokens":3}}}`,
	// Known per value (issue 28): absent, null, bad and out of range are
	// unknown, each apart.
	`{"type":"result","session_id":"s","total_cost_usd":0.5,"modelUsage":{"a":{"inputTokens":null,"outputTokens":2,"costUSD":null},"b":{"cacheReadInputTokens":"x","cacheCreationInputTokens":4,"costUSD":0.1},"c":{},"d":{"inputTokens":1,"outputTokens":1e400,"cacheReadInputTokens":-0,"cacheCreationInputTokens":9007199254740993,"costUSD":1e6}}}`,
	`{"type":"result","session_id":"s","is_error":true,"is_error":false}`,
	`{"type":"result","session_id":"s","duration_ms":1,"duration_ms":2}`,
	`{"type":"system","subtype":"task_notification","task_id":"t","status":"completed","duration_ms":"long","modelUsage":{"m":1}}`,
	`{"type":"result","session_id":"s","modelUsage":{"m00":{"inputTokens":0,"costUSD":0.01},"m01":{"inputTokens":1,"costUSD":0.01},"m02":{"inputTokens":2,"costUSD":0.01},"m03":{"inputTokens":3,"costUSD":0.01},"m04":{"inputTokens":4,"costUSD":0.01},"m05":{"inputTokens":5,"costUSD":0.01},"m06":{"inputTokens":6,"costUSD":0.01},"m07":{"inputTokens":7,"costUSD":0.01},"m08":{"inputTokens":8,"costUSD":0.01},"m09":{"inputTokens":9,"costUSD":0.01},"m10":{"inputTokens":10,"costUSD":0.01},"m11":{"inputTokens":11,"costUSD":0.01},"m12":{"inputTokens":12,"costUSD":0.01},"m13":{"inputTokens":13,"costUSD":0.01},"m14":{"inputTokens":14,"costUSD":0.01},"m15":{"inputTokens":15,"costUSD":0.01},"m16":{"inputTokens":16,"costUSD":0.01},"m17":{"inputTokens":17,"costUSD":0.01},"m18":{"inputTokens":18,"costUSD":0.01},"m19":{"inputTokens":19,"costUSD":0.01},"m20":{"inputTokens":20,"costUSD":0.01},"m21":{"inputTokens":21,"costUSD":0.01},"m22":{"inputTokens":22,"costUSD":0.01},"m23":{"inputTokens":23,"costUSD":0.01},"m24":{"inputTokens":24,"costUSD":0.01},"m25":{"inputTokens":25,"costUSD":0.01},"m26":{"inputTokens":26,"costUSD":0.01},"m27":{"inputTokens":27,"costUSD":0.01},"m28":{"inputTokens":28,"costUSD":0.01},"m29":{"inputTokens":29,"costUSD":0.01},"m30":{"inputTokens":30,"costUSD":0.01},"m31":{"inputTokens":31,"costUSD":0.01},"m32":{"inputTokens":32,"costUSD":0.01},"m33":{"inputTokens":33,"costUSD":0.01},"m34":{"inputTokens":34,"costUSD":0.01},"m35":{"inputTokens":35,"costUSD":0.01},"m36":{"inputTokens":36,"costUSD":0.01},"m37":{"inputTokens":37,"costUSD":0.01},"m38":{"inputTokens":38,"costUSD":0.01},"m39":{"inputTokens":39,"costUSD":0.01}}}`,
	// Issue 28: resent (bool, null, wrong types, repeated, on every kind),
	// a notification's snapshot (repeated, not an array, after the task_id
	// or before it), rows' endedWithRun and a redacted error.
	`{"type":"system","subtype":"task_progress","task_id":"t","resent":true,"resent":false,"workflow_progress":[]}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","resent":null,"workflow_progress":null}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","resent":1,"workflow_progress":[{"type":"workflow_agent","index":1,"endedWithRun":"stopped","error":"error"}]}`,
	`{"type":"system","subtype":"task_notification","task_id":"t","status":"stopped","reason":"worker_restart","resent":"true","workflow_progress":[{"type":"workflow_agent","index":1,"state":"progress","endedWithRun":null,"queuedAt":1,"lastProgressAt":"x"}]}`,
	`{"type":"system","subtype":"task_notification","workflow_progress":[{"type":"workflow_agent","index":1,"state":"done"}],"task_id":"t","status":"completed"}`,
	`{"type":"system","subtype":"task_notification","task_id":"t","status":"completed","workflow_progress":[],"workflow_progress":[{"type":"workflow_agent","index":2}]}`,
	`{"type":"system","subtype":"task_notification","task_id":"t","status":"completed","workflow_progress":7,"resent":[true]}`,
	`{"type":"system","subtype":"task_started","task_id":"t","resent":"x","workflow_progress":[1]}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"type":"workflow_agent","index":1,"error":"error","endedWithRun":{"x":1}},{"type":"workflow_agent","index":2,"error":" error	"}]}`,
	// Strings: every escape, surrogate pairs and lone halves, invalid
	// escapes, raw control characters, invalid UTF-8, U+FFFD itself.
	`{"type":"system","subtype":"task_started","task_id":"a\"\\\/\b\f\n\r\tz","description":"\u00e9\u4e2d\ud83d\ude00"}`,
	`{"type":"system","subtype":"task_started","task_id":"t","description":"lone \ud83d and \ude00 and \ud83d\u0041 and \ud83d\ud83d\ude00"}`,
	`{"type":"system","subtype":"task_started","task_id":"t","description":"bad \x escape"}`,
	`{"type":"system","subtype":"task_started","task_id":"t","description":"bad \u12 escape"}`,
	`{"type":"system","subtype":"task_started","task_id":"t","description":"bad \u12G4 escape"}`,
	`{"type":"system","subtype":"task_started","task_id":"t","description":"quote \' escape"}`,
	"{\"type\":\"system\",\"subtype\":\"task_started\",\"task_id\":\"t\",\"description\":\"raw \x01 control\"}",
	"{\"type\":\"system\",\"subtype\":\"task_started\",\"task_id\":\"t\",\"description\":\"raw \x7f del\"}",
	"{\"type\":\"system\",\"subtype\":\"task_started\",\"task_id\":\"t\xff\xfe\",\"description\":\"\xed\xa0\x80 \xc3\"}",
	"{\"type\":\"system\",\"subtype\":\"task_started\",\"task_id\":\"t\",\"description\":\"\xef\xbf\xbd kept\"}",
	`{"type":"system","subtype":"task_started","task_id":"t","description":"ends in backslash\"}`,
	`{"type":"system","subtype":"task_started","task_id":"t","description":"\\\\"}`,
	`{"type":"sys\u0074em","subtype":"task_\u0073tarted","task_id":"\u0074"}`,
	// Numbers: grammar, range, exactness, negative zero, huge integers.
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":1e400}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":-1e400}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":1e-400,"tool_uses":-0,"duration_ms":-0.0}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":9007199254740993,"tool_uses":123456789012345678901234567890,"duration_ms":999999999999999}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":1.5,"tool_uses":2E3,"duration_ms":4e+1}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":01}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":1.}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":.5}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":-}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":1e}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":+1}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":0x10}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":Infinity}}`,
	// Types: each field given each wrong type, and null.
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":"5"}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":true}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":null}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":null}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":[]}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":"u"}`,
	`{"type":"system","subtype":"task_progress","task_id":5}`,
	`{"type":"system","subtype":"task_progress","task_id":null}`,
	`{"type":"system","subtype":"task_progress","task_id":{"a":[1,{"b":null}]}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","session_id":null}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","session_id":""}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","session_id":7}`,
	`{"type":"user","task_id":5}`,
	`{"type":7,"subtype":"task_progress","task_id":"t"}`,
	`{"type":"system","subtype":"task_updated","task_id":"t","patch":{"status":"failed","end_time":12,"error":"boom"}}`,
	`{"type":"system","subtype":"task_updated","task_id":"t","patch":{"status":"failed","error":""}}`,
	`{"type":"system","subtype":"task_updated","task_id":"t","patch":{"error":"\u0000"}}`,
	`{"type":"system","subtype":"task_updated","task_id":"t","patch":{"error":null}}`,
	`{"type":"system","subtype":"task_updated","task_id":"t","patch":{"end_time":"x"}}`,
	`{"type":"system","subtype":"task_updated","task_id":"t","patch":null}`,
	`{"type":"system","subtype":"task_updated","task_id":"t","patch":true}`,
	`{"type":"system","subtype":"task_updated","task_id":"t","patch":{}}`,
	`{"type":"system","subtype":"task_notification","task_id":"t","status":"completed","summary":"s \n  x","reason":"r"}`,
	`{"type":"system","subtype":"task_notification","task_id":"t","status":["completed"]}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":"x"}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":null}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":{}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[null,5]}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"type":"workflow_agent","cached":1}]}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"type":"workflow_agent","cached":null,"index":null,"error":null}]}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"type":"workflow_agent","cached":true,"index":3.7,"error":"x","resultPreview":"r","promptPreview":"\u0070"}]}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"type":"workflow_agent","index":1,"index":2}]}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"type":"workflow_agent","Index":2}]}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"type":"workflow_agent","agentid":"a"}]}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"type":"workflow_agent","\u0069ndex":2}]}`,
	`{"type":"system","subtype":"task_updated","task_id":"t","patch":{},"workflow_progress":[{"index":"x"}]}`,
	`{"type":"system","subtype":"task_updated","task_id":"t","patch":{},"workflow_progress":"anything"}`,
	`{"type":"control_request","request_id":"r","request":{"subtype":"interrupt","session_id":"s","task_id":"t"}}`,
	`{"type":"control_request","request_id":"r","request":null}`,
	`{"type":"control_request","request_id":"r","request":{"subtype":1}}`,
	`{"type":"control_response","response":{"subtype":"success","request_id":"r"}}`,
	`{"type":"control_response","response":{"subtype":"success","request_id":"r","Request_ID":"x"}}`,
	`{"type":"system","subtype":"init","session_id":"s","tools":["a",{"b":[true,false,null]}]}`,
	// Keys: duplicates (the last wins), keys equal to a field's name but
	// for case (ASCII, Kelvin sign, long s: unknown keys, skipped, as JSON
	// names are case-sensitive), escapes (unescaped before matching).
	`{"type":"system","subtype":"task_started","task_id":"a","task_id":"b"}`,
	`{"type":"system","subtype":"task_started","task_id":"a","Task_ID":"b"}`,
	`{"type":"system","subtype":"task_started","TASK_ID":"b"}`,
	`{"type":"system","subtype":"task_started","task_id":"a","usage":{"total_tokens":1},"usage":{"tool_uses":2}}`,
	`{"type":"system","subtype":"task_started","task_id":"a","usage":{"total_tokens":1,"Total_Tokens":2}}`,
	"{\"type\":\"system\",\"subtype\":\"task_started\",\"task_id\":\"a\",\"\u212aey\":1,\"tas\u212a_id\":\"k\"}",
	"{\"type\":\"system\",\"\u017fubtype\":\"task_started\",\"task_id\":\"a\"}",
	`{"type":"system","subtype":"task_started","task_\u0069d":"a"}`,
	`{"type":"system","subtype":"task_started","task_id":"a","":1,"unknown":{"x":[[[]]]}}`,
	`{"type":"system","subtype":"task_notification","task_id":"a","status":"completed","Status":"failed","TASK_ID":"b","SubType":"task_started","Type":"user"}`,
	`{"Type":"system","SubType":"task_started","Task_Id":"a"}`,
	`{"type":"system","subtype":"task_updated","task_id":"a","patch":{"status":"failed","Status":"completed","END_TIME":5,"end_time":7}}`,
	`{"type":"system","subtype":"task_progress","task_id":"a","workflow_progress":[{"type":"workflow_agent","Type":"workflow_phase","index":1,"Index":2,"State":"done","state":"start"}]}`,
	`{"type":"control_request","request_id":"r","request":{"subtype":"interrupt","SubType":"stop_task","Session_ID":"x","session_id":"s"}}`,
	// written_at: RFC 3339 or a bad field.
	`{"type":"system","subtype":"task_started","task_id":"a","written_at":"2026-11-30T10:15:02.123Z"}`,
	`{"type":"system","subtype":"task_started","task_id":"a","written_at":"2026-11-30T10:15:02+01:00"}`,
	`{"type":"system","subtype":"task_started","task_id":"a","written_at":"2026-11-30T10:15:02.123\u005a"}`,
	`{"type":"system","subtype":"task_started","task_id":"a","written_at":"2026-11-30 10:15:02Z"}`,
	`{"type":"system","subtype":"task_started","task_id":"a","written_at":"1969-12-31T23:59:59Z"}`,
	`{"type":"system","subtype":"task_started","task_id":"a","written_at":1796000000000}`,
	`{"type":"system","subtype":"task_started","task_id":"a","written_at":null}`,
	`{"type":"control_response","written_at":"x","response":{"subtype":"success","request_id":7}}`,
	// Counts and indexes out of range, elements of every kind.
	`{"type":"system","subtype":"task_progress","task_id":"t","usage":{"total_tokens":-1,"tool_uses":9007199254740994,"duration_ms":-0.5}}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[1,"x",[],true,false,null,{},{"type":5},{"type":null},{"type":"future"},{"type":""}]}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"type":"workflow_agent","index":-1},{"type":"workflow_agent","index":1.5},{"type":"workflow_agent","index":1e20},{"type":"workflow_agent","index":"3"},{"type":"workflow_phase","index":1048577},{"type":"workflow_phase","index":1048576},{"type":"workflow_agent","index":2e0},{"type":"workflow_agent","index":-0}]}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"type":"workflow_agent","index":1,"phaseIndex":-1},{"type":"workflow_agent","index":2,"phaseIndex":0.5},{"type":"workflow_agent","index":3,"phaseIndex":"1","tokens":"7","label":7,"cached":"yes","startedAt":1e400,"endedAt":-3}]}`,
	`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"type":"workflow_phase","index":1,"title":5,"tokens":"x","phaseIndex":-1}]}`,
	// Structure: trailing commas, garbage, missing pieces, whitespace.
	`{"type":"system","subtype":"task_started","task_id":"a",}`,
	`{"type":"system","subtype":"task_started","task_id":"a"}}`,
	`{"type":"system","subtype":"task_started","task_id":"a"} {}`,
	`{"type":"system","subtype":"task_started","task_id":"a" "x":1}`,
	`{"type":"system","subtype":"task_started","task_id":}`,
	`{"type":"system","subtype":"task_started","task_id":"a","x":[1,]}`,
	`{"type":"system","subtype":"task_started","task_id":"a","x":[1 2]}`,
	`{"type":"system","subtype":"task_started","task_id":"a","x":{"a" 1}}`,
	`{"type":"system","subtype":"task_started","task_id":"a","x":tru}`,
	`{"type":"system","subtype":"task_started","task_id":"a","x":nul}`,
	`{"type":"system","subtype":"task_started","task_id":"a","x":True}`,
	`{"type":"system","subtype":"task_started","task_id":"a","x":'s'}`,
	`{"type":"system","subtype":"task_started","task_id":"a",1:2}`,
	"{ \"type\" :\t\"system\" ,\r\n\"subtype\": \"task_started\" , \"task_id\" : \"a\" }",
	"{\"type\":\"system\",\"subtype\":\"task_started\",\"task_id\":\"a\"\v}",
	"\u00a0{\"type\":\"system\",\"subtype\":\"task_started\",\"task_id\":\"a\"}\u0085",
	`{"type":"system","subtype":"task_started","task_id":"a","x":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`,
	`{"type":"system","subtype":"task_started","task_id":"a","x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	`{"type":"system","subtype":"task_progress","task_id":"a","workflow_progress":[` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `]}`,
	`{"type":"system","subtype":"task_progress","task_id":"a","workflow_progress":[{"type":"workflow_agent","x":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}]}`,
	// Result lines: refused numbers, bad model entries, duplicates, types.
	`{"type":"result","session_id":"s","total_cost_usd":0.5,"modelUsage":{"m":{"inputTokens":-1,"outputTokens":1e300,"cacheReadInputTokens":"7","costUSD":-0.1},"m\u0007":{},"":{},"x":5},"duration_ms":-5,"is_error":"no","total_cost_usd":2e6}`,
	`{"subtype":"error_during_execution","type":"result","is_error":true,"modelUsage":{"b":{"costUSD":1e400},"a":{"inputTokens":1,"inputTokens":2}},"total_cost_usd":null}`,
	`{"type":"result","modelUsage":[1],"Type":"x","subtype":7}`,
}

// corpusLines returns every line of the recordings and simulated streams.
func corpusLines(t testing.TB) [][]byte {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "corpus", "*", "*.ndjson"))
	sim, _ := filepath.Glob(filepath.Join("..", "testdata", "simulate", "*.ndjson"))
	files = append(files, sim...)
	if len(files) < 2 {
		t.Fatalf("no recordings found (%d)", len(files))
	}
	var lines [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, bytes.Split(b, []byte("\n"))...)
	}
	return lines
}

// specialAtEveryOffset returns lines whose strings (a key, a top-level
// value, a snapshot element's value) hold a byte the string scanner must
// stop at (an escape, a quote, non-ASCII, a raw control byte) at every
// offset of its 8-byte words, alone and followed by a second one.
func specialAtEveryOffset() []string {
	specials := []string{`\"`, `\\`, `\n`, `\u00e9`, "é", "\x01", "\x7f", "😀"}
	var out []string
	for _, sp := range specials {
		for off := range 17 {
			for _, tail := range []string{"", "abc", sp + "x"} {
				str := strings.Repeat("a", off) + sp + tail
				out = append(out,
					`{"type":"system","subtype":"task_started","task_id":"t`+str+`","task_type":"local_workflow","description":"`+str+`"}`,
					`{"type":"system","subtype":"task_progress","task_id":"t","`+str+`":1,"workflow_progress":[{"type":"workflow_agent","index":1,"label":"`+str+`","state":"start"}]}`)
			}
		}
	}
	return out
}

func TestFastDecodeMatchesPlain(t *testing.T) {
	var lines [][]byte
	for _, l := range append(trickyLines, specialAtEveryOffset()...) {
		lines = append(lines, []byte(l))
	}
	for _, opts := range decodeOptionSets {
		for i := range lines {
			// One decoder per line: a failure names its line.
			compareFastPlain(t, lines[i:i+1], opts)
		}
		// And in sequence: the snapshot caches see them all.
		compareFastPlain(t, lines, opts)
		compareFastPlain(t, corpusLines(t), opts)
	}
}

// TestFastDecodeHandlesRealLines: the comparison above would pass if the
// scanner gave every line to encoding/json, so check that it decodes every
// line of interest of the recordings by itself, and that the tricky lines
// it must leave to encoding/json are left.
func TestFastDecodeHandlesRealLines(t *testing.T) {
	d := NewDecoder(DecodeOptions{})
	n := 0
	for _, l := range corpusLines(t) {
		l = bytes.TrimSpace(l)
		if len(l) == 0 || !Interesting(l) || l[0] != '{' || l[len(l)-1] != '}' {
			continue
		}
		_, _, ok := d.decodeFast(tap.SourceStdout, l)
		n++
		if !ok {
			t.Errorf("the scanner left a recorded line to encoding/json: %.200q", l)
		}
	}
	if n < 100 {
		t.Fatalf("only %d lines of interest in the recordings", n)
	}
	unsure := map[string]string{
		"duplicate key":      `{"type":"system","subtype":"task_started","task_id":"a","task_id":"b"}`,
		"escaped key":        `{"type":"system","subtype":"task_started","task_\u0069d":"a"}`,
		"non-ASCII key":      "{\"type\":\"system\",\"\u017fubtype\":\"task_started\",\"task_id\":\"a\"}",
		"deep nesting":       `{"type":"system","x":` + strings.Repeat("[", maxScanDepth) + strings.Repeat("]", maxScanDepth) + `}`,
		"duplicate in agent": `{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[{"index":1,"index":2}]}`,
	}
	for name, l := range unsure {
		if _, _, ok := d.decodeFast(tap.SourceStdout, []byte(l)); ok {
			t.Errorf("%s: the scanner decoded %q itself", name, l)
		}
	}
	sure := map[string]Reason{
		`{"type":"system","subtype":"task_started","task_id":"a",}`:                                ReasonInvalidJSON,
		`{"type":"system","subtype":"task_started","task_id":"a"} x`:                               ReasonInvalidJSON,
		`{"type":"system","subtype":"task_started","task_id":"a\x"}`:                               ReasonInvalidJSON,
		`{"type":"system","subtype":"task_started","task_id":5}`:                                   ReasonBadShape,
		`{"type":"system","subtype":"task_started","task_id":"a","x":nul}`:                         ReasonInvalidJSON,
		`{"type":"system","subtype":"task_progress","task_id":"a","usage":{"total_tokens":1e999}}`: ReasonNone,
		`{"type":"system","subtype":"task_started","task_id":"a","Key":1}`:                         ReasonNone,
		`{"type":"system","subtype":"task_started","Task_Id":"a"}`:                                 ReasonBadShape,
		`{"type":"system","subtype":"task_started","task_id":"a","Task_Id":"b"}`:                   ReasonNone,
	}
	for l, want := range sure {
		_, r, ok := d.decodeFast(tap.SourceStdout, []byte(l))
		if !ok || r != want {
			t.Errorf("%q: handled %v, reason %v; want handled, %v", l, ok, r, want)
		}
	}
}

// TestFastFieldNamesMatchTables: the scanner's switches on names agree
// with the tables of names decodePlain looks up.
func TestFastFieldNamesMatchTables(t *testing.T) {
	for f, name := range wireFields {
		if got := wireField([]byte(name)); got != f {
			t.Errorf("wireField(%q) = %d, want %d", name, got, f)
		}
	}
	for f, name := range entryFields {
		if got := entryField([]byte(name)); got != f {
			t.Errorf("entryField(%q) = %d, want %d", name, got, f)
		}
	}
	for _, name := range []string{"Type", "TASK_ID", "SubType", "Index", "agentid", ""} {
		if wireField([]byte(name)) >= 0 || entryField([]byte(name)) >= 0 {
			t.Errorf("%q matched a field", name)
		}
	}
}

// TestFastDecodeAllocations: decoding a repeated snapshot allocates no more
// with the scanner than a handful of strings per line.
func TestFastDecodeAllocations(t *testing.T) {
	lines := growingSnapshots(50)
	last := lines[len(lines)-1]
	d := NewDecoder(DecodeOptions{})
	d.Decode(tap.SourceStdout, last)
	if a := testing.AllocsPerRun(50, func() { d.Decode(tap.SourceStdout, last) }); a > 4 {
		t.Errorf("a repeated 50-agent snapshot costs %v allocations", a)
	}
}

// FuzzFastDecode decodes a sequence of lines (the input split at newlines)
// with the scanner and with encoding/json alone, with every option set, and
// fails on any difference of Event or reason. The seeds are every line of
// the recordings, the tricky lines, the special bytes at every offset and
// the snapshot sequences.
func FuzzFastDecode(f *testing.F) {
	seen := map[string]bool{}
	for _, l := range corpusLines(f) {
		if !seen[string(l)] {
			seen[string(l)] = true
			f.Add(l)
		}
	}
	for _, l := range append(trickyLines, specialAtEveryOffset()...) {
		f.Add([]byte(l))
	}
	for _, seq := range snapshotSequences {
		f.Add([]byte(strings.Join(seq, "\n")))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := bytes.Split(data, []byte("\n"))
		for _, opts := range decodeOptionSets {
			compareFastPlain(t, lines, opts)
		}
		for _, l := range lines {
			checkMarkedAtStart(t, l)
		}
	})
}

// checkMarkedAtStart fails when the shortcut past the marker search says a
// line is marked and the search itself would not: Decode would then decode
// a line it used to dismiss.
func checkMarkedAtStart(t *testing.T, line []byte) {
	t.Helper()
	line = bytes.TrimSpace(line)
	if markedAtStart(line) && !markerSearch(line) {
		t.Fatalf("markedAtStart without a marker: %q", line)
	}
}

// markerSearch is Interesting without the shortcut.
func markerSearch(line []byte) bool {
	return bytes.Contains(line, markerTask) || bytes.Contains(line, markerControl) || bytes.Contains(line, markerInit) ||
		bytes.Contains(line, markerResult)
}

// TestMarkedAtStart: the shortcut finds the markers where both CLIs write
// them, never claims one that is not there, and leaves the rest to the
// search.
func TestMarkedAtStart(t *testing.T) {
	for _, tc := range []struct {
		line string
		want bool
	}{
		{`{"type":"system","subtype":"task_started","task_id":"t"}`, true},
		{`{"type":"system","subtype":"init","session_id":"s"}`, true},
		{`{"type":"result","subtype":"success"}`, true},
		{`{"type":"control_request","request_id":"r"}`, true},
		{`{"type":"control_response","response":{}}`, true},
		{`{"type":"system","subtype":"initial"}`, false},
		{`{"type":"system","subtype":"status","note":"task_started"}`, false},
		{`{"type":"system", "subtype":"task_started"}`, false}, // another layout: the search decides
		{`{"subtype":"task_started","type":"system"}`, false},
		{`{"type":"assistant","message":{}}`, false},
		{`{"type":"resul"}`, false},
		{`{"type":"system","subtype":"task_`, true},
	} {
		line := []byte(tc.line)
		if got := markedAtStart(line); got != tc.want {
			t.Errorf("markedAtStart(%s) = %v, want %v", tc.line, got, tc.want)
		}
		checkMarkedAtStart(t, line)
	}
	for _, l := range corpusLines(t) {
		checkMarkedAtStart(t, l)
	}
}
