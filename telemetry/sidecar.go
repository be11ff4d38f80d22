package telemetry

import (
	"context"
	"log/slog"
	"os"

	"github.com/cbc-otel/cbc-otel/follow"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/metrics"
	"github.com/cbc-otel/cbc-otel/traces"
)

// StartSidecar builds serve's sinks without their server and file: serve
// exposes them once the engine exists (Expose).
func (f *Flags) StartSidecar(ctx context.Context, log *slog.Logger) (*Telemetry, error) {
	tf := *f
	tf.metrics.listen, tf.metrics.webConfig, tf.metrics.file = "", "", ""
	// One sidecar serves many streams: a TRACEPARENT of its own
	// environment is no parent of theirs.
	env := func(k string) string {
		if k == "TRACEPARENT" {
			return ""
		}
		return os.Getenv(k)
	}
	t, err := tf.Start(ctx, env, log)
	if err != nil {
		return nil, err
	}
	t.exposed, t.cum = f.metrics, metrics.NewCumulative(t.metrics.m.Registry())
	return t, nil
}

// Expose starts serve's outputs its telemetry was started without: the
// listen address and the file, both of the cumulative totals (restored
// base + this process), with /readyz answering ready. A server that
// cannot start is an error: serving is serve's job.
func (t *Telemetry) Expose(ctx context.Context, ready func() error) error {
	return t.metrics.expose(ctx, t.exposed, t.cum, ready)
}

// Restored tells the runs page how many finished runs the restored totals
// hold: /metrics counts them, the page never saw them.
func (t *Telemetry) Restored() {
	if t.page != nil {
		t.page.SetFinishedBefore(t.cum.BaseRuns())
	}
}

// FollowOptions fills in o what the follower takes from the telemetry.
// Every stream gets the pipeline the flags describe, with the shared
// metrics sink and, when tracing, a traces sink of its own (it keeps
// per-stream state); both checkpoint.
func (tel *Telemetry) FollowOptions(o follow.Options) follow.Options {
	cum := tel.cum
	newStream := func() follow.StreamConfig {
		ckpt := map[string]ingest.StreamCheckpointer{metrics.CheckpointName: tel.metrics.metrics()}
		var ts *traces.Sink
		if tel.traces.enabled() {
			ts = traces.New(tel.traces.prov, traces.Options{CapturePreviews: tel.traces.previews})
			ckpt[traces.CheckpointName] = ts
		}
		s := stream{live: true}
		if ts != nil {
			s.traces = ts
		}
		return follow.StreamConfig{Pipeline: tel.pipelineOptions(s), Checkpointers: ckpt}
	}
	o.NewStream = newStream
	o.Checkpointers = map[string]ingest.Checkpointer{metrics.CheckpointName: metrics.NewCheckpoint(tel.metrics.metrics(), cum)}
	o.Registerer = tel.metrics.registry()
	return o
}
