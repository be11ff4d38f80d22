// Tests of names and values written with JSON escapes (issue 28): "task\u005fid"
// is "task_id" (RFC 8259 §7), so a line written so is the same line to the
// prefilter, both decoding paths and the reference.
package streamjson

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/internal/jsonesc"
	"github.com/cbc-otel/cbc-otel/tap"
)

// escapeSeeds are lines of every kind the decoder reads, plain.
var escapeSeeds = []string{
	`{"type":"system","subtype":"init","session_id":"s1"}`,
	`{"type":"system","subtype":"task_started","task_id":"t1","run_id":"r1","task_type":"local_workflow","workflow_name":"wf","description":"d","session_id":"s1","written_at":"2026-11-30T10:15:02.123Z"}`,
	`{"type":"system","subtype":"task_progress","task_id":"t1","usage":{"total_tokens":5,"tool_uses":1,"duration_ms":9},"workflow_progress":[{"type":"workflow_phase","index":1,"title":"Scan"},{"type":"workflow_agent","index":1,"agentId":"a1","label":"reader","state":"done","phaseIndex":1,"startedAt":1796000000000,"endedAt":1796000001000,"tokens":7,"toolCalls":2}]}`,
	`{"type":"system","subtype":"task_updated","task_id":"t1","patch":{"status":"failed","end_time":1796000002000,"error":"boom"}}`,
	`{"type":"system","subtype":"task_notification","task_id":"t1","status":"completed","summary":"ok","reason":"r"}`,
	`{"type":"control_request","request_id":"q1","request":{"subtype":"stop_task","session_id":"s1","task_id":"t1"}}`,
	`{"type":"control_response","session_id":"s1","response":{"subtype":"success","request_id":"q1"}}`,
	`{"type":"result","subtype":"success","session_id":"s1","is_error":false,"duration_ms":12,"total_cost_usd":0.5,"modelUsage":{"claude-sonnet-4-5":{"inputTokens":1,"outputTokens":2,"cacheReadInputTokens":3,"cacheCreationInputTokens":4,"costUSD":0.5}}}`,
	`{"duration_api_ms":1,"session_id":"s1","total_cost_usd":0.5,"subtype":"success","result":"done.","type":"result","duration_ms":3}`,
}

