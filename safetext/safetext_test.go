package safetext

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestClean(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"tab\tand\r\nnewline", "tab and newline"},
		{"bell\x07 esc\x1b[31m", "bell esc[31m"},
		{"rtl\u202etxet", "rtltxet"},
		{"zero\u200bwidth", "zerowidth"},
		{"bad\xffutf8", "badutf8"},
		{"  trim  ", "trim"},
		{"ünïcode ok", "ünïcode ok"},
		{"c1\u0085x", "c1x"},
		{strings.Repeat("ab ", 50), strings.Repeat("ab ", 33) + "a"}, // plain, cut at the bound
	}
	for _, tt := range tests {
		if got := Clean(tt.in, 100); got != tt.want {
			t.Errorf("Clean(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := Clean("abcd efgh", 5); got != "abcd" {
		t.Errorf("plain text cut after a space: got %q", got)
	}
	if got := Clean(strings.Repeat("é", 10), 5); got != "éé" {
		t.Errorf("cut on a rune boundary: got %q", got)
	}
}

func TestCut(t *testing.T) {
	for _, tt := range []struct {
		in   string
		max  int
		want string
	}{
		{"plain", 10, "plain"},
		{"plain", 5, "plain"},
		{"plain", 3, "pla"},
		{"a b", 2, "a"}, // the space a cut leaves is dropped
		{"éé", 3, "é"},  // never half a rune
		{"日本語", 2, ""},  // no whole rune fits
		{"x", 0, ""},    // nothing allowed
		{"x", -1, ""},
		{"", 4, ""},
		{"ab cd ef", 6, "ab cd"},           // cut right after a space
		{"ab\u00a0cd", 3, "ab"},            // a no-break space is two bytes, not cut in half
		{"\U0001F600 ok", 4, "\U0001F600"}, // four-byte rune, then the space trimmed
	} {
		if got := Cut(tt.in, tt.max); got != tt.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}

func TestIsClean(t *testing.T) {
	for _, tt := range []struct {
		in   string
		max  int
		want bool
	}{
		{"", 0, true}, {"", 5, true}, {"x", 0, false}, {"plain", 5, true}, {"plain", 4, false},
		{"ünï code", 20, true}, {"a  b", 20, false}, {" a", 20, false}, {"bad\xff", 20, false},
		{"rtl\u202e", 20, false}, {"tab\t", 20, false}, {"éé", 3, false}, {"é", 2, true},
	} {
		if got := IsClean(tt.in, tt.max); got != tt.want {
			t.Errorf("IsClean(%q, %d) = %v, want %v", tt.in, tt.max, got, tt.want)
		}
	}
}

func TestIsPlain(t *testing.T) {
	for in, want := range map[string]bool{
		"": true, "a b": true, "a  b": false, " a": false, "a ": false,
		"tab\t": false, "é": false, "~": true, "\x7f": false,
	} {
		if got := IsPlain(in); got != want {
			t.Errorf("IsPlain(%q) = %v, want %v", in, got, want)
		}
		// Whatever IsPlain accepts, Clean leaves alone.
		if want && Clean(in, len(in)+1) != in {
			t.Errorf("Clean changed plain %q", in)
		}
	}
}

// FuzzCutOfClean holds what lets Cut stand for Clean: on text that passed
// Clean, cutting and cleaning again agree, for every pair of bounds; and
// Clean's fast path for plain text agrees with the rune-by-rune one.
// Clean's output is clean: valid UTF-8, no control or bidirectional
// formatting character, no space at either end or twice.
func FuzzCutOfClean(f *testing.F) {
	for _, s := range []string{"", "plain", "a b", "  trim  ", "tab\tand\r\nnewline", "rtl\u202etxet", "bad\xffutf8",
		"ünïcode ok", "c1\u0085x", "日本語 テキスト", "\U0001F600 ok", "a\u00a0b", "\ufffd\ufffd", strings.Repeat("é ", 40)} {
		f.Add(s, 64, 7)
		f.Add(s, 3, 2)
	}
	f.Fuzz(func(t *testing.T, s string, a, b int) {
		a, b = a%300, b%300
		c := Clean(s, a)
		if len(c) > max(a, 0) || !utf8.ValidString(c) || strings.HasPrefix(c, " ") || strings.HasSuffix(c, " ") || strings.Contains(c, "  ") {
			t.Fatalf("Clean(%q, %d) = %q: not clean", s, a, c)
		}
		for _, r := range c {
			if unicode.IsControl(r) || isBidi(r) {
				t.Fatalf("Clean(%q, %d) = %q keeps %U", s, a, c, r)
			}
		}
		if a > 0 && c != clean(s, a) {
			t.Fatalf("Clean(%q, %d) = %q, rune by rune %q", s, a, c, clean(s, a))
		}
		if Clean(c, a) != c {
			t.Fatalf("Clean is not idempotent on %q", s)
		}
		if got, want := Cut(c, b), Clean(c, b); got != want {
			t.Fatalf("Cut(Clean(%q, %d), %d) = %q, Clean of it = %q", s, a, b, got, want)
		}
		// IsClean is the definition: what Clean leaves as it is.
		if !IsClean(c, a) || IsClean(s, a) != (Clean(s, a) == s) || IsClean(s, b) != (Clean(s, b) == s) {
			t.Fatalf("IsClean(%q, %d) = %v, IsClean(%q, %d) = %v, Clean = %q", c, a, IsClean(c, a), s, a, IsClean(s, a), Clean(s, a))
		}
	})
}
