package streamjson

import (
	"bytes"
	"unicode"
)

// Squeezing a snapshot while it arrives.
//
// The decoder reads at most DecodeOptions.MaxElements elements of a
// workflow_progress array: the rest are only validated and counted
// (Event.ElementsOverCap). A hostile or huge snapshot (20,000 agents, a
// 4 MiB line) was nevertheless buffered whole by the framer before the
// decoder skipped most of it, and that buffer was the peak of `run`'s
// resident set under the state attack of docs/reliability.md. A Squeezer
// reads the line as it streams in and keeps, of each element beyond the
// bound, a single 0: an element the decoder skips unread, so the squeezed
// line decodes to exactly what the whole line decodes to, with what is
// buffered bounded by the elements that are read.
//
// Exactness: an element is replaced only after the Squeezer has checked
// that it is one complete JSON value as encoding/json's scanner defines it
// (strings without raw control characters, the escapes, numbers, literals,
// nesting up to encoding/json's depth of 10,000); whitespace between such
// elements is dropped, the commas and the closing bracket are kept. Once
// it has dropped anything, a syntax error inside the object (a malformed
// element, or a 0 that the next bytes would extend into a valid number)
// makes the Squeezer write a byte no JSON may contain (0x01) in place of
// the bad byte and keep the rest raw: the line is invalid, and so is
// the squeezed line. Nothing
// is squeezed unless the bytes before the first replaced element already
// show a line that Decode decodes (reachesDecoder): then a line that ends
// early or is malformed is invalid_json whichever bytes it ends with.
// Anything the Squeezer does not follow (a top-level value that is not an
// object, an escaped key, a syntax error before the elements it may drop)
// stops it: the rest of the line is kept raw, which is always exact.
// FuzzSqueeze checks the equivalence on both decoding paths.

// squeezeKey is the top-level key whose array is squeezed.
const squeezeKey = "workflow_progress"

// maxNestingDepth is encoding/json's limit on nested arrays and objects: a
// deeper value is a syntax error there, so it must be one here.
const maxNestingDepth = 10000

// poison is a byte no JSON text may hold, in a string or out of one: what
// the Squeezer writes where a dropped element turned out to be malformed.
const poison = 0x01

type squeezeState uint8

const (
	sqValue   squeezeState = iota // a value expected (the top, after ':', after ',' in an array)
	sqArrOpen                     // after '[': a value or ']'
	sqObjOpen                     // after '{': a key or '}'
	sqKey                         // after ',' in an object: a key
	sqColon                       // after a key: ':'
	sqAfter                       // after a value: ',' or the container's end; at depth 0 only whitespace
	sqStr                         // in a string
	sqEsc                         // after a backslash in a string
	sqHex                         // in the hex digits of \u
	sqMinus                       // after a number's '-'
	sqZero                        // after a number's leading 0
	sqInt                         // in a number's integer digits (not a leading 0)
	sqDot                         // after the decimal point
	sqFrac                        // in the fraction's digits
	sqE                           // after 'e' or 'E'
	sqESign                       // after the exponent's sign
	sqExp                         // in the exponent's digits
	sqLit                         // in true, false or null
	sqIdle                        // stopped: the rest of the line is kept raw
)

// A Squeezer rewrites one line of NDJSON at a time as it arrives (see
// above). It implements the framer's squeezing hook: the zero value is not
// usable, NewSqueezer makes one.
type Squeezer struct {
	keep int // elements of a squeezed array kept whole: DecodeOptions.MaxElements

	st    squeezeState
	depth int
	objs  []uint64 // bit d-1 set: the container at depth d is an object
	lit   string   // the rest of the literal being read
	hex   int      // hex digits of \u still expected
	key   bool     // the string being read is an object's key
	match int      // bytes of squeezeKey the key matched so far; -1: another key
	isKey bool     // the last top-level key read was squeezeKey

	target   int  // depth of the array being squeezed, 0 when outside one
	elems    int  // its elements started so far
	dropping bool // inside an element that is dropped
	checked  bool // reachesDecoder held for the bytes before the first dropped element
}

// NewSqueezer returns a Squeezer that keeps keep elements of each
// top-level workflow_progress array whole: a Decoder with MaxElements
// keep decodes a squeezed line as it decodes the line.
func NewSqueezer(keep int) *Squeezer {
	return &Squeezer{keep: keep}
}

// Reset forgets the line read so far: the next Append starts a line.
func (s *Squeezer) Reset() {
	*s = Squeezer{keep: s.keep, objs: s.objs[:0]}
}

