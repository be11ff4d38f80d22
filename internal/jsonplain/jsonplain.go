// Package jsonplain finds how much of a JSON string's text is written as it
// is: the run of printable ASCII other than '"' and '\\' that a scanner can
// step over and an encoder can copy. The stream decoder (streamjson) and the
// traces file's encoder (egress) both look for the end of that run eight
// bytes at a time; the word test is subtle enough to be written once.
package jsonplain

import "math/bits"

// Prefix returns the length of s's leading run of plain bytes: every byte
// up to the first that is a control character (< 0x20), '"', '\\' or not
// ASCII (≥ 0x80), or len(s). Eight bytes are tested at a time.
func Prefix[S ~string | ~[]byte](s S) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		b := s[i : i+8]
		w := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		// A byte's high bit is set in special when it is below 0x20, '"'
		// or '\\' (a subtraction's borrow can flag a byte above a real
		// hit, never below one), and non-ASCII bytes flag themselves: the
		// lowest flagged byte is the first special one.
		special := (w - lo*0x20) | (w ^ lo*'"' - lo) | (w ^ lo*'\\' - lo)
		if m := (special&^w | w) & hi; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			break
		}
	}
	return i
}
