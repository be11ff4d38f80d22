// Tests of the line framer: CRLF, partial lines across writes, the per-line
// cap, gaps and the unterminated last line.
package ndjson

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

type framed struct {
	data      string
	len       int64
	truncated bool
	cut       bool
}

func frameAll(max int, writes ...string) []framed {
	var out []framed
	f := NewFramer(max, func(l Line) { out = append(out, framed{string(l.Data), l.Len, l.Truncated, l.Cut}) })
	for _, w := range writes {
		switch w {
		case "<gap>":
			f.Gap()
			continue
		case "<gap-eol>": // the dropped bytes ended with a newline
			f.GapAtLineEnd()
			continue
		}
		f.Write([]byte(w))
	}
	f.Flush()
	return out
}

func TestFramer(t *testing.T) {
	tests := []struct {
		name   string
		max    int
		writes []string
		want   []framed
	}{
		{"one line", 100, []string{"abc\n"}, []framed{{"abc", 4, false, false}}},
		{"crlf", 100, []string{"abc\r\nde\r\n"}, []framed{{"abc", 5, false, false}, {"de", 4, false, false}}},
		{"crlf split between writes", 100, []string{"abc\r", "\n"}, []framed{{"abc", 5, false, false}}},
		{"bare cr kept inside a line", 100, []string{"a\rb\n"}, []framed{{"a\rb", 4, false, false}}},
		{"empty lines", 100, []string{"\n\n"}, []framed{{"", 1, false, false}, {"", 1, false, false}}},
		{"partial across writes", 100, []string{"ab", "cd", "e\nf"}, []framed{{"abcde", 6, false, false}, {"f", 1, false, false}}},
		{"no final newline", 100, []string{"abc\ndef"}, []framed{{"abc", 4, false, false}, {"def", 3, false, false}}},
		{"cap in one write", 4, []string{"abcdefgh\nxy\n"}, []framed{{"abcd", 9, true, false}, {"xy", 3, false, false}}},
		{"cap across writes", 4, []string{"ab", "cdef", "gh\n"}, []framed{{"abcd", 9, true, false}}},
		{"cap unterminated", 4, []string{"abcdefgh"}, []framed{{"abcd", 8, true, false}}},
		{"gap drops partial and the rest of its line", 100, []string{"abc", "<gap>", "def\nghi\n"}, []framed{{"abc", 3, false, true}, {"", 4, false, true}, {"ghi", 4, false, false}}},
		{"gap at the end drops the partial", 100, []string{"abc\nde", "<gap>"}, []framed{{"abc", 4, false, false}, {"de", 2, false, true}}},
		{"gap at a line end keeps the next line", 100, []string{"abc", "<gap-eol>", "def\nghi\n"}, []framed{{"abc", 3, false, true}, {"def", 4, false, false}, {"ghi", 4, false, false}}},
		{"gap at a line end ends a skip", 100, []string{"abc", "<gap>", "x", "<gap-eol>", "def\n"}, []framed{{"abc", 3, false, true}, {"", 1, false, true}, {"def", 4, false, false}}},
		{"gap in a skip cuts what was skipped", 100, []string{"abc", "<gap>", "xy", "<gap>", "z\nd\n"}, []framed{{"abc", 3, false, true}, {"", 2, false, true}, {"", 2, false, true}, {"d", 2, false, false}}},
		{"skip unterminated at the end", 100, []string{"a", "<gap>", "bc"}, []framed{{"a", 1, false, true}, {"", 2, false, true}}},
		{"cut line over the cap keeps its prefix", 4, []string{"abcdefg", "<gap>", "h\n"}, []framed{{"abcd", 7, true, true}, {"", 2, false, true}}},
		{"gap at a line end at the end drops the partial", 100, []string{"abc\nde", "<gap-eol>"}, []framed{{"abc", 4, false, false}, {"de", 2, false, true}}},
		{"nul and invalid utf-8 pass", 100, []string{"a\x00\xff\n"}, []framed{{"a\x00\xff", 4, false, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := frameAll(tt.max, tt.writes...)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d lines %+v, want %d %+v", len(got), got, len(tt.want), tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("line %d: got %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// TestFramerBoundedMemory feeds a 64 MiB line in 64 KiB writes: the framer
// holds no more than its cap.
func TestFramerBoundedMemory(t *testing.T) {
	const max = 1 << 16
	var lines []framed
	f := NewFramer(max, func(l Line) { lines = append(lines, framed{"", l.Len, l.Truncated, l.Cut}) })
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for range 1024 {
		f.Write(chunk)
		if cap(f.buf) > 2*max {
			t.Fatalf("framer buffer grew to %d bytes, cap is %d", cap(f.buf), max)
		}
	}
	f.Write([]byte("\n"))
	if len(lines) != 1 || lines[0].len != 64<<20+1 || !lines[0].truncated {
		t.Fatalf("got %+v, want one truncated line of %d bytes", lines, 64<<20+1)
	}
}

// TestFramerLongLinePeak: a kept line of the maximal length, arriving in
// pipe-sized writes, never holds more than the final buffer and one earlier
// buffer of at most bigLine bytes; the buffers it allocated add up to less
// than twice the line (plain doubling allocated 8 MiB for a 4 MiB line, and
// held 6 MiB at once).
func TestFramerLongLinePeak(t *testing.T) {
	line := append(bytes.Repeat([]byte("y"), DefaultMaxLine-1), '\n')
	var got int64
	f := NewFramer(DefaultMaxLine, func(l Line) { got = l.Len })
	var allocated int
	prev := 0
	for off := 0; off < len(line)-1; off += 64 << 10 {
		f.Write(line[off:min(off+64<<10, len(line)-1)])
		if c := cap(f.buf); c != prev {
			if prev > bigLine && c > prev {
				t.Fatalf("the buffer grew from %d to %d bytes: past %d it must go to the limit in one step", prev, c, bigLine)
			}
			allocated += c
			prev = c
		}
	}
	f.Write(line[len(line)-1:])
	if got != int64(len(line)) {
		t.Fatalf("line of %d bytes framed as %d", len(line), got)
	}
	if allocated > DefaultMaxLine+2*bigLine {
		t.Fatalf("buffers of %d bytes allocated for a %d-byte line, want at most %d", allocated, len(line), DefaultMaxLine+2*bigLine)
	}
}

func BenchmarkFramer(b *testing.B) {
	var sb strings.Builder
	for sb.Len() < 1<<20 {
		sb.WriteString(`{"type":"assistant","message":{"content":"` + strings.Repeat("y", 2000) + `"}}` + "\n")
	}
	data := []byte(sb.String())
	f := NewFramer(DefaultMaxLine, func(Line) {})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		for off := 0; off < len(data); off += 64 << 10 {
			f.Write(data[off:min(off+64<<10, len(data))])
		}
	}
}

// notAssistant stands in for streamjson.WorthBuffering: a prefix that shows
// an assistant message is not worth buffering.
func notAssistant(prefix []byte) bool {
	return !bytes.Contains(prefix, []byte(`"type":"assistant"`))
}

// TestFramerProbe: a line still arriving that shows itself as uninteresting
// after the probe is not buffered further; an interesting one is.
func TestFramerProbe(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	for _, tc := range []struct {
		name, line string
		truncated  bool
	}{
		{"assistant stops buffering", `{"type":"assistant","message":{"content":"` + big + `"}}`, true},
		{"task_progress keeps buffering", `{"type":"system","subtype":"task_progress","task_id":"t","pad":"` + big + `"}`, false},
		{"type after a big field: undecided, keeps buffering", `{"message":"` + big + `","type":"assistant"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Line
			var maxBuf int
			f := NewFramer(1<<20, func(l Line) {
				got = append(got, Line{Len: l.Len, Truncated: l.Truncated, Data: append([]byte(nil), l.Data...)})
			})
			f.SetProbe(4096, notAssistant)
			data := []byte(tc.line + "\n")
			for off := 0; off < len(data); off += 1000 {
				f.Write(data[off:min(off+1000, len(data))])
				maxBuf = max(maxBuf, len(f.buf))
			}
			if len(got) != 1 || got[0].Len != int64(len(data)) || got[0].Truncated != tc.truncated {
				t.Fatalf("got %d lines, truncated %v, want 1 of %d bytes, truncated %v", len(got), got[0].Truncated, len(data), tc.truncated)
			}
			if tc.truncated && maxBuf > 8192 {
				t.Errorf("buffered %d bytes of a line not worth keeping", maxBuf)
			}
			if !tc.truncated && string(got[0].Data) != tc.line {
				t.Errorf("line not delivered whole")
			}
		})
	}
}

// TestFramerAccountsEveryByte (issue 29.3), a property over generated
// streams: lines of random lengths (empty, short, over the cap, CRLF, an
// unterminated last one) written in random pieces with gaps of both kinds
// between them; every byte written comes out in the Len of exactly one
// line, whole or Cut, and no Cut line comes out when there was no gap.
func TestFramerAccountsEveryByte(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 3))
	for i := range 2000 {
		var stream []byte
		for n := rng.IntN(20); n > 0; n-- {
			k := []int{0, 1, 10, 100, 5000}[rng.IntN(5)] + rng.IntN(50)
			stream = append(stream, bytes.Repeat([]byte{'a' + byte(rng.IntN(26))}, k)...)
			if rng.IntN(5) == 0 {
				stream = append(stream, '\r')
			}
			stream = append(stream, '\n')
		}
		if rng.IntN(2) == 0 {
			stream = append(stream, "tail"...)
		}
		var total, cutLines int64
		f := NewFramer(64+rng.IntN(2000), func(l Line) {
			total += l.Len
			if l.Cut {
				cutLines++
			}
		})
		if rng.IntN(2) == 0 {
			f.SetProbe(32, func([]byte) bool { return rng.IntN(2) == 0 })
		}
		gaps := 0
		for p := stream; len(p) > 0; {
			k := min(len(p), 1+rng.IntN(300))
			f.Write(p[:k])
			p = p[k:]
			switch rng.IntN(8) {
			case 0:
				f.Gap()
				gaps++
			case 1:
				f.GapAtLineEnd()
				gaps++
			}
		}
		f.Flush()
		if total != int64(len(stream)) {
			t.Fatalf("stream %d: %d bytes written, lines account for %d", i, len(stream), total)
		}
		if gaps == 0 && cutLines > 0 {
			t.Fatalf("stream %d: %d cut lines without a gap", i, cutLines)
		}
	}
}

// dropX is a Squeezer that keeps every byte but 'x'.
type dropX struct{ resets int }

func (d *dropX) Append(dst, src []byte) []byte {
	for _, c := range src {
		if c != 'x' {
			dst = append(dst, c)
		}
	}
	return dst
}

func (d *dropX) Reset() { d.resets++ }

// TestFramerSqueezer: once from bytes of a line still arriving are
// buffered, the squeezer reads the line from its start and only what it
// keeps is buffered; the line keeps its length in the stream, and past the
// cap it is Truncated as an unsqueezed line would be. A line that arrives
// whole, or is shorter than from, is not squeezed.
func TestFramerSqueezer(t *testing.T) {
	const from, max = 8, 40
	for _, tc := range []struct {
		name   string
		pieces []string
		want   []Line
	}{
		{"short line, not squeezed", []string{"axxb", "xc\n"}, []Line{{Data: []byte("axxbxc"), Len: 7}}},
		{"whole in one write, not squeezed", []string{"axxxxxxxxxxxb\n"}, []Line{{Data: []byte("axxxxxxxxxxxb"), Len: 14}}},
		{"squeezed from the start", []string{"axxxx", "xxxxbx", "xc\r\n"}, []Line{{Data: []byte("abc"), Len: 15}}},
		{"squeezed, over the cap by its length in the stream", []string{"a" + strings.Repeat("x", 20), strings.Repeat("x", 30) + "b\n"},
			[]Line{{Data: []byte("a"), Len: 53, Truncated: true}}},
		{"kept bytes up to the cap", []string{"abcdefghij", strings.Repeat("x", 29) + "kl", "mn\n"},
			[]Line{{Data: []byte("abcdefghijk"), Len: 44, Truncated: true}}},
		{"the next line starts afresh", []string{"axxxx", "xxxxb\nxy", "z\n"}, []Line{{Data: []byte("ab"), Len: 11}, {Data: []byte("xyz"), Len: 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Line
			f := NewFramer(max, func(l Line) {
				l.Data = bytes.Clone(l.Data)
				got = append(got, l)
			})
			sq := new(dropX)
			f.SetSqueezer(from, sq)
			for _, p := range tc.pieces {
				f.Write([]byte(p))
			}
			f.Flush()
			if len(got) != len(tc.want) {
				t.Fatalf("got %d lines %+v, want %+v", len(got), got, tc.want)
			}
			for i := range got {
				if string(got[i].Data) != string(tc.want[i].Data) || got[i].Len != tc.want[i].Len || got[i].Truncated != tc.want[i].Truncated {
					t.Errorf("line %d: got {%q %d %v}, want {%q %d %v}", i, got[i].Data, got[i].Len, got[i].Truncated, tc.want[i].Data, tc.want[i].Len, tc.want[i].Truncated)
				}
			}
		})
	}
}
