// Package jsonesc rewrites JSON text with \u escapes of characters that
// need none: the same JSON to any reader that follows RFC 8259 §7
// ("task\u005fid" is "task_id"), other bytes to one that compares bytes.
// Tests of the stream decoder (issue 28) feed it lines written so.
// Internal: test support shared by two packages, not an API.
package jsonesc

// Strings returns line with the characters of its JSON strings (keys and
// values) that pick chooses written as \u escapes, their hex in upper case
// when upper is set. Only printable ASCII is escaped (a multi-byte UTF-8
// sequence is kept whole); escapes already there are kept as they are;
// bytes outside strings, and text that is not JSON, are copied.
func Strings(line []byte, upper bool, pick func(c byte) bool) []byte {
	hex := "0123456789abcdef"
	if upper {
		hex = "0123456789ABCDEF"
	}
	out := make([]byte, 0, len(line))
	in := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case !in:
			in = c == '"'
		case c == '"':
			in = false
		case c == '\\':
			n := 2
			if i+1 < len(line) && line[i+1] == 'u' {
				n = 6
			}
			n = min(n, len(line)-i)
			out = append(out, line[i:i+n]...)
			i += n - 1
			continue
		case c >= 0x20 && c < 0x7f && pick(c):
			out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			continue
		}
		out = append(out, c)
	}
	return out
}
