package promfam

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

const exposition = `# TYPE runs counter
runs{status="completed",workflow="a"} 3
runs{status="completed",workflow="b"} 1
runs{status="failed",workflow="a"} 2
runs 7
# TYPE active gauge
active{workflow="a"} 1.5
# TYPE dur histogram
dur_bucket{status="completed",le="1"} 2
dur_bucket{status="completed",le="+Inf"} 4
dur_sum{status="completed"} 9
dur_count{status="completed"} 4
dur_bucket{status="failed",le="1"} 0
dur_bucket{status="failed",le="+Inf"} 1
dur_sum{status="failed"} 3
dur_count{status="failed"} 1
`

func TestScrapeByLabelTotal(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.Error(w, "no", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, exposition)
	}))
	defer srv.Close()
	fams, err := Scrape(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, label string
		want        map[string]float64
	}{
		{"runs", "status", map[string]float64{"completed": 4, "failed": 2, "": 7}},
		{"runs", "", map[string]float64{"": 13}},
		{"active", "workflow", map[string]float64{"a": 1.5}},
		{"dur", "status", map[string]float64{"completed": 4, "failed": 1}},
		{"missing", "status", map[string]float64{}},
	} {
		got := ByLabel(fams, tc.name, tc.label)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("ByLabel(%s, %s) = %v, want %v", tc.name, tc.label, got, tc.want)
		}
	}
	if got := Total(ByLabel(fams, "runs", "status")); got != 13 {
		t.Errorf("Total = %v, want 13", got)
	}
	if _, err := Scrape(srv.URL + "/other"); err == nil {
		t.Error("Scrape of a 503: no error")
	}
}
