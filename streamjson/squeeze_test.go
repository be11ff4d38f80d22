package streamjson

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/tap"
)

// squeezeChunks squeezes line in pieces whose lengths cuts chooses (the
// rest in one piece), into a fresh buffer.
func squeezeChunks(s *Squeezer, line, cuts []byte) []byte {
	s.Reset()
	var out []byte
	rest := line
	for _, c := range cuts {
		n := min(int(c), len(rest))
		out = s.Append(out, rest[:n])
		rest = rest[n:]
	}
	return s.Append(out, rest)
}

// squeezeInPlace squeezes line the way the framer catches up on a line it
// has buffered: into the line's own array.
func squeezeInPlace(s *Squeezer, line []byte) []byte {
	s.Reset()
	buf := bytes.Clone(line)
	return s.Append(buf[:0], buf)
}

// decodeBoth decodes line with a fast and a plain-only decoder.
type decodePair struct{ fast, plain *Decoder }

func newDecodePair(opts DecodeOptions) decodePair {
	p := decodePair{NewDecoder(opts), NewDecoder(opts)}
	p.plain.plainOnly = true
	return p
}

// checkSqueezed fails unless the squeezed line decodes, on both paths, to
// what line decodes to, and is no longer than it.
func checkSqueezed(t *testing.T, full, squeezed decodePair, line, sq []byte) {
	t.Helper()
	if len(sq) > len(line) {
		t.Fatalf("squeezed line longer than the line: %d > %d", len(sq), len(line))
	}
	for _, path := range []struct {
		name     string
		full, sq *Decoder
	}{{"fast", full.fast, squeezed.fast}, {"plain", full.plain, squeezed.plain}} {
		ev1, r1 := path.full.Decode(tap.SourceStdout, line)
		want := copyEvent(ev1)
		ev2, r2 := path.sq.Decode(tap.SourceStdout, sq)
		got := copyEvent(ev2)
		if r1 != r2 || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s path, MaxElements %d: the squeezed line decodes otherwise\nline:     %.600q\nsqueezed: %.600q\nline:     %v %+v\nsqueezed: %v %+v",
				path.name, path.full.opts.MaxElements, line, sq, r1, want, r2, got)
		}
	}
}

// squeezeLine is a task_progress line whose workflow_progress holds elems
// (joined by sep).
func squeezeLine(elems []string, sep string) string {
	return `{"type":"system","subtype":"task_progress","task_id":"t1","session_id":"s","task_type":"local_workflow","workflow_name":"w","workflow_progress":[` +
		strings.Join(elems, sep) + `],"uuid":"u"}`
}

func agentElems(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf(`{"type":"workflow_agent","index":%d,"agentId":"a%d","label":"scan:%05d","state":"start","startedAt":1796205994000,"phaseIndex":0}`, i, i, i))
	}
	return out
}

