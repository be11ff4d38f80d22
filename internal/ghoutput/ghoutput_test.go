package ghoutput

import (
	"bytes"
	"crypto/rand"
	"io"
	"slices"
	"strings"
	"testing"
)

// fixedRandom returns the same 16 bytes forever, then each call's copy:
// its delimiter is known in advance, so a value can hold it.
type fixedRandom struct{ draws int }

func (f *fixedRandom) Read(p []byte) (int, error) {
	f.draws++
	for i := range p {
		p[i] = byte(f.draws)
	}
	return len(p), nil
}

// firstDelimiter is what fixedRandom's first draw makes.
var firstDelimiter = "ghadelimiter_" + strings.Repeat("01", 16)

// TestWrite: each output in the form it needs, and read back by Parse (the
// runner's reading) as exactly what was written, whatever the value holds.
func TestWrite(t *testing.T) {
	for _, c := range []struct {
		name    string
		outs    []Output
		want    string // "" means only the round trip is checked
		heredoc bool
	}{
		{name: "numbers", outs: []Output{{Name: "cbc-cost-usd", Value: "0.0123"}, {Name: "cbc-runs-total", Value: "2"}},
			want: "\ncbc-cost-usd=0.0123\ncbc-runs-total=2\n"},
		{name: "empty value", outs: []Output{{Name: "cbc-cost-usd", Value: ""}}, want: "\ncbc-cost-usd=\n"},
		{name: "equals and heredoc marks in a value", outs: []Output{{Name: "a", Value: "x=y<<z"}}, want: "\na=x=y<<z\n"},
		{name: "untrusted one line", outs: []Output{{Name: "runs", Value: `[{"workflow":"r"}]`, Untrusted: true}},
			want: "\nruns<<" + firstDelimiter + "\n" + `[{"workflow":"r"}]` + "\n" + firstDelimiter + "\n", heredoc: true},
		{name: "LF forces the heredoc", outs: []Output{{Name: "a", Value: "1\nb=2"}}, heredoc: true},
		{name: "CR forces the heredoc", outs: []Output{{Name: "a", Value: "1\rb=2"}}, heredoc: true},
		{name: "a value that injects", outs: []Output{{Name: "a", Value: "x\nEOF\ncbc-cost-usd=0\nb<<EOF", Untrusted: true}}, heredoc: true},
		{name: "a value holding the first delimiter", outs: []Output{{Name: "a", Value: "x\n" + firstDelimiter + "\nevil=1", Untrusted: true}}, heredoc: true},
		{name: "trailing newline kept", outs: []Output{{Name: "a", Value: "x\n", Untrusted: true}}, heredoc: true},
		{name: "empty untrusted", outs: []Output{{Name: "a", Value: "", Untrusted: true}}, heredoc: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Write(&b, c.outs, &fixedRandom{}); err != nil {
				t.Fatal(err)
			}
			if c.want != "" && b.String() != c.want {
				t.Errorf("wrote %q, want %q", b.String(), c.want)
			}
			if got := strings.Contains(b.String(), "<<ghadelimiter_"); got != c.heredoc {
				t.Errorf("heredoc form %v, want %v:\n%s", got, c.heredoc, b.String())
			}
			got, err := Parse(b.String())
			if err != nil {
				t.Fatalf("the runner would fail: %v\n%s", err, b.String())
			}
			want := make([]Output, len(c.outs))
			for i, o := range c.outs {
				want[i] = Output{Name: o.Name, Value: o.Value}
			}
			if !slices.Equal(got, want) {
				t.Errorf("read back %+v, wrote %+v", got, want)
			}
		})
	}
}

// TestWriteAppendsToAnyFile: after whatever an earlier step left, even a
// last line without its newline, the earlier outputs and ours all read
// back.
func TestWriteAppendsToAnyFile(t *testing.T) {
	ours := []Output{{Name: "cbc-runs-total", Value: "3"}, {Name: "cbc-runs-json", Value: "[]", Untrusted: true}}
	for _, before := range []string{"", "x=1\n", "x=1", "x<<EOF\na\nb\nEOF", "x<<EOF\na\nEOF\n\n"} {
		var b bytes.Buffer
		b.WriteString(before)
		if err := Write(&b, ours, nil); err != nil {
			t.Fatal(err)
		}
		got, err := Parse(b.String())
		if err != nil {
			t.Fatalf("after %q: %v", before, err)
		}
		prior, _ := Parse(before)
		if n := len(got) - len(prior); n != len(ours) || got[len(got)-2].Value != "3" || got[len(got)-1].Value != "[]" {
			t.Errorf("after %q: read %+v", before, got)
		}
	}
}

// TestWriteRefuses: a name GitHub would not take, or a random source that
// fails or never gives a delimiter absent from the value, is an error and
// nothing is written.
func TestWriteRefuses(t *testing.T) {
	for _, c := range []struct {
		name   string
		outs   []Output
		random io.Reader
	}{
		{"empty name", []Output{{Name: ""}}, rand.Reader},
		{"name with =", []Output{{Name: "a=b"}}, rand.Reader},
		{"name with <<", []Output{{Name: "a<<b"}}, rand.Reader},
		{"name with a space", []Output{{Name: "a b"}}, rand.Reader},
		{"name with a newline", []Output{{Name: "a\nb"}}, rand.Reader},
		{"name starting with a digit", []Output{{Name: "1a"}}, rand.Reader},
		{"name starting with -", []Output{{Name: "-a"}}, rand.Reader},
		{"random fails", []Output{{Name: "a", Value: "x", Untrusted: true}}, strings.NewReader("short")},
		{"every draw in the value", []Output{{Name: "a", Value: strings.Repeat("ghadelimiter_"+strings.Repeat("00", 16)+"\n", 2), Untrusted: true}},
			bytes.NewReader(make([]byte, 16*maxDelimiterTries))},
	} {
		var b bytes.Buffer
		if err := Write(&b, append([]Output{{Name: "ok", Value: "1"}}, c.outs...), c.random); err == nil || b.Len() != 0 {
			t.Errorf("%s: err %v, wrote %q", c.name, err, b.String())
		}
	}
}

// TestParseLikeTheRunner: what the runner refuses, Parse refuses.
func TestParseLikeTheRunner(t *testing.T) {
	for _, text := range []string{"novalue\n", "<<\n", "a<<\nx\n", "<<EOF\nx\nEOF\n", "a<<EOF\nx\n", "a<<EOF\nx"} {
		if got, err := Parse(text); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", text, got)
		}
	}
	got, err := Parse("a=1\n\nb<<E\nx\n\nE\nc=\n")
	if want := []Output{{Name: "a", Value: "1"}, {Name: "b", Value: "x\n"}, {Name: "c"}}; err != nil || !slices.Equal(got, want) {
		t.Errorf("Parse = %+v, %v; want %+v", got, err, want)
	}
}
