// Package promtext sums the samples of one metric in a Prometheus text
// exposition (a /metrics body or a --metrics.file): the benchmark harness
// reads cbc-otel's own counts from them (lines framed, bytes and spans
// dropped) and needs no more than a sum per family, so no full parser.
package promtext

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Sum adds up every sample of the metric name in a Prometheus text
// exposition (all label sets); found says whether there was one at all.
func Sum(r io.Reader, name string) (sum float64, found bool, err error) {
	return SumLabel(r, name, "")
}

// SumLabel is Sum over the samples whose label set contains label
// (e.g. `source="stdout"`; "" = all).
func SumLabel(r io.Reader, name, label string) (sum float64, found bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // another metric, or one whose name only starts so
		}
		labels := ""
		if rest[0] == '{' {
			i := strings.LastIndexByte(rest, '}')
			if i < 0 {
				return 0, false, fmt.Errorf("metrics: %q: unterminated labels", sc.Text())
			}
			labels, rest = rest[:i+1], rest[i+1:]
		}
		if !strings.Contains(labels, label) {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, false, fmt.Errorf("metrics: %q: no value", sc.Text())
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, false, fmt.Errorf("metrics: %q: %w", sc.Text(), err)
		}
		sum += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, false, fmt.Errorf("metrics: %w", err)
	}
	return sum, found, nil
}

// Text sums the samples of the metric family name, in a Prometheus
// text exposition, whose labels contain label ("" = all); 0 when the body
// does not parse (the callers' checks then fail on the count).
func Text(body, name, label string) float64 {
	v, _, _ := SumLabel(strings.NewReader(body), name, label)
	return v
}
