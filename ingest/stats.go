package ingest

import (
	"iter"
	"sync/atomic"

	"github.com/cbc-otel/cbc-otel/streamjson"
	"github.com/cbc-otel/cbc-otel/tap"
)

// numSources is the number of Source values (stdout, stdin).
const numSources = 2

// Stats counts what a pipeline saw. Counters only grow; every field is safe
// to read from any goroutine while the pipeline runs (a metrics scrape).
type Stats struct {
	lines      [numSources]atomic.Int64
	bytes      [numSources]atomic.Int64
	rejected   [streamjson.NumReasons]atomic.Int64
	violations [numViolations]atomic.Int64
	events     atomic.Int64
	dropped    [numSources]atomic.Int64
	// incomplete: bytes read of lines a tap drop cut (no whole line to
	// frame); rejectedBytes: bytes of the rejected lines, by reason.
	incomplete    [numSources]atomic.Int64
	rejectedBytes [streamjson.NumReasons]atomic.Int64

	calls          atomic.Int64 // model calls of the CLI's telemetry
	lateCalls      atomic.Int64 // ... attributed to a finalized run
	unmatchedCalls atomic.Int64 // ... whose agent the stream never named

	launchersEvicted atomic.Int64 // finalized runs forgotten by the Tracker's bounded store (nested.go)
}

// LaunchersEvicted returns how many tasks' last finalized run the Tracker
// forgot to stay within its bound: a run naming one of them afterwards
// (parent_task_id, a resume) gets no link to it.
func (s *Stats) LaunchersEvicted() int64 { return s.launchersEvicted.Load() }

// Calls returns the model calls of the CLI's own telemetry handled, and of
// those how many came after their run was final (late: they count for the
// workflow's totals, not its spans) and how many no workflow agent of the
// stream claimed (unmatched).
func (s *Stats) Calls() (all, late, unmatched int64) {
	return s.calls.Load(), s.lateCalls.Load(), s.unmatchedCalls.Load()
}

// Lines returns the lines framed from src.
func (s *Stats) Lines(src tap.Source) int64 { return s.lines[src%numSources].Load() }

// Bytes returns the bytes framed from src.
func (s *Stats) Bytes(src tap.Source) int64 { return s.bytes[src%numSources].Load() }

// Incomplete returns the bytes of src the pipeline read but could not frame
// into whole lines: the pieces of lines a tap drop cut. Per source, what
// passed through is Bytes + Incomplete + Dropped.
func (s *Stats) Incomplete(src tap.Source) int64 { return s.incomplete[src%numSources].Load() }

// RejectedBytes returns the bytes of the lines rejected for r, as far as
// they were read (a cut line's, only what was read of it).
func (s *Stats) RejectedBytes(r streamjson.Reason) int64 { return s.rejectedBytes[r].Load() }

// reject counts a line of n bytes rejected for r.
func (s *Stats) reject(r streamjson.Reason, n int64) {
	s.rejected[r].Add(1)
	s.rejectedBytes[r].Add(n)
}

// Rejected returns the lines rejected for r.
func (s *Stats) Rejected(r streamjson.Reason) int64 { return s.rejected[r].Load() }

// Violations returns the protocol violations of kind v.
func (s *Stats) Violations(v Violation) int64 { return s.violations[v].Load() }

// Events returns the decoded events of interest.
func (s *Stats) Events() int64 { return s.events.Load() }

// Dropped returns the bytes of src that the tap dropped under pressure.
func (s *Stats) Dropped(src tap.Source) int64 { return s.dropped[src%numSources].Load() }

// AddDropped records bytes of src that never reached the pipeline.
func (s *Stats) AddDropped(src tap.Source, n int64) { s.dropped[src%numSources].Add(n) }

func (s *Stats) countLine(src tap.Source, n int64) {
	s.lines[src%numSources].Add(1)
	s.bytes[src%numSources].Add(n)
}

// SourceCounts is what a pipeline counted of one tapped stream: per source,
// what passed through is Bytes + Incomplete + Dropped.
type SourceCounts struct {
	Lines, Bytes, Incomplete, Dropped int64
}

// ReasonCounts is what a pipeline rejected for one reason: the lines, and
// their bytes as far as read.
type ReasonCounts struct {
	Lines, Bytes int64
}

// PerSource yields every tapped stream's name (stdout, stdin) and counts,
// zeros included, so that a consumer needs to know no source.
func (s *Stats) PerSource() iter.Seq2[string, SourceCounts] {
	return func(yield func(string, SourceCounts) bool) {
		for _, src := range []tap.Source{tap.SourceStdout, tap.SourceStdin} {
			c := SourceCounts{Lines: s.Lines(src), Bytes: s.Bytes(src), Incomplete: s.Incomplete(src), Dropped: s.Dropped(src)}
			if !yield(src.String(), c) {
				return
			}
		}
	}
}

// PerReason yields every rejection reason's name and counts, zeros
// included, in the decoder's order.
func (s *Stats) PerReason() iter.Seq2[string, ReasonCounts] {
	return func(yield func(string, ReasonCounts) bool) {
		for _, r := range streamjson.Reasons() {
			if !yield(r.String(), ReasonCounts{Lines: s.Rejected(r), Bytes: s.RejectedBytes(r)}) {
				return
			}
		}
	}
}

// PerViolation yields every violation kind's name and count, zeros
// included, in Violations' order.
func (s *Stats) PerViolation() iter.Seq2[string, int64] {
	return func(yield func(string, int64) bool) {
		for _, v := range Violations() {
			if !yield(v.String(), s.Violations(v)) {
				return
			}
		}
	}
}
