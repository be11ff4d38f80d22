package ingest

import "encoding/json"

// The checkpoint vocabulary shared by sources and sinks. A long-lived source
// (cbc-otel serve's follow engine) saves, next to each stream's offset and
// TrackerState, what every sink remembers, without knowing what any sink is:
// each sink's state is an opaque JSON value saved under a stable name.
//
// Restoring is two-phase, so that a source can restore all or nothing: a
// Restore method only decodes and checks the state and returns a commit
// function; it must change nothing visible. The source calls the commit
// functions once every piece of the checkpoint (every sink's, every
// stream's Tracker) restored without error, and calls none of them
// otherwise, starting from zero instead.

// Checkpointer is a sink state that belongs to the process, not to one
// stream: the metrics' cumulative totals and admitted label values.
type Checkpointer interface {
	// SaveCheckpoint returns the state to save; nil saves nothing. It is
	// called from the goroutine that feeds the pipelines, between two
	// lines, so that the state matches the offsets saved with it.
	SaveCheckpoint() (json.RawMessage, error)
	// RestoreCheckpoint decodes what SaveCheckpoint returned in an earlier
	// process (nil: nothing was saved) and returns the function that
	// applies it. An error means the state cannot be used.
	RestoreCheckpoint(state json.RawMessage) (commit func(), err error)
}

// StreamCheckpointer is a sink state that belongs to one stream: what a sink
// remembers of the stream's open runs (the metrics' run marks, the traces'
// deferred agents and parent links). Runs are identified by their position
// in open, the stream's Tracker.Open(): a restored Tracker returns its runs
// in the order the saved one did.
type StreamCheckpointer interface {
	// SaveStream returns the state to save for the stream whose Tracker
	// holds open; nil saves nothing. Called like SaveCheckpoint.
	SaveStream(open []*Run) (json.RawMessage, error)
	// RestoreStream decodes what SaveStream returned in an earlier process
	// (nil: nothing was saved, e.g. the sink is new) for the runs open of
	// the restored Tracker, and returns the function that applies it.
	RestoreStream(state json.RawMessage, open []*Run) (commit func(), err error)
}
