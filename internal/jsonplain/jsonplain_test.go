package jsonplain

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// plainRef is Prefix byte by byte.
func plainRef(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return i
		}
	}
	return len(s)
}

// TestPrefix holds the word-at-a-time scan to the byte-at-a-time
// rule, for strings and byte slices alike: every byte value at every position of strings around the word size
// (the first byte to escape is found wherever it is), and random strings.
func TestPrefix(t *testing.T) {
	naive := func(s string) int {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < ' ' || c == '"' || c == '\\' || c >= utf8.RuneSelf {
				return i
			}
		}
		return len(s)
	}
	b := []byte(strings.Repeat("a~ !#[]}", 4))
	for n := 0; n <= len(b); n++ {
		for p := 0; p < n; p++ {
			for c := range 256 {
				s := append([]byte(nil), b[:n]...)
				s[p] = byte(c)
				if got, want := Prefix(string(s)), naive(string(s)); got != want || Prefix(s) != want {
					t.Fatalf("Prefix(%q) = %d, want %d", s, got, want)
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(7, 7))
	for range 20000 {
		s := make([]byte, r.IntN(40))
		for i := range s {
			s[i] = byte(0x1c + r.IntN(0x66)) // around both ends of the plain range
		}
		if got, want := Prefix(string(s)), naive(string(s)); got != want || Prefix(s) != want {
			t.Fatalf("Prefix(%q) = %d, want %d", s, got, want)
		}
	}
}

func FuzzPrefix(f *testing.F) {
	for _, s := range []string{"", "plain text here!", "tab\there", "quote\"", "back\\", "caf\u00e9 and more", "\x7f\x80\xff", "~~~~~~~~ "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := Prefix(s), plainRef(s); got != want || Prefix([]byte(s)) != want {
			t.Fatalf("Prefix(%q) = %d, want %d", s, got, want)
		}
	})
}
