// Package ingest turns the raw bytes of a stream-json session into workflow
// lifecycles: framing (Framer), decoding (Decode), and the Tracker, which owns
// workflow state and emits Lifecycle events to sinks. It knows nothing of
// OpenTelemetry or Prometheus; the traces and metrics packages consume its
// output, never the other way round.
//
// The data flow is
//
//	bytes ─► Framer ─► lines ─► Decode ─► Event ─► Tracker ─► Lifecycle ─► Sink...
//
// Pipeline wires these together for one stream (stdout plus the stdin
// control channel) and counts what it sees in Stats.
package ingest
