// Package ndjson frames a byte stream into newline-delimited lines, as the
// CLI's stream-json is written: a partial line is carried across writes, a
// CRLF ending is stripped, an unterminated last line is flushed at EOF, and
// what is buffered per line is capped. It knows nothing of JSON's content;
// streamjson decodes the lines it frames.
package ndjson
