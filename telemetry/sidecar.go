package telemetry

import (
	"github.com/cbc-otel/cbc-otel/follow"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/metrics"
	"github.com/cbc-otel/cbc-otel/traces"
)

// Restored tells the runs page how many finished runs the restored totals
// hold: /metrics counts them, the page never saw them.
func (t *Telemetry) Restored() {
	if t.page != nil {
		t.page.SetFinishedBefore(t.metrics.baseRuns())
	}
}

// FollowOptions fills in o what the follower takes from the telemetry.
// Every stream gets the pipeline the flags describe, with the shared
// metrics sink and, when tracing, a traces sink of its own (it keeps
// per-stream state); both checkpoint.
func (tel *Telemetry) FollowOptions(o follow.Options) follow.Options {
	newStream := func() follow.StreamConfig {
		ckpt := map[string]ingest.StreamCheckpointer{metrics.CheckpointName: tel.metrics.metrics()}
		ts := tel.traces.streamSink()
		if ts != nil {
			ckpt[traces.CheckpointName] = ts
		}
		s := stream{live: true}
		if ts != nil {
			s.traces = ts
		}
		return follow.StreamConfig{Pipeline: tel.pipelineOptions(s), Checkpointers: ckpt}
	}
	o.NewStream = newStream
	o.Checkpointers = map[string]ingest.Checkpointer{metrics.CheckpointName: tel.metrics.checkpointer()}
	o.Registerer = tel.self
	return o
}
