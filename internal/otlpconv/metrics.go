package otlpconv

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
)

// ResourceMetrics converts OTLP metrics into the SDK's metricdata, as the
// SDK's metric exporters take them: Gauge and Sum (int when every point is
// an int, else double), Histogram, ExponentialHistogram and Summary, with
// their temporality, monotonicity and exemplars. It returns the number of
// data points it could not convert: those of metrics with no data or an
// unspecified temporality. Metrics left empty are omitted.
func ResourceMetrics(rm []*metricspb.ResourceMetrics) ([]*metricdata.ResourceMetrics, int) {
	out := make([]*metricdata.ResourceMetrics, 0, len(rm))
	dropped := 0
	for _, r := range rm {
		res := &metricdata.ResourceMetrics{Resource: Resource(r.GetResource(), r.GetSchemaUrl())}
		for _, sm := range r.GetScopeMetrics() {
			scope := metricdata.ScopeMetrics{Scope: Scope(sm.GetScope(), sm.GetSchemaUrl())}
			for _, m := range sm.GetMetrics() {
				data, ok := aggregation(m)
				if !ok {
					dropped += dataPoints(m)
					continue
				}
				scope.Metrics = append(scope.Metrics, metricdata.Metrics{
					Name:        m.GetName(),
					Description: m.GetDescription(),
					Unit:        m.GetUnit(),
					Data:        data,
				})
			}
			if len(scope.Metrics) > 0 {
				res.ScopeMetrics = append(res.ScopeMetrics, scope)
			}
		}
		if len(res.ScopeMetrics) > 0 {
			out = append(out, res)
		}
	}
	return out, dropped
}

func aggregation(m *metricspb.Metric) (metricdata.Aggregation, bool) {
	switch d := m.GetData().(type) {
	case *metricspb.Metric_Gauge:
		pts := d.Gauge.GetDataPoints()
		if allInt(pts) {
			return metricdata.Gauge[int64]{DataPoints: numberPoints(pts, intValue)}, true
		}
		return metricdata.Gauge[float64]{DataPoints: numberPoints(pts, doubleValue)}, true
	case *metricspb.Metric_Sum:
		pts := d.Sum.GetDataPoints()
		tmp, ok := temporality(d.Sum.GetAggregationTemporality())
		if !ok {
			return nil, false
		}
		if allInt(pts) {
			return metricdata.Sum[int64]{DataPoints: numberPoints(pts, intValue), Temporality: tmp, IsMonotonic: d.Sum.GetIsMonotonic()}, true
		}
		return metricdata.Sum[float64]{DataPoints: numberPoints(pts, doubleValue), Temporality: tmp, IsMonotonic: d.Sum.GetIsMonotonic()}, true
	case *metricspb.Metric_Histogram:
		tmp, ok := temporality(d.Histogram.GetAggregationTemporality())
		if !ok {
			return nil, false
		}
		h := metricdata.Histogram[float64]{Temporality: tmp}
		for _, p := range d.Histogram.GetDataPoints() {
			hp := metricdata.HistogramDataPoint[float64]{
				Attributes:   attribute.NewSet(KeyValues(p.GetAttributes())...),
				StartTime:    Time(p.GetStartTimeUnixNano()),
				Time:         Time(p.GetTimeUnixNano()),
				Count:        p.GetCount(),
				Bounds:       p.GetExplicitBounds(),
				BucketCounts: p.GetBucketCounts(),
				Sum:          p.GetSum(),
				Exemplars:    exemplars(p.GetExemplars(), doubleExemplar),
			}
			if p.Min != nil {
				hp.Min = metricdata.NewExtrema(p.GetMin())
			}
			if p.Max != nil {
				hp.Max = metricdata.NewExtrema(p.GetMax())
			}
			h.DataPoints = append(h.DataPoints, hp)
		}
		return h, true
	case *metricspb.Metric_ExponentialHistogram:
		tmp, ok := temporality(d.ExponentialHistogram.GetAggregationTemporality())
		if !ok {
			return nil, false
		}
		h := metricdata.ExponentialHistogram[float64]{Temporality: tmp}
		for _, p := range d.ExponentialHistogram.GetDataPoints() {
			hp := metricdata.ExponentialHistogramDataPoint[float64]{
				Attributes:     attribute.NewSet(KeyValues(p.GetAttributes())...),
				StartTime:      Time(p.GetStartTimeUnixNano()),
				Time:           Time(p.GetTimeUnixNano()),
				Count:          p.GetCount(),
				Sum:            p.GetSum(),
				Scale:          p.GetScale(),
				ZeroCount:      p.GetZeroCount(),
				ZeroThreshold:  p.GetZeroThreshold(),
				PositiveBucket: metricdata.ExponentialBucket{Offset: p.GetPositive().GetOffset(), Counts: p.GetPositive().GetBucketCounts()},
				NegativeBucket: metricdata.ExponentialBucket{Offset: p.GetNegative().GetOffset(), Counts: p.GetNegative().GetBucketCounts()},
				Exemplars:      exemplars(p.GetExemplars(), doubleExemplar),
			}
			if p.Min != nil {
				hp.Min = metricdata.NewExtrema(p.GetMin())
			}
			if p.Max != nil {
				hp.Max = metricdata.NewExtrema(p.GetMax())
			}
			h.DataPoints = append(h.DataPoints, hp)
		}
		return h, true
	case *metricspb.Metric_Summary:
		var s metricdata.Summary
		for _, p := range d.Summary.GetDataPoints() {
			sp := metricdata.SummaryDataPoint{
				Attributes: attribute.NewSet(KeyValues(p.GetAttributes())...),
				StartTime:  Time(p.GetStartTimeUnixNano()),
				Time:       Time(p.GetTimeUnixNano()),
				Count:      p.GetCount(),
				Sum:        p.GetSum(),
			}
			for _, q := range p.GetQuantileValues() {
				sp.QuantileValues = append(sp.QuantileValues, metricdata.QuantileValue{Quantile: q.GetQuantile(), Value: q.GetValue()})
			}
			s.DataPoints = append(s.DataPoints, sp)
		}
		return s, true
	}
	return nil, false
}

