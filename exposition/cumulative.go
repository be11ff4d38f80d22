package exposition

import (
	"math"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// Cumulative is a prometheus.Gatherer exposing a live registry plus the
// totals of earlier processes (the base): every counter and histogram whose
// name starts with its prefix is the sum of both, series by series; gauges
// and the other families (go_*, process_*) are the live ones. So /metrics
// after a restart shows the exact totals since the first process, and
// nothing goes down. The base comes from a checkpoint (SetBase), and what
// the next process needs is Totals.
type Cumulative struct {
	live   prometheus.Gatherer
	prefix string
	mu     sync.RWMutex
	base   map[string]*dto.MetricFamily
}

// NewCumulative returns a Cumulative over live with an empty base, carrying
// the counters and histograms whose names start with prefix (cbc-otel's:
// "cbc_"; "" carries every counter and histogram).
func NewCumulative(live prometheus.Gatherer, prefix string) *Cumulative {
	return &Cumulative{live: live, prefix: prefix, base: map[string]*dto.MetricFamily{}}
}

// carried reports whether a family is carried across restarts.
func (c *Cumulative) carried(mf *dto.MetricFamily) bool {
	t := mf.GetType()
	return strings.HasPrefix(mf.GetName(), c.prefix) && (t == dto.MetricType_COUNTER || t == dto.MetricType_HISTOGRAM)
}

// SetBase replaces the base (families of other types or names are ignored).
func (c *Cumulative) SetBase(fams []*dto.MetricFamily) {
	base := make(map[string]*dto.MetricFamily, len(fams))
	for _, mf := range fams {
		if c.carried(mf) {
			base[mf.GetName()] = mf
		}
	}
	c.mu.Lock()
	c.base = base
	c.mu.Unlock()
}

// Gather implements prometheus.Gatherer: base plus live.
func (c *Cumulative) Gather() ([]*dto.MetricFamily, error) {
	live, err := c.live.Gather()
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*dto.MetricFamily, 0, len(live)+len(c.base))
	seen := make(map[string]bool, len(live))
	for _, mf := range live {
		seen[mf.GetName()] = true
		if b, ok := c.base[mf.GetName()]; ok && c.carried(mf) && b.GetType() == mf.GetType() {
			mf = mergeFamily(b, mf)
		}
		out = append(out, mf)
	}
	for name, b := range c.base {
		if !seen[name] {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, err
}

// Totals returns the cumulative families (base plus live), to be saved and
// given to SetBase of the next process.
func (c *Cumulative) Totals() ([]*dto.MetricFamily, error) {
	fams, err := c.Gather()
	if err != nil {
		return nil, err
	}
	out := fams[:0]
	for _, mf := range fams {
		if c.carried(mf) {
			out = append(out, mf)
		}
	}
	return out, nil
}

// seriesKey identifies a series within a family by its sorted labels.
func seriesKey(m *dto.Metric) string {
	pairs := make([]string, 0, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		pairs = append(pairs, l.GetName()+"\xff"+l.GetValue())
	}
	slices.Sort(pairs)
	return strings.Join(pairs, "\xfe")
}

// mergeFamily returns base + live for one counter or histogram family.
// live's exemplars are kept; base's created timestamp wins (it is older).
func mergeFamily(base, live *dto.MetricFamily) *dto.MetricFamily {
	out := proto.Clone(live).(*dto.MetricFamily)
	idx := make(map[string]*dto.Metric, len(out.Metric))
	for _, m := range out.Metric {
		idx[seriesKey(m)] = m
	}
	for _, bm := range base.Metric {
		lm, ok := idx[seriesKey(bm)]
		if !ok {
			out.Metric = append(out.Metric, proto.Clone(bm).(*dto.Metric))
			continue
		}
		switch out.GetType() {
		case dto.MetricType_COUNTER:
			if bm.Counter == nil || lm.Counter == nil {
				continue
			}
			lm.Counter.Value = proto.Float64(lm.Counter.GetValue() + bm.Counter.GetValue())
			if ct := bm.Counter.GetCreatedTimestamp(); ct != nil {
				lm.Counter.CreatedTimestamp = ct
			}
		case dto.MetricType_HISTOGRAM:
			if bm.Histogram == nil || lm.Histogram == nil {
				continue
			}
			mergeHistogram(bm.Histogram, lm.Histogram)
		}
	}
	sort.SliceStable(out.Metric, func(i, j int) bool { return seriesKey(out.Metric[i]) < seriesKey(out.Metric[j]) })
	return out
}

// mergeHistogram adds b into h: count, sum, classic buckets (by upper
// bound) and native buckets (at the coarser of the two schemas).
func mergeHistogram(b, h *dto.Histogram) {
	h.SampleCount = proto.Uint64(h.GetSampleCount() + b.GetSampleCount())
	h.SampleSum = proto.Float64(h.GetSampleSum() + b.GetSampleSum())
	if ct := b.GetCreatedTimestamp(); ct != nil {
		h.CreatedTimestamp = ct
	}
	h.Bucket = mergeClassic(b.Bucket, h.Bucket)
	if b.Schema != nil && h.Schema != nil {
		mergeNative(b, h)
	}
}

// cumulativeAt is the cumulative count of a classic histogram at bound ub:
// the count of the largest bucket bound not above it.
func cumulativeAt(bs []*dto.Bucket, ub float64) uint64 {
	var c uint64
	for _, x := range bs {
		if x.GetUpperBound() <= ub {
			c = x.GetCumulativeCount()
		}
	}
	return c
}

func mergeClassic(base, live []*dto.Bucket) []*dto.Bucket {
	if len(base) == 0 {
		return live
	}
	bounds := make([]float64, 0, len(base)+len(live))
	for _, x := range base {
		bounds = append(bounds, x.GetUpperBound())
	}
	for _, x := range live {
		bounds = append(bounds, x.GetUpperBound())
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	ex := make(map[float64]*dto.Exemplar)
	for _, x := range live {
		if x.Exemplar != nil {
			ex[x.GetUpperBound()] = x.Exemplar
		}
	}
	out := make([]*dto.Bucket, 0, len(bounds))
	for _, ub := range bounds {
		out = append(out, &dto.Bucket{
			UpperBound:      proto.Float64(ub),
			CumulativeCount: proto.Uint64(cumulativeAt(base, ub) + cumulativeAt(live, ub)),
			Exemplar:        ex[ub],
		})
	}
	return out
}

// nativeBuckets expands spans and deltas into absolute counts by index.
func nativeBuckets(spans []*dto.BucketSpan, deltas []int64) map[int32]int64 {
	out := map[int32]int64{}
	var idx int32
	var cur int64
	d := 0
	for i, s := range spans {
		if i == 0 {
			idx = s.GetOffset()
		} else {
			idx += s.GetOffset()
		}
		for j := uint32(0); j < s.GetLength(); j++ {
			if d < len(deltas) {
				cur += deltas[d]
				d++
			}
			out[idx] += cur
			idx++
		}
	}
	return out
}

// reduce maps bucket indices from schema from to the coarser schema to.
func reduce(b map[int32]int64, from, to int32) map[int32]int64 {
	if from == to {
		return b
	}
	out := make(map[int32]int64, len(b))
	shift := from - to
	for i, c := range b {
		out[((i-1)>>shift)+1] += c
	}
	return out
}

// encodeNative turns absolute counts by index back into spans and deltas.
func encodeNative(b map[int32]int64) ([]*dto.BucketSpan, []int64) {
	idx := make([]int32, 0, len(b))
	for i, c := range b {
		if c != 0 {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	var spans []*dto.BucketSpan
	var deltas []int64
	var prevCount int64
	var prev int32
	for n, i := range idx {
		switch {
		case n == 0:
			spans = append(spans, &dto.BucketSpan{Offset: proto.Int32(i), Length: proto.Uint32(1)})
		case i == prev+1:
			spans[len(spans)-1].Length = proto.Uint32(spans[len(spans)-1].GetLength() + 1)
		default:
			spans = append(spans, &dto.BucketSpan{Offset: proto.Int32(i - prev - 1), Length: proto.Uint32(1)})
		}
		deltas = append(deltas, b[i]-prevCount)
		prevCount = b[i]
		prev = i
	}
	return spans, deltas
}

func mergeNative(b, h *dto.Histogram) {
	schema := min(b.GetSchema(), h.GetSchema())
	pos := reduce(nativeBuckets(h.PositiveSpan, h.PositiveDelta), h.GetSchema(), schema)
	neg := reduce(nativeBuckets(h.NegativeSpan, h.NegativeDelta), h.GetSchema(), schema)
	for i, c := range reduce(nativeBuckets(b.PositiveSpan, b.PositiveDelta), b.GetSchema(), schema) {
		pos[i] += c
	}
	for i, c := range reduce(nativeBuckets(b.NegativeSpan, b.NegativeDelta), b.GetSchema(), schema) {
		neg[i] += c
	}
	h.Schema = proto.Int32(schema)
	h.ZeroThreshold = proto.Float64(math.Max(b.GetZeroThreshold(), h.GetZeroThreshold()))
	h.ZeroCount = proto.Uint64(b.GetZeroCount() + h.GetZeroCount())
	h.PositiveSpan, h.PositiveDelta = encodeNative(pos)
	h.NegativeSpan, h.NegativeDelta = encodeNative(neg)
	if len(h.PositiveSpan) == 0 && len(h.NegativeSpan) == 0 && h.GetZeroThreshold() == 0 {
		// The no-op span that marks a native histogram without buckets.
		h.PositiveSpan = []*dto.BucketSpan{{Offset: proto.Int32(0), Length: proto.Uint32(0)}}
	}
}
