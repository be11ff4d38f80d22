// Package promfam reads a Prometheus text exposition the way the tests
// that scrape a real cbc-otel check it: the families of a /metrics URL,
// and a family summed by one label.
//
// It is internal because it is test support shared by this module's
// packages, not API.
package promfam

import (
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape GETs url (a /metrics endpoint) and parses its text exposition;
// any status but 200 is an error.
func Scrape(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return fams, nil
}

// ByLabel sums the family name by the value of label ("" for series
// without it): counters and gauges by value, histograms by sample count.
func ByLabel(fams map[string]*dto.MetricFamily, name, label string) map[string]float64 {
	out := map[string]float64{}
	mf, ok := fams[name]
	if !ok {
		return out
	}
	for _, m := range mf.Metric {
		key := ""
		for _, l := range m.Label {
			if l.GetName() == label {
				key = l.GetValue()
			}
		}
		switch {
		case m.Counter != nil:
			out[key] += m.Counter.GetValue()
		case m.Gauge != nil:
			out[key] += m.Gauge.GetValue()
		case m.Histogram != nil:
			out[key] += float64(m.Histogram.GetSampleCount())
		}
	}
	return out
}

// Total is the sum of m's values.
func Total(m map[string]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}
