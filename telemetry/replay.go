package telemetry

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/report"
	"github.com/cbc-otel/cbc-otel/tap"
)

// Replay runs the recordings names ("-": stdin) through the pipeline, each
// its own stream (its own Tracker), the counters and sinks shared, and
// returns the runs they held. With jsonOnly each run is kept as its
// --summary.json line, not as a copy of the run (WriteRuns writes them).
func (t *Telemetry) Replay(ctx context.Context, names []string, stdin io.Reader, jsonOnly bool) (Outcome, error) {
	col := &report.Collector{JSONOnly: jsonOnly}
	for _, name := range names {
		if err := replayFile(ctx, name, t.newPipeline(stream{extra: []ingest.Sink{col}, metricsIfRead: true}), stdin); err != nil {
			return Outcome{}, err
		}
	}
	return Outcome{Runs: col.Runs, Sessions: col.Sessions(), Stats: t.stats, col: col}, nil
}

// WriteRuns prints o's runs as the replay --summary.json lines or as a waterfall.
func WriteRuns(w io.Writer, asJSON bool, width int, o Outcome) error {
	if asJSON && o.col != nil && o.col.JSONOnly {
		return o.col.WriteJSON(w, o.Stats)
	}
	if asJSON {
		return report.WriteJSONSessions(w, o.Runs, o.Sessions, o.Stats)
	}
	return report.WriteWaterfall(w, o.Runs, o.Stats, report.WaterfallOptions{Width: width, Sessions: o.Sessions, Budget: o.Budget})
}

// replayFile feeds the recording name ("-": stdin) to p and closes p.
func replayFile(ctx context.Context, name string, p *ingest.Pipeline, stdin io.Reader) error {
	var r io.Reader
	if name == "-" {
		r = stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("opening recording: %w", err)
		}
		defer f.Close()
		r = f
	}
	if err := ingest.Feed(ctx, p, tap.SourceStdout, r); err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	p.Close()
	return nil
}