// Append appends to dst what is kept of src, the line's next bytes, and
// returns the extended slice. dst may share src's array as long as it
// ends at or before src's start: what is kept of src is never longer than
// src, so nothing is overwritten before it is read.
func (s *Squeezer) Append(dst, src []byte) []byte {
	run := 0 // start in src of the kept bytes not yet appended
	for i := 0; i < len(src) && s.st != sqIdle; {
		if s.st == sqStr && !(s.key && s.depth == 1) {
			// The bulk of a snapshot is string contents: skip them fast.
			for i < len(src) && src[i] >= 0x20 && src[i] != '"' && src[i] != '\\' {
				i++
			}
			if s.dropping {
				run = i
			}
			if i == len(src) {
				break
			}
		}
		c := src[i]
		wasDropping := s.dropping
		switch r := s.step(c); {
		case r == stepAgain:
			// A number ended before c, which is read again after it.
			if wasDropping && s.elemDone() {
				dst = append(dst, '0')
			}
			continue
		case r == stepErr:
			if s.checked && s.depth > 0 {
				// The line is not JSON, and bytes are gone (a malformed
				// element, whitespace that kept tokens apart): the
				// squeezed line must not be JSON either. The poison
				// takes the bad byte's place, so that nothing written
				// is longer than what was read.
				dst = append(dst, src[run:i]...)
				dst = append(dst, poison)
				run = i + 1
			}
			s.dropping = false
			s.st = sqIdle
		case s.dropping && !wasDropping:
			// The first byte of an element beyond the bound.
			dst = append(dst, src[run:i]...)
			run = i + 1
			if !s.checked {
				if !reachesDecoder(dst) {
					// Kept raw: the element and all that follows.
					s.dropping = false
					run = i
					s.st = sqIdle
					break
				}
				s.checked = true
			}
		case wasDropping:
			run = i + 1
			if s.elemDone() {
				dst = append(dst, '0')
			}
		case isJSONSpace(c) && s.between():
			// Whitespace between elements beyond the bound.
			dst = append(dst, src[run:i]...)
			run = i + 1
		}
		i++
	}
	if !s.dropping {
		dst = append(dst, src[run:]...)
	}
	return dst
}

// between reports that the Squeezer is between two elements of a squeezed
// array past the bound, where whitespace means nothing, once it has begun
// to drop (a syntax error is then poisoned, so no tokens it kept apart
// can join).
func (s *Squeezer) between() bool {
	return s.checked && s.target > 0 && s.depth == s.target && s.elems >= s.keep && (s.st == sqAfter || s.st == sqValue)
}