func temporality(t metricspb.AggregationTemporality) (metricdata.Temporality, bool) {
	switch t {
	case metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA:
		return metricdata.DeltaTemporality, true
	case metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE:
		return metricdata.CumulativeTemporality, true
	}
	return 0, false
}

// allInt reports whether every point is an int; with no points, the
// metric is int.
func allInt(pts []*metricspb.NumberDataPoint) bool {
	for _, p := range pts {
		if _, ok := p.GetValue().(*metricspb.NumberDataPoint_AsInt); !ok {
			return false
		}
	}
	return true
}

func intValue(p *metricspb.NumberDataPoint) int64 { return p.GetAsInt() }

func doubleValue(p *metricspb.NumberDataPoint) float64 {
	if v, ok := p.GetValue().(*metricspb.NumberDataPoint_AsInt); ok {
		return float64(v.AsInt)
	}
	return p.GetAsDouble()
}

func numberPoints[N int64 | float64](pts []*metricspb.NumberDataPoint, value func(*metricspb.NumberDataPoint) N) []metricdata.DataPoint[N] {
	out := make([]metricdata.DataPoint[N], 0, len(pts))
	for _, p := range pts {
		ex := func(e *metricspb.Exemplar) N {
			if v, ok := e.GetValue().(*metricspb.Exemplar_AsInt); ok {
				return N(v.AsInt)
			}
			return N(e.GetAsDouble())
		}
		out = append(out, metricdata.DataPoint[N]{
			Attributes: attribute.NewSet(KeyValues(p.GetAttributes())...),
			StartTime:  Time(p.GetStartTimeUnixNano()),
			Time:       Time(p.GetTimeUnixNano()),
			Value:      value(p),
			Exemplars:  exemplars(p.GetExemplars(), ex),
		})
	}
	return out
}

func doubleExemplar(e *metricspb.Exemplar) float64 {
	if v, ok := e.GetValue().(*metricspb.Exemplar_AsInt); ok {
		return float64(v.AsInt)
	}
	return e.GetAsDouble()
}

func exemplars[N int64 | float64](es []*metricspb.Exemplar, value func(*metricspb.Exemplar) N) []metricdata.Exemplar[N] {
	if len(es) == 0 {
		return nil
	}
	out := make([]metricdata.Exemplar[N], 0, len(es))
	for _, e := range es {
		out = append(out, metricdata.Exemplar[N]{
			FilteredAttributes: KeyValues(e.GetFilteredAttributes()),
			Time:               Time(e.GetTimeUnixNano()),
			Value:              value(e),
			SpanID:             e.GetSpanId(),
			TraceID:            e.GetTraceId(),
		})
	}
	return out
}

// dataPoints is how many data points m holds, of whatever kind.
func dataPoints(m *metricspb.Metric) int {
	return len(m.GetGauge().GetDataPoints()) + len(m.GetSum().GetDataPoints()) +
		len(m.GetHistogram().GetDataPoints()) + len(m.GetExponentialHistogram().GetDataPoints()) +
		len(m.GetSummary().GetDataPoints())
}
