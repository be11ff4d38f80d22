package exposition

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// testRegistry is a registry shaped like the metrics sink's, in small: one
// finished workflow run of workflow with status (cbc_workflow_runs_total,
// cbc_workflow_duration_seconds), cbc_otel_lines_total, cbc_otel_build_info,
// and a go_* family, which pushes leave out.
func testRegistry(t *testing.T, workflow, status string) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	runs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cbc_workflow_runs_total", Help: "Workflow runs."}, []string{"workflow", "status"})
	dur := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "cbc_workflow_duration_seconds", Help: "Duration.", Buckets: []float64{1, 5, 10}}, []string{"workflow", "status"})
	lines := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cbc_otel_lines_total", Help: "Lines."}, []string{"source"})
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "cbc_otel_build_info", Help: "Build.", ConstLabels: prometheus.Labels{"version": "test"}})
	goroutines := prometheus.NewGauge(prometheus.GaugeOpts{Name: "go_goroutines", Help: "Goroutines."})
	for _, c := range []prometheus.Collector{runs, dur, lines, build, goroutines} {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	runs.WithLabelValues(workflow, status).Inc()
	dur.WithLabelValues(workflow, status).Observe(3)
	lines.WithLabelValues("stdout").Add(0)
	build.Set(1)
	goroutines.Set(7)
	return reg
}
