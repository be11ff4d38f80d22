package runspage

import (
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// TestPageStalled: a run stalled now says so; one that was says how often;
// one that never was says nothing.
func TestPageStalled(t *testing.T) {
	for _, tc := range []struct {
		stalled bool
		stalls  int
		want    string
	}{
		{true, 1, "stalled</span>"},
		{false, 2, "stalled ×2</span>"},
		{false, 0, ""},
	} {
		p := newTestPage(Options{Runs: 5})
		r := &ingest.Run{TaskID: "w1", Workflow: true, Name: "review", Status: ingest.StatusRunning, Start: 1_000,
			Stalled: tc.stalled, Stalls: tc.stalls}
		p.Observe(ingest.Lifecycle{Kind: ingest.RunStarted, Run: r})
		p.Observe(ingest.Lifecycle{Kind: ingest.RunStalled, Run: r})
		html := render(t, p)
		if tc.want == "" {
			if strings.Contains(html, "stalled") {
				t.Errorf("never stalled, but the page says stalled")
			}
			continue
		}
		if !strings.Contains(html, tc.want) {
			t.Errorf("stalled=%v stalls=%d: no %q on the page", tc.stalled, tc.stalls, tc.want)
		}
	}
}
