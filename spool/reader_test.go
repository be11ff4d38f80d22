package spool

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/tap"
)

// lineLog renders what a Reader hands its Handler as text that does not
// depend on how the lines were cut into Writes: one entry per complete
// line and record, then the unfinished lines. A discarded line leaves no
// entry: whether its head was passed on before it turned out cut depends
// on the pieces.
type lineLog struct {
	t         *testing.T
	cur       [2]strings.Builder
	entries   []string
	discarded int
}

func (l *lineLog) Write(src tap.Source, b []byte) {
	if len(b) == 0 {
		l.t.Errorf("an empty Write of %s", src)
	}
	for len(b) > 0 {
		i := strings.IndexByte(string(b), '\n')
		if i < 0 {
			l.cur[src].Write(b)
			return
		}
		l.cur[src].Write(b[:i])
		l.entries = append(l.entries, fmt.Sprintf("%s %q", src, l.cur[src].String()))
		l.cur[src].Reset()
		b = b[i+1:]
	}
}

func (l *lineLog) Discard(src tap.Source) {
	if l.cur[src].Len() == 0 {
		l.t.Errorf("Discard of %s with nothing written", src)
	}
	l.discarded++
	l.cur[src].Reset()
}

func (l *lineLog) Record(r Record) {
	switch r.Kind {
	case RecordHeader:
		l.entries = append(l.entries, fmt.Sprintf("header %d", r.Version))
	case RecordGap:
		l.entries = append(l.entries, fmt.Sprintf("gap %s %d", r.Source, r.Dropped))
	default:
		l.t.Errorf("record of kind %d reported", r.Kind)
	}
}

func (l *lineLog) String() string {
	out := append([]string(nil), l.entries...)
	for src := range l.cur {
		if l.cur[src].Len() > 0 {
			out = append(out, fmt.Sprintf("unfinished %s %q", tap.Source(src), l.cur[src].String()))
		}
	}
	return strings.Join(out, "\n")
}

