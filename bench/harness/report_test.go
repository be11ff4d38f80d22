package main

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	sorted := make([]int64, 100)
	for i := range sorted {
		sorted[i] = int64(i + 1)
	}
	for _, tc := range []struct {
		in   []int64
		p    float64
		want int64
	}{
		{nil, 50, 0},
		{sorted, 50, 50},
		{sorted, 99, 99},
		{sorted, 100, 100},
		{sorted, 0, 1},
		{[]int64{7}, 99, 7},
	} {
		if got := percentile(tc.in, tc.p); got != tc.want {
			t.Errorf("percentile(len %d, %v) = %d, want %d", len(tc.in), tc.p, got, tc.want)
		}
	}
}

func TestScrapeCounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want counts
	}{
		{"none yet", "# HELP other\nother_metric 3\n", counts{}},
		{"suffixed and labelled", `# TYPE cbc_task_notifications_total counter
cbc_task_notifications_total{otel_scope_name="count",status="completed"} 1333
cbc_task_notifications_total{otel_scope_name="count",status="failed"} 667
`, counts{"completed": 1333, "failed": 667}},
		{"no suffix, float", `cbc_task_notifications{status="stopped"} 2e+00` + "\n", counts{"stopped": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			got, err := scrapeCounts(srv.Client(), srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
