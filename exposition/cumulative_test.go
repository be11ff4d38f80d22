package exposition

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/prototext"
)

func TestNativeMergeAcrossSchemas(t *testing.T) {
	h1 := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cbc_x", NativeHistogramBucketFactor: 1.1, NativeHistogramMaxBucketNumber: 160})
	h2 := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cbc_x", NativeHistogramBucketFactor: 2})
	all := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cbc_x", NativeHistogramBucketFactor: 2})
	for _, v := range []float64{0.3, 1, 2.5, 7, 100} {
		h1.Observe(v)
		all.Observe(v)
	}
	for _, v := range []float64{0.01, 3, 3000} {
		h2.Observe(v)
		all.Observe(v)
	}
	var a, b, w dto.Metric
	_ = h1.Write(&a)
	_ = h2.Write(&b)
	_ = all.Write(&w)
	mergeHistogram(a.Histogram, b.Histogram)
	got, want := b.Histogram, w.Histogram
	got.CreatedTimestamp, want.CreatedTimestamp = nil, nil
	// Encodings may differ (the client keeps short runs of empty buckets
	// inside a span); the counts per bucket may not.
	gb, wb := nativeBuckets(got.PositiveSpan, got.PositiveDelta), nativeBuckets(want.PositiveSpan, want.PositiveDelta)
	for i, c := range wb {
		if c == 0 {
			delete(wb, i)
		}
	}
	if got.GetSchema() != want.GetSchema() || got.GetSampleCount() != want.GetSampleCount() || !maps.Equal(gb, wb) {
		t.Fatalf("merged native histogram\n got %v\nwant %v", prototext.Format(got), prototext.Format(want))
	}
}

// gathered is the value of every series of g by family and labels
// (histograms: their sample count), for comparing what a Cumulative adds.
func gathered(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			k := mf.GetName() + seriesKey(m)
			switch {
			case m.Counter != nil:
				out[k] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[k] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[k] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

// TestCumulativeCarries: the counters and histograms under the prefix are
// base plus live, series by series (a series only the base has stays);
// gauges (even a gauge in the base) and families outside the prefix are the
// live ones; Totals is exactly the carried families.
func TestCumulativeCarries(t *testing.T) {
	newReg := func(runs, other, gauge float64, hist ...float64) *prometheus.Registry {
		reg := prometheus.NewRegistry()
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cbc_runs_total", Help: "h"}, []string{"w"})
		o := prometheus.NewCounter(prometheus.CounterOpts{Name: "go_other_total", Help: "h"})
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "cbc_active", Help: "h"})
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cbc_seconds", Help: "h", Buckets: []float64{1, 10}})
		reg.MustRegister(c, o, g, h)
		c.WithLabelValues("a").Add(runs)
		o.Add(other)
		g.Set(gauge)
		for _, v := range hist {
			h.Observe(v)
		}
		return reg
	}
	before := newReg(3, 5, 2, 0.5, 20)
	// A series the live registry does not have (yet).
	gone := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cbc_runs_total", Help: "h"}, []string{"w"})
	gone.WithLabelValues("b").Add(4)
	before.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "cbc_only_before_total", Help: "h"}))
	prev := NewCumulative(before, "cbc_")
	base, err := prev.Totals()
	if err != nil {
		t.Fatal(err)
	}
	var b dto.Metric
	if err := gone.WithLabelValues("b").Write(&b); err != nil {
		t.Fatal(err)
	}
	b.Label = []*dto.LabelPair{{Name: ptr("w"), Value: ptr("b")}}
	for _, mf := range base {
		if mf.GetName() == "cbc_runs_total" {
			mf.Metric = append(mf.Metric, &b)
		}
	}
	names := map[string]bool{}
	for _, mf := range base {
		names[mf.GetName()] = true
	}
	if !names["cbc_runs_total"] || !names["cbc_seconds"] || !names["cbc_only_before_total"] || names["cbc_active"] || names["go_other_total"] {
		t.Fatalf("Totals holds %v: want the cbc_ counters and histograms only", names)
	}
	// The base may also hold families the next process must not add: a
	// gauge (SetBase drops it), a family outside the prefix.
	gauge := &dto.MetricFamily{Name: ptr("cbc_active"), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: new(float64)}}}}
	*gauge.Metric[0].Gauge.Value = 100
	c := NewCumulative(newReg(1, 1, 1, 2), "cbc_")
	c.SetBase(append(base, gauge))
	got := gathered(t, c)
	want := map[string]float64{
		"cbc_runs_total" + "w\xffa": 3 + 1,
		"cbc_runs_total" + "w\xffb": 4,
		"cbc_only_before_total":     0,
		"cbc_seconds":               2 + 1,
		"cbc_active":                1,
		"go_other_total":            1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("Gather = %v\nwant %v", got, want)
	}
	// An empty base is the live registry.
	if got, want := gathered(t, NewCumulative(newReg(1, 1, 1, 2), "cbc_")), gathered(t, newReg(1, 1, 1, 2)); !maps.Equal(got, want) {
		t.Errorf("empty base: %v, want the live %v", got, want)
	}
}

func ptr(s string) *string { return &s }