// read feeds data to a new Reader in the given pieces.
func read(t *testing.T, k Kind, pieces ...string) (*Reader, *lineLog) {
	t.Helper()
	l := &lineLog{t: t}
	r := NewReader(k, l)
	for _, p := range pieces {
		if n, err := r.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	return r, l
}

const (
	initLine  = `{"type":"system","subtype":"init","session_id":"s"}`
	interrupt = `{"type":"control_request","request_id":"r","request":{"subtype":"interrupt"}}`
)

var readerCases = []struct {
	name string
	kind Kind
	data string
	want []string
	// tail is the length of the unfinished last line (not in Offset).
	tail int
}{
	{name: "plain file: every line is stdout, records too", kind: Plain,
		data: initLine + "\n\x1estdout x\n\x1egap stdout 3\nend\x1e\n",
		want: []string{`stdout "` + strings.ReplaceAll(initLine, `"`, `\"`) + `"`, `stdout "\x1estdout x"`, `stdout "\x1egap stdout 3"`, `stdout "end\x1e"`}},
	{name: "stdout lines and escaped stdout records", kind: Done,
		data: "\x1ecbcspool 1\n" + "{}\n" + "\x1estdout \x1eodd\n" + "\x1estdout\n" + "a\x1eb\n",
		want: []string{"header 1", `stdout "{}"`, `stdout "\x1eodd"`, `stdout ""`, `stdout "a\x1eb"`}},
	{name: "stamped stdin", kind: Open,
		data: "\x1estdin 1764680000123456789 {}\n",
		want: []string{`stdin "{}"`}},
	{name: "unstamped stdin (older writers)", kind: Open,
		data: "\x1estdin {}\n\x1estdin  {}\n\x1estdin\n",
		want: []string{`stdin "{}"`, `stdin " {}"`, `stdin ""`}},
	{name: "stdin digits that are no stamp", kind: Open,
		data: "\x1estdin 123\n\x1estdin 123456789012345678901234 {}\n\x1estdin 12x\n",
		want: []string{`stdin "123"`, `stdin "123456789012345678901234 {}"`, `stdin "12x"`}},
	{name: "a stdout gap: the line after it is dropped", kind: Open,
		data: "\x1egap stdout 12\n\n{}\n",
		want: []string{"gap stdout 12", `stdout "{}"`}},
	{name: "a stdout gap from an older writer: the raw fragment is dropped", kind: Open,
		data: "\x1egap stdout 7\n\"},\"x\":1}\n\x1estdin {}\n{}\n",
		want: []string{"gap stdout 7", `stdin "{}"`, `stdout "{}"`}},
	{name: "a stdout gap drops the next stdout line, not a stdin record", kind: Open,
		data: "\x1egap stdout 7\n\x1estdin {}\n\x1estdout tail\n{}\n",
		want: []string{"gap stdout 7", `stdin "{}"`, `stdout "{}"`}},
	{name: "a stdin gap drops nothing", kind: Open,
		data: "\x1egap stdin 9\n\x1estdin {}\n{}\n\x1egap\n\n",
		want: []string{"gap stdin 9", `stdin "{}"`, `stdout "{}"`, "gap stdout 0"}},
	{name: "a line cut by a gap ends with RS and is discarded", kind: Open,
		data: "{\"cut he\x1e\n\x1egap stdout 100\n\n{}\n\x1e\n\x1estdin {\"x\x1e\n",
		want: []string{"gap stdout 100", `stdout "{}"`}},
	{name: "a cut line with nothing passed on yet", kind: Open,
		data: "\x1estdout \x1e\n{}\n",
		want: []string{`stdout "{}"`}},
	{name: "a tag over maxTag is skipped", kind: Open,
		data: "\x1e" + strings.Repeat("t", maxTag+8) + " payload\n\x1e" + strings.Repeat("t", maxTag+8) + "\n{}\n",
		want: []string{`stdout "{}"`}},
	{name: "a record over maxRecord is skipped", kind: Open,
		data: "\x1egap stdout " + strings.Repeat("9", maxRecord) + "\n\x1ecbcspool " + strings.Repeat(" ", maxRecord) + "1\n{}\n",
		want: []string{`stdout "{}"`}},
	{name: "unknown tags are skipped", kind: Open,
		data: "\x1ecbcspool 7\n\x1efuture whatever it says\n{}\n",
		want: []string{"header 7", `stdout "{}"`}},
	{name: "an unfinished last line is not in the offset", kind: Done,
		data: "{}\n{\"partial\":", tail: len(`{"partial":`),
		want: []string{`stdout "{}"`, `unfinished stdout "{\"partial\":"`}},
	{name: "an unfinished record is not in the offset", kind: Done,
		data: "{}\n\x1estdin 12", tail: len("\x1estdin 12"),
		want: []string{`stdout "{}"`}},
	{name: "an unfinished cut line: RS held", kind: Done,
		data: "{}\n{\"a\x1e", tail: len("{\"a\x1e"),
		want: []string{`stdout "{}"`, `unfinished stdout "{\"a"`}},
	{name: "the session example", kind: Done,
		data: "\x1ecbcspool 1\n" + initLine + "\n\x1estdin " + interrupt + "\n\x1estdout \x1enot json\n\x1egap stdout 12\n\x1efuture whatever\n",
		want: []string{"header 1", `stdout "` + strings.ReplaceAll(initLine, `"`, `\"`) + `"`, `stdin "` + strings.ReplaceAll(interrupt, `"`, `\"`) + `"`, `stdout "\x1enot json"`, "gap stdout 12"}},
}

func TestReader(t *testing.T) {
	for _, tc := range readerCases {
		t.Run(tc.name, func(t *testing.T) {
			r, l := read(t, tc.kind, tc.data)
			if got, want := l.String(), strings.Join(tc.want, "\n"); got != want {
				t.Fatalf("got\n%s\nwant\n%s", got, want)
			}
			if want := int64(len(tc.data) - tc.tail); r.Offset() != want || r.Pos() != int64(len(tc.data)) {
				t.Fatalf("offset %d pos %d, want %d %d", r.Offset(), r.Pos(), want, len(tc.data))
			}
		})
	}
}

// Feeding the bytes in any pieces gives the same lines and offsets as one
// feed: every split in two, every split in three of the shorter cases,
// and chunks of every small size.
func TestReaderAnySplit(t *testing.T) {
	for _, tc := range readerCases {
		t.Run(tc.name, func(t *testing.T) {
			r1, l1 := read(t, tc.kind, tc.data)
			want := l1.String()
			check := func(how string, pieces ...string) {
				t.Helper()
				r, l := read(t, tc.kind, pieces...)
				if got := l.String(); got != want || r.Offset() != r1.Offset() || r.Pos() != r1.Pos() {
					t.Fatalf("%s: got\n%s\noffset %d pos %d; want\n%s\noffset %d pos %d", how, got, r.Offset(), r.Pos(), want, r1.Offset(), r1.Pos())
				}
			}
			d := tc.data
			for i := 0; i <= len(d); i++ {
				check(fmt.Sprintf("split at %d", i), d[:i], d[i:])
				if len(d) > 120 {
					continue
				}
				for j := i; j <= len(d); j++ {
					check(fmt.Sprintf("split at %d and %d", i, j), d[:i], d[i:j], d[j:])
				}
			}
			for size := 1; size <= 8; size++ {
				var pieces []string
				for i := 0; i < len(d); i += size {
					pieces = append(pieces, d[i:min(i+size, len(d))])
				}
				check(fmt.Sprintf("chunks of %d", size), pieces...)
			}
		})
	}
}

// Reset drops the unfinished line of each source and reads on from the
// offset given, at the start of a line.
func TestReaderReset(t *testing.T) {
	r, l := read(t, Open, "{}\n\x1estdin {}\n{\"a\":", "\x1egap")
	r.Reset(0)
	if got, want := l.String(), "stdout \"{}\"\nstdin \"{}\""; got != want || l.discarded != 1 {
		t.Fatalf("after Reset: got\n%s\nwant\n%s\n(%d discarded, want 1)", got, want, l.discarded)
	}
	if r.Offset() != 0 || r.Pos() != 0 {
		t.Fatalf("offset %d pos %d after Reset(0)", r.Offset(), r.Pos())
	}
	r.Write([]byte("\x1egap stdout 1\n"))
	r.Reset(100) // the skip a gap asked for does not outlive a Reset
	r.Write([]byte("{}\n"))
	if r.Offset() != 103 || !strings.HasSuffix(l.String(), "gap stdout 1\nstdout \"{}\"") {
		t.Fatalf("offset %d, log\n%s", r.Offset(), l)
	}
}

// FuzzReaderSplit: one feed and a feed in two pieces give the same result,
// whatever the bytes.
func FuzzReaderSplit(f *testing.F) {
	for _, tc := range readerCases {
		f.Add([]byte(tc.data), uint(len(tc.data)/2), tc.kind == Plain)
	}
	f.Fuzz(func(t *testing.T, data []byte, at uint, plain bool) {
		k := Open
		if plain {
			k = Plain
		}
		i := int(at % uint(len(data)+1))
		r1, l1 := read(t, k, string(data))
		r2, l2 := read(t, k, string(data[:i]), string(data[i:]))
		if l1.String() != l2.String() || r1.Offset() != r2.Offset() || r1.Pos() != r2.Pos() {
			t.Fatalf("split at %d: %q\none feed:\n%s\ntwo:\n%s", i, data, l1, l2)
		}
	})
}

// What the Writer writes around gaps, the Reader reads back as the whole
// lines only: the cut line and the tail after a gap are not lines.
func TestWriterThenReader(t *testing.T) {
	w, err := Create(t.TempDir(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tp := tap.NewTap(512)
	tp.Write(make([]byte, 600)) // more than the queue: the tail is dropped
	w.stdout([]byte(`{"type":"assistant","partial`))
	w.gap(tap.SourceStdout, tp, false)
	w.stdout([]byte("tail of a lost line\n{\"x\":1}\n"))
	w.stdin([]byte(interrupt + "\n"))
	w.stdout([]byte(`{"held`))
	w.gap(tap.SourceStdout, tp, true)
	w.stdout([]byte("{\"y\":2}\n"))
	if err := w.finish(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	_, lost, _ := tp.Stats()
	r, l := read(t, KindOf(w.Path()), string(b))
	want := strings.Join([]string{"header 1", fmt.Sprintf("gap stdout %d", lost), `stdout "{\"x\":1}"`,
		`stdin "` + strings.ReplaceAll(interrupt, `"`, `\"`) + `"`, "gap stdout 0", `stdout "{\"y\":2}"`}, "\n")
	if got := l.String(); got != want || r.Offset() != int64(len(b)) {
		t.Fatalf("read back\n%s\nwant\n%s\n(offset %d of %d)", got, want, r.Offset(), len(b))
	}
}
