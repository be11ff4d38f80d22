package promtext

import (
	"strings"
	"testing"
)

func TestSum(t *testing.T) {
	text := `# HELP cbc_otel_lines_total Lines framed from each tapped stream.
# TYPE cbc_otel_lines_total counter
cbc_otel_lines_total{source="stdout"} 1234
cbc_otel_lines_total{source="stdin"} 6
cbc_otel_lines_total_other 99
cbc_otel_lines_rejected_total{reason="invalid_json"} 3
cbc_otel_tap_dropped_bytes_total{source="stdout"} 0
cbc_otel_tap_dropped_bytes_total{source="stdin"} 0
plain_gauge 2.5e+00 1700000000000
`
	for _, tc := range []struct {
		name  string
		sum   float64
		found bool
	}{
		{"cbc_otel_lines_total", 1240, true},
		{"cbc_otel_tap_dropped_bytes_total", 0, true},
		{"plain_gauge", 2.5, true},
		{"cbc_otel_missing_total", 0, false},
	} {
		sum, found, err := Sum(strings.NewReader(text), tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if sum != tc.sum || found != tc.found {
			t.Errorf("%s: got %v %v, want %v %v", tc.name, sum, found, tc.sum, tc.found)
		}
	}
	if _, _, err := Sum(strings.NewReader("x{a=\"b\"} notanumber\n"), "x"); err == nil {
		t.Error("a bad value gave no error")
	}
}

// TestText checks the sums over a family's samples, by label.
func TestText(t *testing.T) {
	body := `# HELP cbc_otel_tap_dropped_bytes_total x
cbc_otel_tap_dropped_bytes_total{source="stdout"} 12
cbc_otel_tap_dropped_bytes_total{source="stdin"} 3
cbc_otel_tap_dropped_bytes_total_other 99
cbc_otel_lines_total{source="stdout"} 200002
cbc_otel_lines_total{source="stdin"} 7
cbc_plain 5
`
	for _, tc := range []struct {
		name, label string
		want        float64
	}{
		{"cbc_otel_tap_dropped_bytes_total", "", 15},
		{"cbc_otel_lines_total", `source="stdout"`, 200002},
		{"cbc_plain", "", 5},
		{"cbc_absent", "", 0},
	} {
		if got := Text(body, tc.name, tc.label); got != tc.want {
			t.Errorf("Text(%s, %q) = %v, want %v", tc.name, tc.label, got, tc.want)
		}
	}
}
