// Package ingest turns the events of a stream-json session into workflow
// lifecycles: the Tracker owns workflow state and emits Lifecycle events to
// sinks. It knows nothing of OpenTelemetry or Prometheus; the traces and
// metrics packages consume its output, never the other way round. Framing
// is package ndjson's, decoding the wire format package streamjson's, what
// model calls cost package cost's; the byte queues between a wrapped child
// and the pipeline are package tap's.
//
// The data flow is
//
//	bytes ─► ndjson.Framer ─► lines ─► streamjson.Decoder ─► Event ─► Tracker ─► Lifecycle ─► Sink...
//
// Pipeline wires these together for one stream (stdout plus the stdin
// control channel) and counts what it sees in Stats.
package ingest
