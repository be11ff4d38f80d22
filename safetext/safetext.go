// Package safetext makes untrusted text safe to keep, print, export or use
// as a label, once, at the boundary where it enters (the stream decoder,
// the CLI's own telemetry, the build's version): Clean. What passed Clean
// stays clean when cut on a rune boundary, so the sinks only Cut it to
// their own bounds (Cut(Clean(s, a), b) == Clean(Clean(s, a), b), a
// property FuzzCutOfClean holds). It imports nothing of ours.
package safetext

import (
	"strings"
	"unicode/utf8"
)

// Clean makes untrusted text safe to keep, print, export or use as a label:
// it drops control characters (C0, C1, DEL), bidirectional formatting marks
// (which can make a terminal or dashboard show text other than what it is),
// and invalid UTF-8, collapses whitespace runs to one space, and cuts the
// result to at most max bytes on a rune boundary.
func Clean(s string, max int) string {
	if max <= 0 {
		return ""
	}
	// Plain text is clean: only the bound applies, and what Clean keeps of
	// s depends on its first max+1 bytes alone.
	if p := s[:min(len(s), max+1)]; IsPlain(p) {
		return Cut(p, max)
	}
	return clean(s, max)
}

// clean is Clean rune by rune, for text that is not plain.
func clean(s string, max int) string {
	var b strings.Builder
	b.Grow(min(len(s), max))
	space := false
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == utf8.RuneError && size <= 1:
			continue
		case r == '\t' || r == '\n' || r == '\r' || r == ' ':
			if space || b.Len() == 0 {
				continue
			}
			space = true
			r = ' '
		case r < 0x20 || (r >= 0x7f && r < 0xa0) || isBidi(r):
			continue
		default:
			space = false
		}
		if b.Len()+utf8.RuneLen(r) > max {
			break
		}
		b.WriteRune(r)
	}
	return strings.TrimRight(b.String(), " ")
}

// Cut cuts text that already passed Clean to at most max bytes on a rune
// boundary, dropping the space a cut may leave at the end: what Clean
// would return for it, without looking at every rune again. Text that did
// not pass Clean is cut as well, but not cleaned.
func Cut(s string, max int) string {
	if max <= 0 {
		return ""
	}
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return strings.TrimRight(s[:i], " ")
}

// IsClean reports whether s is what Clean(s, max) returns: text that
// passed Clean to that bound. It lets a consumer of clean text check text
// it reads back (its own checkpoint) without cleaning it again.
func IsClean(s string, max int) bool {
	if max <= 0 || len(s) > max {
		return s == ""
	}
	return IsPlain(s) || clean(s, max) == s
}

// IsPlain reports whether s is printable ASCII without runs of spaces, or
// spaces at either end: text that Clean returns unchanged when it fits.
func IsPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f {
			return false
		}
		if c == ' ' && (i == 0 || i == len(s)-1 || s[i-1] == ' ') {
			return false
		}
	}
	return true
}

// isBidi reports the Unicode bidirectional formatting characters and the
// invisible marks that attack displays (Trojan tap.Source, CVE-2021-42574).
func isBidi(r rune) bool {
	switch {
	case r == 0x061c, r == 0x200e, r == 0x200f:
		return true
	case r >= 0x202a && r <= 0x202e:
		return true
	case r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x200b || r == 0x200c || r == 0x200d || r == 0x2060 || r == 0xfeff:
		return true
	}
	return false
}