// squeezeCases are lines around the Squeezer's edges, each with the
// number of elements kept whole and, where it is exact, the squeezed line.
var squeezeCases = []struct {
	name string
	keep int
	line string
	want string // "" when only the equivalence is checked
}{
	{"under the bound", 5, squeezeLine(agentElems(3), ","), squeezeLine(agentElems(3), ",")},
	{"at the bound", 3, squeezeLine(agentElems(3), ","), squeezeLine(agentElems(3), ",")},
	{"past the bound", 2, squeezeLine(agentElems(5), ","), squeezeLine(append(agentElems(2), "0", "0", "0"), ",")},
	{"whitespace between", 1, squeezeLine(agentElems(4), " ,\n\t "), strings.Replace(squeezeLine(append(agentElems(1), "0", "0", "0"), ","), "},0,", "} ,\n\t 0,", 1)},
	{"every kind of value", 1, squeezeLine([]string{`{"type":"workflow_phase","index":0}`, `1`, `-0.5e+7`, `0`, `"s\"\\\u00e9"`, `true`, `false`, `null`, `[]`, `{}`, `[[{"a":[1,{"b":null}]}]]`, `12 `, `3E2`}, ","),
		squeezeLine([]string{`{"type":"workflow_phase","index":0}`, "0", "0", "0", "0", "0", "0", "0", "0", "0", "0", "0", "0"}, ",")},
	{"two arrays, the last wins", 1, `{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[1,2,3],"workflow_progress":[` + strings.Join(agentElems(3), ",") + `]}`, ""},
	{"a nested key of that name is not squeezed", 1, `{"type":"system","subtype":"task_progress","task_id":"t","x":{"workflow_progress":[1,2,3]},"workflow_progress":[` + strings.Join(agentElems(3), ",") + `]}`, ""},
	{"escaped key: kept raw", 1, `{"type":"system","subtype":"task_progress","task_id":"t","workflow\u005fprogress":[` + strings.Join(agentElems(3), ",") + `]}`,
		`{"type":"system","subtype":"task_progress","task_id":"t","workflow\u005fprogress":[` + strings.Join(agentElems(3), ",") + `]}`},
	{"an assistant message is not squeezed", 1, `{"type":"assistant","workflow_progress":[1,2,3,"task_"]}`, `{"type":"assistant","workflow_progress":[1,2,3,"task_"]}`},
	{"no marker before the elements: not squeezed", 1, `{"type":"system","workflow_progress":[1,2,3],"subtype":"task_progress"}`, `{"type":"system","workflow_progress":[1,2,3],"subtype":"task_progress"}`},
	{"malformed dropped element", 1, squeezeLine([]string{`1`, `2`, `{"a":tru}`, `4`}, ","), ""},
	{"malformed number", 1, squeezeLine([]string{`1`, `01`, `2`}, ","), ""},
	{"bad escape", 1, squeezeLine([]string{`1`, `"\x"`, `2`}, ","), ""},
	{"raw control character", 1, squeezeLine([]string{`1`, "\"a\tb\"", `2`}, ","), ""},
	{"mismatched brackets", 1, squeezeLine([]string{`1`, `[1}`, `2`}, ","), ""},
	{"trailing comma", 1, squeezeLine([]string{`1`, `2`, ``}, ","), ""},
	{"cut short", 1, squeezeLine(agentElems(4), ",")[:400], ""},
	{"cut short in a number", 1, `{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[1,2,3`, ""},
	{"cut short in a string, a brace last", 1, `{"type":"system","subtype":"task_progress","task_id":"t","workflow_progress":[1,2,"}`, ""},
	{"too deep for encoding/json", 1, squeezeLine([]string{`1`, strings.Repeat("[", 9998) + strings.Repeat("]", 9998)}, ","), ""},
	{"as deep as encoding/json goes", 1, squeezeLine([]string{`1`, strings.Repeat("[", 9997) + strings.Repeat("]", 9997)}, ","), ""},
	{"data after the object", 1, squeezeLine(agentElems(3), ",") + ` {}`, ""},
	{"an array at the top", 1, `[{"type":"system","subtype":"task_progress","workflow_progress":[1,2,3]}]`, ""},
	{"CRLF and spaces around", 1, " \t" + squeezeLine(agentElems(3), ",") + " \r", ""},
	{"a result line with one", 1, `{"type":"result","subtype":"success","session_id":"s","workflow_progress":[1,2,3]}`, ""},
}

func TestSqueeze(t *testing.T) {
	for _, tc := range squeezeCases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSqueezer(tc.keep)
			line := []byte(tc.line)
			got := squeezeChunks(s, line, nil)
			if tc.want != "" && string(got) != tc.want {
				t.Errorf("squeezed\n got %.400q\nwant %.400q", got, tc.want)
			}
			// One byte at a time, and in place: the same bytes.
			ones := bytes.Repeat([]byte{1}, len(line))
			if b := squeezeChunks(s, line, ones); !bytes.Equal(b, got) {
				t.Errorf("byte by byte\n got %.400q\nwant %.400q", b, got)
			}
			if b := squeezeInPlace(s, line); !bytes.Equal(b, got) {
				t.Errorf("in place\n got %.400q\nwant %.400q", b, got)
			}
			for _, opts := range decodeOptionSets {
				opts.MaxElements = tc.keep
				checkSqueezed(t, newDecodePair(opts), newDecodePair(opts), line, got)
			}
		})
	}
}

