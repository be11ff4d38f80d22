package telemetry

import (
	"slices"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// TestReplayMetricsSinkOnlyWhenRead: a pipeline built with metricsIfRead
// (replay's) has no metrics sink when no output reads the metrics (no
// listener, file or push); one without metricsIfRead, or with a file, or a
// push, has it.
func TestReplayMetricsSinkOnlyWhenRead(t *testing.T) {
	file := t.TempDir() + "/replay.prom"
	for _, tc := range []struct {
		live          bool
		args          []string
		metricsIfRead bool
		want          bool
	}{
		{false, nil, true, false},
		{false, nil, false, true},
		{false, []string{"--metrics.file", file}, true, true},
		{true, []string{"--web.listen-address=", "--push.gateway", "http://127.0.0.1:1"}, true, true},
		{true, []string{"--web.listen-address="}, true, false},
	} {
		m, err := parseMetricsFlags(t, tc.live, tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := startMetrics(m, new(ingest.Stats), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		tel := &Telemetry{flags: &Flags{}, metrics: rt, stats: new(ingest.Stats)}
		got := slices.Contains(tel.pipelineOptions(stream{metricsIfRead: tc.metricsIfRead}).Tracker.Sinks, rt.sink())
		if got != tc.want {
			t.Errorf("flags %q, metricsIfRead %v: metrics sink %v, want %v", tc.args, tc.metricsIfRead, got, tc.want)
		}
	}
}
