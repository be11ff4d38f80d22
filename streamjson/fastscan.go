package streamjson

import (
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/cbc-otel/cbc-otel/internal/jsonplain"
)

// A hand-written scanner for lines of interest (issue #11).
//
// encoding/json was most of the CPU time of a task-heavy replay: reflection,
// a validating pre-pass and a string per field. The scanner below reads the
// fields of wire and wireEntry, and only those, in one pass that also
// validates the whole line with encoding/json's grammar, so that it can say
// "invalid_json" by itself. Names are matched exactly, as JSON's are
// case-sensitive. A value of the wrong type is skipped (validated) and
// marked bad for its field alone. The scanner gives up (scanUnsure) where
// decoding is less simple than a byte compare: a key with an escape or a
// non-ASCII byte, a duplicate field (the last one wins), nesting deeper
// than maxScanDepth. The line then goes to decodePlain, which stays the
// reference: FuzzFastDecode checks that both give the same Events and
// reasons.

// scanStatus is the outcome of scanning a value.
type scanStatus uint8

const (
	scanOK     scanStatus = iota
	scanSyntax            // not JSON: encoding/json reports a *SyntaxError
	scanUnsure            // leave the line to encoding/json
)

// maxScanDepth bounds nesting (encoding/json allows 10000): deeper lines go
// to encoding/json, so that recursion here stays shallow.
const maxScanDepth = 200

// span is a JSON string's contents in the line, quotes excluded. esc is set
// when it holds an escape or a non-ASCII byte: then it must be unquoted
// like encoding/json does, else its bytes are the string.
type span struct {
	off, end int
	esc      bool
	set      bool
}

// fastScan is a scanner's state; it lives in the Decoder and is reused.
type fastScan struct {
	b       []byte
	depth   int
	scratch []byte
	memo    *stringMemo
}

// topScan is what the line's scanner found at the top level, beside what
// it put in the Decoder's wire directly.
type topScan struct {
	// The top-level strings, turned into strings only if convert reads
	// them, by field number.
	spans      [numWireFields]span
	bad        uint32 // like wire.bad
	taskIDRaw  [2]int // the task_id value's bytes, the snapshot cache's key
	progressOK bool   // workflow_progress was an array, decoded into the cache's spare
}

func (s *fastScan) ws(i int) int {
	for i < len(s.b) {
		switch s.b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// str scans the string that opens at b[i] and returns the index past it
// and its contents.
func (s *fastScan) str(i int) (int, span, scanStatus) {
	b := s.b
	sp := span{off: i + 1, set: true}
	i++
	for {
		// Step over the plain run (most strings are all plain), eight
		// bytes at a time, straight to the first special byte.
		i += jsonplain.Prefix(b[i:])
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			sp.end = i
			return i + 1, sp, scanOK
		case c < 0x20:
			return 0, sp, scanSyntax
		case c == '\\':
			sp.esc = true
			if i+1 >= len(b) {
				return 0, sp, scanSyntax
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return 0, sp, scanSyntax
				}
				i += 6
			default:
				return 0, sp, scanSyntax
			}
		case c >= 0x80:
			sp.esc = true
			i++
		default:
			i++
		}
	}
	return 0, sp, scanSyntax
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func hexVal(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// number scans the number that starts at b[i] (JSON's grammar; what follows
// it is the caller's to check).
func (s *fastScan) number(i int) (int, scanStatus) {
	b := s.b
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return 0, scanSyntax
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		for i++; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
		}
	default:
		return 0, scanSyntax
	}
	if i < len(b) && b[i] == '.' {
		i++
		j := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == j {
			return 0, scanSyntax
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == j {
			return 0, scanSyntax
		}
	}
	return i, scanOK
}

func (s *fastScan) literal(i int, lit string) (int, scanStatus) {
	if len(s.b)-i < len(lit) || string(s.b[i:i+len(lit)]) != lit {
		return 0, scanSyntax
	}
	return i + len(lit), scanOK
}

// skip scans any value that starts at b[i], validating it.
func (s *fastScan) skip(i int) (int, scanStatus) {
	if i >= len(s.b) {
		return 0, scanSyntax
	}
	switch c := s.b[i]; {
	case c == '"':
		end, _, st := s.str(i)
		return end, st
	case c == '{':
		return s.object(i, nil)
	case c == '[':
		return s.array(i)
	case c == 't':
		return s.literal(i, "true")
	case c == 'f':
		return s.literal(i, "false")
	case c == 'n':
		return s.literal(i, "null")
	case c == '-' || '0' <= c && c <= '9':
		return s.number(i)
	}
	return 0, scanSyntax
}

func (s *fastScan) array(i int) (int, scanStatus) {
	if s.depth++; s.depth > maxScanDepth {
		return 0, scanUnsure
	}
	i = s.ws(i + 1)
	if i < len(s.b) && s.b[i] == ']' {
		s.depth--
		return i + 1, scanOK
	}
	for {
		end, st := s.skip(i)
		if st != scanOK {
			return 0, st
		}
		i = s.ws(end)
		if i >= len(s.b) {
			return 0, scanSyntax
		}
		switch s.b[i] {
		case ',':
			i = s.ws(i + 1)
		case ']':
			s.depth--
			return i + 1, scanOK
		default:
			return 0, scanSyntax
		}
	}
}

// fieldFunc scans the value of a key of an object at b[i] into its field.
// known is false for a key that is not a field (the value is then skipped
// by the caller).
type fieldFunc func(key []byte, i int) (end int, known bool, st scanStatus)

// object scans the object that opens at b[i], handing each key to field
// (nil: skip every value). A key that is not plain ASCII makes it unsure:
// encoding/json would unescape it (or replace invalid UTF-8) first.
func (s *fastScan) object(i int, field fieldFunc) (int, scanStatus) {
	if s.depth++; s.depth > maxScanDepth {
		return 0, scanUnsure
	}
	b := s.b
	i = s.ws(i + 1)
	if i < len(b) && b[i] == '}' {
		s.depth--
		return i + 1, scanOK
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, scanSyntax
		}
		kEnd, k, st := s.str(i)
		if st != scanOK {
			return 0, st
		}
		i = s.ws(kEnd)
		if i >= len(b) || b[i] != ':' {
			return 0, scanSyntax
		}
		i = s.ws(i + 1)
		if i >= len(b) {
			return 0, scanSyntax
		}
		var end int
		known := false
		if field != nil {
			if k.esc {
				return 0, scanUnsure
			}
			key := b[k.off:k.end]
			end, known, st = field(key, i)
			if st != scanOK {
				return 0, st
			}
		}
		if !known {
			if end, st = s.skip(i); st != scanOK {
				return 0, st
			}
		}
		i = s.ws(end)
		if i >= len(b) {
			return 0, scanSyntax
		}
		switch b[i] {
		case ',':
			i = s.ws(i + 1)
		case '}':
			s.depth--
			return i + 1, scanOK
		default:
			return 0, scanSyntax
		}
	}
}