// TestEscapedNames: every line of interest, with all of its string
// characters escaped, one character per string escaped at random, or hex
// in upper case, decodes to the Event of the plain line on both paths, and
// the reference agrees.
func TestEscapedNames(t *testing.T) {
	seeds := escapeSeeds
	n := 0
	for _, l := range corpusLines(t) {
		// A quarter of the recorded lines of interest: every shape, in
		// a second rather than five.
		if l := bytes.TrimSpace(l); len(l) > 0 && Interesting(l) {
			if n++; n%4 == 1 {
				seeds = append(seeds, string(l))
			}
		}
	}
	rng := rand.New(rand.NewPCG(28, 6))
	variants := []struct {
		name  string
		upper bool
		pick  func(byte) bool
	}{
		{"all", false, func(byte) bool { return true }},
		{"upper hex", true, func(byte) bool { return true }},
		{"letters and _", false, func(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' }},
		{"one in six", false, func(byte) bool { return rng.IntN(6) == 0 }},
	}
	for _, v := range variants {
		for o, opts := range decodeOptionSets {
			plain, fast, slow := NewDecoder(opts), NewDecoder(opts), NewDecoder(opts)
			slow.plainOnly = true
			for i, l := range seeds {
				esc := jsonesc.Strings([]byte(l), v.upper, v.pick)
				want, wr := plain.Decode(tap.SourceStdout, []byte(l))
				wantEv := copyEvent(want)
				for _, d := range []*Decoder{fast, slow} {
					got, r := d.Decode(tap.SourceStdout, esc)
					if r != wr || !reflect.DeepEqual(copyEvent(got), wantEv) {
						t.Fatalf("%s, plain only %v, seed %d:\n%s\n%s\ngot  %v %+v\nwant %v %+v", v.name, d.plainOnly, i, l, esc, r, got, wr, wantEv)
					}
				}
				if o == 0 {
					compareReference(t, [][]byte{esc}) // with options of its own
				}
			}
		}
	}
}

// TestEscapedASCII pins which escapes send a line without markers to the
// decoder: those of printable ASCII, whatever the case of the hex; not
// control characters or non-ASCII, which encoders do write.
func TestEscapedASCII(t *testing.T) {
	for _, tc := range []struct {
		line string
		want bool
	}{
		{`{"type":"sys\u0074em"}`, true},
		{`{"type":"system","subtype":"task\u005Fstarted"}`, true},
		{`{"x":"\u0020"}`, true},
		{`{"x":"\u007f"}`, true},
		{`{"x":"\u001b[31m red"}`, false},
		{`{"x":"caf\u00e9 \u4e2d \ud83d\ude00"}`, false},
		{`{"x":"\u00"}`, false},
		{`{"x":"ends \u00`, false},
		{`{"x":"\\u0041"}`, true}, // an escaped backslash, then text: a decode for nothing
		{`{"x":"no escape"}`, false},
	} {
		if got := escapedASCII([]byte(tc.line)); got != tc.want {
			t.Errorf("escapedASCII(%s) = %v, want %v", tc.line, got, tc.want)
		}
	}
	// A line that only escapes is of interest; one that escapes nothing
	// printable, and has no marker, is not.
	for line, want := range map[string]bool{
		`{"type":"sys\u0074em","subtype":"task\u005fnotification","task\u005fid":"t","status":"completed"}`: true,
		`{"type":"system","subtype":"status","note":"\u001b"}`:                                              false,
	} {
		if got := Interesting([]byte(line)); got != want {
			t.Errorf("Interesting(%s) = %v, want %v", line, got, want)
		}
	}
}

// TestEscapedLongLine: the framer's early tests read names through a JSON
// tokenizer, so an escaped type is the same type there too: an escaped
// task_progress over the line cap is a line of interest (too_long), an
// escaped assistant message is not buffered.
func TestEscapedLongLine(t *testing.T) {
	all := func(byte) bool { return true }
	progress := jsonesc.Strings([]byte(`{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[`), false, all)
	if !WorthBuffering(progress) || !LongLineOfInterest(progress) {
		t.Error("an escaped task_progress prefix is not of interest")
	}
	assistant := jsonesc.Strings([]byte(`{"type":"assistant","message":{"content":"`), true, all)
	if WorthBuffering(assistant) || LongLineOfInterest(assistant) {
		t.Error("an escaped assistant prefix is of interest")
	}
}

// FuzzEscapedNames: any input line, escaped as jsonesc.Strings does it,
// decodes like the line itself (same Event, same reason) when the line is
// JSON; the fuzzer also feeds the escaped line to the reference comparison.
func FuzzEscapedNames(f *testing.F) {
	for _, l := range escapeSeeds {
		f.Add([]byte(l), uint64(1))
	}
	f.Fuzz(func(t *testing.T, line []byte, seed uint64) {
		if bytes.ContainsAny(line, "\n") {
			return
		}
		rng := rand.New(rand.NewPCG(seed, 6))
		esc := jsonesc.Strings(line, seed&1 == 1, func(byte) bool { return rng.IntN(3) == 0 })
		compareReference(t, [][]byte{esc})
		want, wr := NewDecoder(DecodeOptions{}).Decode(tap.SourceStdout, line)
		if wr != ReasonNone || want == nil {
			return // rejected or of no interest: the escaped line may differ (the prefilter's markers)
		}
		got, r := NewDecoder(DecodeOptions{}).Decode(tap.SourceStdout, esc)
		if r != wr || !reflect.DeepEqual(copyEvent(got), copyEvent(want)) {
			t.Fatalf("%s\n%s\ngot %v %+v, want %v %+v", line, esc, r, got, wr, want)
		}
	})
}

// BenchmarkPrefilter is what the escape check adds to the prefilter of a
// line that Decode does not dismiss by its leading type and that has no
// marker, the only lines that pay it: the prefilter before issue 28
// (check=markers), Interesting (check=markers+escapes) and the check
// alone (check=escapes). Compare with benchstat -col /check.
func BenchmarkPrefilter(b *testing.B) {
	status := []byte(`{"type":"system","subtype":"status","status":null,"uuid":"c82f580e-a458-49e2-830c-59a0bef9032c","session_id":"7f03ff90-ae71-45ca-96aa-3df6e48028d8"}`)
	tasks := []byte(`{"type":"system","subtype":"background_tasks_changed","tasks":[],"uuid":"a8bc6d20-a235-40dd-b807-7542821b234e","session_id":"b364f69b-e7a6-405a-bddb-c985c8d0fcb3"}`)
	hook := []byte(`{"type":"system","subtype":"hook_response","hook_name":"SessionStart","stdout":"` + strings.Repeat("z", 8192) + `"}`)
	for _, l := range []struct {
		name string
		line []byte
	}{{"status", status}, {"background_tasks", tasks}, {"hook-8KiB", hook}} {
		for _, c := range []struct {
			name string
			f    func([]byte) bool
		}{{"markers", func(l []byte) bool { return markedAtStart(l) || markerSearch(l) }}, {"markers+escapes", Interesting}, {"escapes", escapedASCII}} {
			b.Run("line="+l.name+"/check="+c.name, func(b *testing.B) {
				b.SetBytes(int64(len(l.line)))
				for b.Loop() {
					if c.f(l.line) {
						b.Fatal("of interest")
					}
				}
			})
		}
	}
}
