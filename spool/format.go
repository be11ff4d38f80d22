// Package spool is the hand-over between `cbc-otel run --spool.dir` and the
// `cbc-otel serve` sidecar: the wrapper writes what it tapped to a file, the
// sidecar follows it.
//
// # Files
//
// One file per wrapped child, created in the spool directory as
//
//	<unix-nanos>-<pid>-<random>.cbcspool.open
//
// and renamed (atomically, same directory, so the inode stays) to
//
//	<unix-nanos>-<pid>-<random>.cbcspool
//
// once the child has exited and everything tapped is written and synced.
// The rename is the completion mark: a sidecar finalizes the stream (runs
// without a notification become abandoned) when it has read a .cbcspool to
// its end. While the child lives, the writer refreshes the .open file's
// modification time every Heartbeat (10 s), even when nothing is written: a
// .open file that neither grows nor is touched for the sidecar's idle
// timeout belongs to a writer that died (kill -9 of the wrapper), and is
// finalized like a plain file, but kept on disk (should it grow again, it
// is followed again from where it was finalized).
//
// # Records
//
// The file is line-oriented and is, line for line, the child's stdout: a
// line that does not start with the byte 0x1E (ASCII record separator,
// which a JSON line cannot start with) is a stdout line, verbatim. A line
// that starts with 0x1E is a tagged record, "\x1e<tag> <payload>\n":
//
//	\x1ecbcspool 1                first line: format version
//	\x1estdin <ns> <json>         a control request (interrupt, stop_task) the
//	                              wrapper saw on the child's stdin, verbatim;
//	                              <ns> is when it passed the wrapper (Unix
//	                              ns). Readers accept "\x1estdin <json>" too.
//	\x1estdout <line>             a stdout line that itself began with 0x1E
//	\x1egap <source> <bytes>      bytes of source (stdout, stdin) were lost
//	                              here (tap queue full, or a write error)
//
// Unknown tags are skipped, so later versions can add records. stdin records
// are written only between two stdout lines, and the taps are merged in the
// order the bytes passed the wrapper, so the order of a control request
// relative to the events around it is kept to the line. Other stdin traffic
// (user messages, initialize) is not written: the sidecar does not need it,
// and it would only be something more to protect. For the same reason
// stdout lines of type control_response (the answer to initialize carries
// the account's token and e-mail) are not written either: the writer
// decides from a line's first bytes (at most 4 KiB; a line whose type is
// not known by then is kept) and leaves no trace of it.
//
// Around a stdout gap: a stdout line cut by the gap ends with 0x1E just
// before its newline (it is not a line; a reader discards it), and the gap
// record is always followed by one line a reader discards too: the tail of
// the line whose head was lost is not written, only its newline, so that
// line is empty (when the lost bytes ended a line, the empty line is
// written at once and the line after the gap is kept whole).
//
// Writer writes the format; Reader reads a spool file (or a plain one) back
// into lines for a follower, cutting records and dropping what gaps leave.
package spool

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/cbc-otel/cbc-otel/tap"
)

// File name suffixes.
const (
	// OpenSuffix marks a spool file still being written.
	OpenSuffix = ".cbcspool.open"
	// DoneSuffix marks a complete spool file.
	DoneSuffix = ".cbcspool"
	// Version is the format version written in the header record.
	Version = 1
)

// RS starts a tagged record.
const RS = 0x1e

// Record tags.
const (
	tagHeader = "cbcspool"
	tagStdin  = "stdin"
	tagStdout = "stdout"
	tagGap    = "gap"
)

// Kind classifies a file name.
type Kind uint8

// Kinds of followed files.
const (
	// Plain is any other file: the CLI's stdout as written by tee.
	Plain Kind = iota
	// Open is a spool file still being written.
	Open
	// Done is a complete spool file.
	Done
)

// KindOf tells a spool file (open or complete) from a plain one by its name.
func KindOf(name string) Kind {
	switch {
	case strings.HasSuffix(name, OpenSuffix):
		return Open
	case strings.HasSuffix(name, DoneSuffix):
		return Done
	}
	return Plain
}

// Stem is a spool file's name without its suffix (the same before and after
// completion), or the name itself for a plain file.
func Stem(name string) string {
	if s, ok := strings.CutSuffix(name, OpenSuffix); ok {
		return s
	}
	if s, ok := strings.CutSuffix(name, DoneSuffix); ok {
		return s
	}
	return name
}

// RecordKind says what a spool line is.
type RecordKind uint8

// Record kinds returned by Parse.
const (
	RecordLine    RecordKind = iota // a line of Source
	RecordGap                       // Dropped bytes of Source were lost here
	RecordHeader                    // the version header
	RecordUnknown                   // a tagged record of a later version: skip
)

// Record is one parsed spool line.
type Record struct {
	Kind    RecordKind
	Source  tap.Source
	Line    []byte // RecordLine: the line, with its newline if it had one
	At      int64  // RecordLine of stdin: when it passed the wrapper, Unix ns (0: unknown)
	Dropped int64  // RecordGap: bytes lost (0 when unknown)
	Version int    // RecordHeader
}

// Parse classifies one line of a spool file (with or without its trailing
// newline). Line aliases line.
func Parse(line []byte) Record {
	if len(line) == 0 || line[0] != RS {
		return Record{Kind: RecordLine, Source: tap.SourceStdout, Line: line}
	}
	body := line[1:]
	tag, rest, _ := bytes.Cut(body, []byte{' '})
	switch string(bytes.TrimRight(tag, "\r\n")) {
	case tagStdout:
		return Record{Kind: RecordLine, Source: tap.SourceStdout, Line: rest}
	case tagStdin:
		at, line := StdinStamp(rest)
		return Record{Kind: RecordLine, Source: tap.SourceStdin, Line: line, At: at}
	case tagGap:
		f := strings.Fields(string(rest))
		r := Record{Kind: RecordGap, Source: tap.SourceStdout}
		if len(f) > 0 && f[0] == tap.SourceStdin.String() {
			r.Source = tap.SourceStdin
		}
		if len(f) > 1 {
			r.Dropped, _ = strconv.ParseInt(f[1], 10, 64)
		}
		return r
	case tagHeader:
		v, _ := strconv.Atoi(strings.TrimSpace(string(rest)))
		return Record{Kind: RecordHeader, Version: v}
	}
	return Record{Kind: RecordUnknown}
}

// StdinStamp splits the payload of a stdin record into its time stamp
// (Unix ns; 0 for the older form without one) and the line.
func StdinStamp(payload []byte) (at int64, line []byte) {
	i := 0
	for i < len(payload) && i < 20 && payload[i] >= '0' && payload[i] <= '9' {
		i++
	}
	if i == 0 || i >= len(payload) || payload[i] != ' ' {
		return 0, payload
	}
	at, err := strconv.ParseInt(string(payload[:i]), 10, 64)
	if err != nil {
		return 0, payload
	}
	return at, payload[i+1:]
}
