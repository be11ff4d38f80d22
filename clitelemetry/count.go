package clitelemetry

import (
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// CountSpans counts the spans of rs.
func CountSpans(rs []*tracepb.ResourceSpans) int {
	n := 0
	for _, r := range rs {
		for _, ss := range r.GetScopeSpans() {
			n += len(ss.GetSpans())
		}
	}
	return n
}

// CountLogRecords counts the log records of rl.
func CountLogRecords(rl []*logspb.ResourceLogs) int {
	n := 0
	for _, r := range rl {
		for _, sl := range r.GetScopeLogs() {
			n += len(sl.GetLogRecords())
		}
	}
	return n
}

// CountDataPoints counts the data points of every metric of rm, of every
// kind.
func CountDataPoints(rm []*metricspb.ResourceMetrics) int {
	n := 0
	for _, r := range rm {
		for _, sm := range r.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				n += dataPoints(m)
			}
		}
	}
	return n
}

func dataPoints(m *metricspb.Metric) int {
	return len(m.GetGauge().GetDataPoints()) + len(m.GetSum().GetDataPoints()) +
		len(m.GetHistogram().GetDataPoints()) + len(m.GetExponentialHistogram().GetDataPoints()) +
		len(m.GetSummary().GetDataPoints())
}
