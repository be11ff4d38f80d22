package ingesttest

import (
	"fmt"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// Restored returns runs as a Tracker gives them back from a checkpoint
// that says them: through ingest's text boundary (Tracker.Restore cleans
// what a checkpoint says), so a sink's test hands the sink hostile text
// the way it can really arrive. Each run needs a task id and must not be
// finalized; the runs returned are the Tracker's, in the order given.
func Restored(runs ...ingest.Run) ([]*ingest.Run, error) {
	st := ingest.TrackerState{}
	for _, r := range runs {
		st.Runs = append(st.Runs, ingest.RunSnapshot{Run: r})
	}
	tr := ingest.NewTracker(ingest.TrackerOptions{})
	if err := tr.Restore(st, st.Now); err != nil {
		return nil, fmt.Errorf("ingesttest: %w", err)
	}
	return tr.Open(), nil
}