// TestSqueezeAttackSnapshot: the state attack's snapshot (20,000 agents, 4
// MB) squeezes to the elements the decoder reads, about a tenth of it,
// and decodes the same.
func TestSqueezeAttackSnapshot(t *testing.T) {
	const keep = 2200
	line := []byte(squeezeLine(agentElems(20000), ","))
	s := NewSqueezer(keep)
	var cuts []byte
	for range len(line) / 200 {
		cuts = append(cuts, 200)
	}
	sq := squeezeChunks(s, line, cuts)
	kept := len(squeezeLine(agentElems(keep), ","))
	if want := kept + 2*(20000-keep); len(sq) != want {
		t.Errorf("squeezed %d bytes to %d, want %d (the %d kept elements and a 0 for each other)", len(line), len(sq), want, keep)
	}
	opts := DecodeOptions{MaxElements: keep}
	checkSqueezed(t, newDecodePair(opts), newDecodePair(opts), line, sq)
	ev, _ := NewDecoder(opts).Decode(tap.SourceStdout, sq)
	if ev == nil || len(ev.Entries) != keep || ev.ElementsOverCap != 20000-keep {
		t.Fatalf("decoded %+v", ev)
	}
}

// FuzzSqueeze squeezes every line of the input (split at newlines) in
// pieces the cuts choose, with a bound of 1 to 8 elements, and fails when
// a squeezed line decodes otherwise than the line on either path, is
// longer, or depends on the pieces.
func FuzzSqueeze(f *testing.F) {
	for _, l := range corpusLines(f) {
		if bytes.Contains(l, []byte(squeezeKey)) {
			f.Add(l, uint8(2), []byte{7, 100, 3})
		}
	}
	for _, l := range trickyLines {
		f.Add([]byte(l), uint8(1), []byte{1, 2, 3})
	}
	for _, tc := range squeezeCases {
		if len(tc.line) < 4000 {
			f.Add([]byte(tc.line), uint8(tc.keep), []byte{5, 50, 9})
		}
	}
	for _, seq := range snapshotSequences {
		f.Add([]byte(strings.Join(seq, "\n")), uint8(0), []byte{})
	}
	f.Fuzz(func(t *testing.T, data []byte, keep uint8, cuts []byte) {
		k := 1 + int(keep%8)
		opts := decodeOptionSets[int(keep/8)%len(decodeOptionSets)]
		opts.MaxElements = k
		full, squeezed := newDecodePair(opts), newDecodePair(opts)
		s := NewSqueezer(k)
		for _, l := range bytes.Split(data, []byte("\n")) {
			sq := squeezeChunks(s, l, cuts)
			if whole := squeezeChunks(s, l, nil); !bytes.Equal(whole, sq) {
				t.Fatalf("the pieces change the squeezed line %q:\n%q\n%q", l, whole, sq)
			}
			if in := squeezeInPlace(s, l); !bytes.Equal(in, sq) {
				t.Fatalf("squeezed in place %q:\n%q\n%q", l, in, sq)
			}
			checkSqueezed(t, full, squeezed, l, sq)
		}
	})
}

// BenchmarkSqueeze is the state attack's snapshot arriving in 64 KiB
// pieces: the cost per byte of reading a line the Squeezer takes.
func BenchmarkSqueeze(b *testing.B) {
	line := []byte(squeezeLine(agentElems(20000), ","))
	s := NewSqueezer(2200)
	buf := make([]byte, 0, 1<<20)
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		s.Reset()
		buf = buf[:0]
		for off := 0; off < len(line); off += 64 << 10 {
			buf = s.Append(buf, line[off:min(off+64<<10, len(line))])
		}
	}
}
