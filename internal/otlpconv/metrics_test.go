package otlpconv

import (
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
)

// TestResourceMetrics converts one metric of each kind and checks the
// fields, the int/double choice and what is dropped.
func TestResourceMetrics(t *testing.T) {
	attrs := []*commonpb.KeyValue{{Key: "model", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "m"}}}}
	delta := metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA
	cum := metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE
	minV, maxV := 0.5, 9.0
	tid, sid := make([]byte, 16), make([]byte, 8)
	tid[0], sid[0] = 1, 2
	metrics := []*metricspb.Metric{
		{Name: "gauge.int", Unit: "1", Description: "d", Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: []*metricspb.NumberDataPoint{
			{Attributes: attrs, StartTimeUnixNano: 1, TimeUnixNano: 2, Value: &metricspb.NumberDataPoint_AsInt{AsInt: 7},
				Exemplars: []*metricspb.Exemplar{{TimeUnixNano: 2, Value: &metricspb.Exemplar_AsInt{AsInt: 7}, TraceId: tid, SpanId: sid}}},
		}}}},
		{Name: "sum.mixed", Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{AggregationTemporality: delta, IsMonotonic: true, DataPoints: []*metricspb.NumberDataPoint{
			{Value: &metricspb.NumberDataPoint_AsInt{AsInt: 1}}, {Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: 0.25}},
		}}}},
		{Name: "sum.unspecified", Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{DataPoints: []*metricspb.NumberDataPoint{{}, {}}}}},
		{Name: "hist", Data: &metricspb.Metric_Histogram{Histogram: &metricspb.Histogram{AggregationTemporality: cum, DataPoints: []*metricspb.HistogramDataPoint{
			{Count: 3, Sum: &maxV, Min: &minV, Max: &maxV, ExplicitBounds: []float64{1, 5}, BucketCounts: []uint64{1, 1, 1}},
		}}}},
		{Name: "exp", Data: &metricspb.Metric_ExponentialHistogram{ExponentialHistogram: &metricspb.ExponentialHistogram{AggregationTemporality: delta, DataPoints: []*metricspb.ExponentialHistogramDataPoint{
			{Count: 2, Scale: 3, ZeroCount: 1, Positive: &metricspb.ExponentialHistogramDataPoint_Buckets{Offset: -1, BucketCounts: []uint64{1}}},
		}}}},
		{Name: "summary", Data: &metricspb.Metric_Summary{Summary: &metricspb.Summary{DataPoints: []*metricspb.SummaryDataPoint{
			{Count: 4, Sum: 10, QuantileValues: []*metricspb.SummaryDataPoint_ValueAtQuantile{{Quantile: 0.5, Value: 2}}},
		}}}},
		{Name: "no data"},
	}
	rms, dropped := ResourceMetrics([]*metricspb.ResourceMetrics{{ScopeMetrics: []*metricspb.ScopeMetrics{{
		Scope: &commonpb.InstrumentationScope{Name: "com.anthropic.claude_code", Version: "2.1.334"}, Metrics: metrics,
	}}}})
	if dropped != 2 {
		t.Errorf("dropped %d points, want 2 (the unspecified temporality)", dropped)
	}
	if len(rms) != 1 || len(rms[0].ScopeMetrics) != 1 {
		t.Fatalf("got %+v", rms)
	}
	sm := rms[0].ScopeMetrics[0]
	if sm.Scope.Name != "com.anthropic.claude_code" || sm.Scope.Version != "2.1.334" {
		t.Errorf("scope %+v", sm.Scope)
	}
	got := map[string]metricdata.Metrics{}
	for _, m := range sm.Metrics {
		got[m.Name] = m
	}
	if len(got) != 5 {
		t.Errorf("%d metrics, want 5: %v", len(got), got)
	}
	g, ok := got["gauge.int"].Data.(metricdata.Gauge[int64])
	if !ok || len(g.DataPoints) != 1 || g.DataPoints[0].Value != 7 || g.DataPoints[0].StartTime.UnixNano() != 1 || g.DataPoints[0].Time.UnixNano() != 2 ||
		g.DataPoints[0].Attributes.Len() != 1 || len(g.DataPoints[0].Exemplars) != 1 || fmt.Sprint(g.DataPoints[0].Exemplars[0].TraceID) != fmt.Sprint(tid) ||
		got["gauge.int"].Unit != "1" || got["gauge.int"].Description != "d" {
		t.Errorf("gauge.int: %+v", got["gauge.int"])
	}
	s, ok := got["sum.mixed"].Data.(metricdata.Sum[float64])
	if !ok || !s.IsMonotonic || s.Temporality != metricdata.DeltaTemporality || len(s.DataPoints) != 2 || s.DataPoints[0].Value != 1 || s.DataPoints[1].Value != 0.25 {
		t.Errorf("sum.mixed: %+v", got["sum.mixed"].Data)
	}
	h, ok := got["hist"].Data.(metricdata.Histogram[float64])
	if !ok || h.Temporality != metricdata.CumulativeTemporality || len(h.DataPoints) != 1 {
		t.Fatalf("hist: %+v", got["hist"].Data)
	}
	hp := h.DataPoints[0]
	hmin, minOK := hp.Min.Value()
	hmax, maxOK := hp.Max.Value()
	if hp.Count != 3 || hp.Sum != 9 || !minOK || hmin != 0.5 || !maxOK || hmax != 9 || fmt.Sprint(hp.Bounds, hp.BucketCounts) != "[1 5] [1 1 1]" {
		t.Errorf("hist point %+v", hp)
	}
	e, ok := got["exp"].Data.(metricdata.ExponentialHistogram[float64])
	if !ok || len(e.DataPoints) != 1 || e.DataPoints[0].Scale != 3 || e.DataPoints[0].ZeroCount != 1 || e.DataPoints[0].PositiveBucket.Offset != -1 {
		t.Errorf("exp: %+v", got["exp"].Data)
	}
	if _, ok := e.DataPoints[0].Min.Value(); ok {
		t.Error("exp: min defined though absent")
	}
	su, ok := got["summary"].Data.(metricdata.Summary)
	if !ok || len(su.DataPoints) != 1 || su.DataPoints[0].Count != 4 || su.DataPoints[0].QuantileValues[0].Value != 2 {
		t.Errorf("summary: %+v", got["summary"].Data)
	}
}