// elemDone reports, right after a step, that the dropped element ended
// with it, and ends the dropping.
func (s *Squeezer) elemDone() bool {
	if s.dropping && s.depth == s.target && s.st == sqAfter {
		s.dropping = false
		return true
	}
	return false
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// stepResult is what reading one byte came to.
type stepResult uint8

const (
	stepOK    stepResult = iota
	stepErr              // a syntax error, or a line the Squeezer is no use for
	stepAgain            // a number ended before the byte: read it again
)

// okIf is stepOK, or stepErr when cond is false.
func okIf(cond bool) stepResult {
	if cond {
		return stepOK
	}
	return stepErr
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// step reads one byte.
func (s *Squeezer) step(c byte) stepResult {
	switch s.st {
	case sqValue, sqArrOpen:
		switch {
		case isJSONSpace(c):
			return stepOK
		case s.st == sqArrOpen && c == ']':
			return s.close(false)
		}
		return s.startValue(c)
	case sqObjOpen, sqKey:
		switch {
		case isJSONSpace(c):
			return stepOK
		case c == '"':
			s.st, s.key, s.match = sqStr, true, 0
			return stepOK
		case c == '}' && s.st == sqObjOpen:
			return s.close(true)
		}
		return stepErr
	case sqColon:
		switch {
		case isJSONSpace(c):
			return stepOK
		case c == ':':
			s.st = sqValue
			return stepOK
		}
		return stepErr
	case sqAfter:
		switch {
		case isJSONSpace(c):
			return stepOK
		case s.depth == 0:
			return stepErr // data after the top-level value
		case c == ',':
			s.st = sqValue
			if s.isObj() {
				s.st = sqKey
			}
			return stepOK
		case c == '}' || c == ']':
			return s.close(c == '}')
		}
		return stepErr
	case sqStr:
		switch {
		case c == '"':
			if s.key {
				s.isKey = s.depth == 1 && s.match == len(squeezeKey)
				s.key = false
				s.st = sqColon
			} else {
				s.st = sqAfter
			}
			return stepOK
		case c == '\\':
			s.st, s.match = sqEsc, -1
			return stepOK
		case c < 0x20:
			return stepErr
		}
		if s.key && s.match >= 0 {
			if s.match < len(squeezeKey) && c == squeezeKey[s.match] {
				s.match++
			} else {
				s.match = -1
			}
		}
		return stepOK
	case sqEsc:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.st = sqStr
			return stepOK
		case 'u':
			s.st, s.hex = sqHex, 4
			return stepOK
		}
		return stepErr
	case sqHex:
		if !isHex(c) {
			return stepErr
		}
		if s.hex--; s.hex == 0 {
			s.st = sqStr
		}
		return stepOK
	case sqMinus:
		switch {
		case c == '0':
			s.st = sqZero
			return stepOK
		case isDigit(c):
			s.st = sqInt
			return stepOK
		}
		return stepErr
	case sqInt, sqZero, sqFrac:
		switch {
		case isDigit(c) && s.st != sqZero:
			return stepOK
		case c == '.' && s.st != sqFrac:
			s.st = sqDot
			return stepOK
		case c == 'e' || c == 'E':
			s.st = sqE
			return stepOK
		}
		s.st = sqAfter
		return stepAgain
	case sqDot:
		s.st = sqFrac
		return okIf(isDigit(c))
	case sqE:
		if c == '+' || c == '-' {
			s.st = sqESign
			return stepOK
		}
		s.st = sqExp
		return okIf(isDigit(c))
	case sqESign:
		s.st = sqExp
		return okIf(isDigit(c))
	case sqExp:
		if isDigit(c) {
			return stepOK
		}
		s.st = sqAfter
		return stepAgain
	case sqLit:
		if c != s.lit[0] {
			return stepErr
		}
		if s.lit = s.lit[1:]; s.lit == "" {
			s.st = sqAfter
		}
		return stepOK
	}
	return stepErr
}

// startValue reads the first byte of a value.
func (s *Squeezer) startValue(c byte) stepResult {
	if s.target > 0 && s.depth == s.target {
		s.elems++
		s.dropping = s.elems > s.keep
	}
	want := false
	if s.depth == 1 {
		want = s.isKey && c == '['
		s.isKey = false
	}
	switch {
	case c == '{' || c == '[':
		if (s.depth == 0 && c != '{') || s.depth >= maxNestingDepth {
			return stepErr // only an object's arrays are squeezed; too deep for encoding/json
		}
		s.push(c == '{')
		s.st = sqArrOpen
		if c == '{' {
			s.st = sqObjOpen
		}
		if want {
			s.target, s.elems = s.depth, 0
		}
		return stepOK
	case s.depth == 0:
		return stepErr
	case c == '"':
		s.st, s.key = sqStr, false
	case c == '-':
		s.st = sqMinus
	case c == '0':
		s.st = sqZero
	case isDigit(c):
		s.st = sqInt
	case c == 't':
		s.st, s.lit = sqLit, "rue"
	case c == 'f':
		s.st, s.lit = sqLit, "alse"
	case c == 'n':
		s.st, s.lit = sqLit, "ull"
	default:
		return stepErr
	}
	return stepOK
}

func (s *Squeezer) push(obj bool) {
	w := s.depth / 64
	if w >= len(s.objs) {
		s.objs = append(s.objs, 0)
	}
	if obj {
		s.objs[w] |= 1 << (s.depth % 64)
	} else {
		s.objs[w] &^= 1 << (s.depth % 64)
	}
	s.depth++
}

func (s *Squeezer) isObj() bool {
	d := s.depth - 1
	return s.objs[d/64]&(1<<(d%64)) != 0
}

// close ends the container at the top of the stack with '}' (obj) or ']'.
func (s *Squeezer) close(obj bool) stepResult {
	if s.depth == 0 || s.isObj() != obj {
		return stepErr
	}
	if s.depth == s.target {
		s.target = 0
	}
	s.depth--
	s.st = sqAfter
	return stepOK
}

// reachesDecoder reports that Decode decodes every line that starts with
// prefix: its leading type, if it has one, is not one Decode dismisses
// unread, and it holds a marker (Interesting). Both hold for a whole line
// when they hold for its prefix, and for the squeezed line, which starts
// with it.
func reachesDecoder(prefix []byte) bool {
	line := bytes.TrimLeftFunc(prefix, unicode.IsSpace)
	if typ, ok := leadingType(line); ok && string(typ) != "system" && string(typ) != "result" && !bytes.HasPrefix(typ, []byte("control_")) {
		return false
	}
	return Interesting(line)
}