// strField scans a value for a string field: a string, or null (no
// change); bad reports any other value, which is skipped.
func (s *fastScan) strField(i int, dst *span) (end int, st scanStatus, bad bool) {
	switch s.b[i] {
	case '"':
		end, sp, st := s.str(i)
		if st == scanOK {
			*dst = sp
		}
		return end, st, false
	case 'n':
		end, st = s.literal(i, "null")
		return end, st, false
	}
	end, st = s.skip(i)
	return end, st, true
}

// floatField scans a value for a number field: a number, or null (no
// change); bad reports any other value, and a number that overflows a
// float64 (1e400), which leave dst unchanged.
func (s *fastScan) floatField(i int, dst *float64) (end int, st scanStatus, bad bool) {
	b := s.b
	switch c := b[i]; {
	case c == '-' || '0' <= c && c <= '9':
		end, st := s.number(i)
		if st != scanOK {
			return 0, st, false
		}
		f, ok := parseFloat(b[i:end])
		if ok {
			*dst = f
		}
		return end, scanOK, !ok
	case c == 'n':
		end, st = s.literal(i, "null")
		return end, st, false
	}
	end, st = s.skip(i)
	return end, st, true
}

// parseFloat converts a number the scanner checked; ok is false when it
// overflows a float64. Plain integers of up to 15 digits are exact in a
// float64, so converting them directly gives what strconv.ParseFloat
// gives.
func parseFloat(num []byte) (float64, bool) {
	if len(num) <= 15 && num[0] != '-' {
		var n int64
		plain := true
		for _, c := range num {
			if c < '0' || c > '9' {
				plain = false
				break
			}
			n = n*10 + int64(c-'0')
		}
		if plain {
			return float64(n), true
		}
	}
	// strconv copies the string into the error it returns, if any.
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(num), len(num)), 64)
	return f, err == nil
}

// boolField scans a value for a bool field: true, false, or null (no
// change); bad reports any other value.
func (s *fastScan) boolField(i int, dst *bool) (end int, st scanStatus, bad bool) {
	switch s.b[i] {
	case 't':
		*dst = true
		end, st = s.literal(i, "true")
		return end, st, false
	case 'f':
		*dst = false
		end, st = s.literal(i, "false")
		return end, st, false
	case 'n':
		end, st = s.literal(i, "null")
		return end, st, false
	}
	end, st = s.skip(i)
	return end, st, true
}

// raw returns a scanned string's contents, unescaped into the scratch
// buffer if need be: valid until the scanner's next call.
func (s *fastScan) raw(sp span) []byte {
	b := s.b[sp.off:sp.end]
	if sp.esc {
		s.scratch = appendUnquoted(s.scratch[:0], b)
		b = s.scratch
	}
	return b
}

// text returns a scanned string as encoding/json decodes it.
func (s *fastScan) text(sp span) string {
	if !sp.set {
		return ""
	}
	b := s.raw(sp)
	if s.memo == nil {
		s.memo = new(stringMemo)
	}
	return s.memo.get(b)
}

// stringMemo remembers recent short strings: a stream repeats its session,
// task and agent IDs, labels and states on line after line, and decoding
// each of them to the same string again was most of the scanner's
// allocations. It is a small direct-mapped cache, so it is bounded.
type stringMemo [256]string

// memoMax is the longest string remembered (an agentId is about 70 bytes).
const memoMax = 128

func (m *stringMemo) get(b []byte) string {
	if len(b) > memoMax {
		return string(b)
	}
	if len(b) == 0 {
		return ""
	}
	h := uint(len(b))*0x9e3779b1 ^ uint(b[0])*31 ^ uint(b[len(b)-1])*131 ^ uint(b[len(b)/2])*7919 ^ uint(b[len(b)*3/4])<<5
	slot := &m[h%uint(len(m))]
	if *slot != string(b) {
		*slot = string(b)
	}
	return *slot
}

// appendUnquoted appends the contents of a string the scanner checked,
// unescaped like encoding/json does: invalid UTF-8 and unpaired surrogates
// become U+FFFD.
func appendUnquoted(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			switch s[i+1] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hexVal(s[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					r1 := rune(-1)
					if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
						r1 = hexVal(s[i+2:])
					}
					if dec := utf16.DecodeRune(r, r1); dec != unicode.ReplacementChar {
						dst = utf8.AppendRune(dst, dec)
						i += 6
						continue
					}
					r = unicode.ReplacementChar
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, s[i+1])
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			dst = utf8.AppendRune(dst, r)
			i += size
		}
	}
	return dst
}
