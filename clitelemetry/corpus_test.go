package clitelemetry

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// corpusLine is one recorded OTLP/HTTP request of the CLI.
type corpusLine struct {
	Name string          // file:line
	Path string          `json:"path"`
	CT   string          `json:"ct"`
	Body json.RawMessage `json:"body"`
}

// loadCorpus reads every recorded request under testdata.
func loadCorpus(t testing.TB) []corpusLine {
	t.Helper()
	files, err := filepath.Glob("../testdata/corpus/claude-code-2.1.334-otel/*/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("corpus: %v (%d files)", err, len(files))
	}
	var out []corpusLine
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 16<<20)
		for n := 1; sc.Scan(); n++ {
			var l corpusLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s:%d: %v", f, n, err)
			}
			l.Name = filepath.Base(filepath.Dir(f)) + "/" + filepath.Base(f) + ":" + itoa(n)
			out = append(out, l)
		}
	}
	return out
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// generic decodes JSON with numbers kept as written.
func generic(t testing.TB, b []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// list and obj walk generic JSON; missing is empty.
func list(m any, key string) []any {
	o, _ := m.(map[string]any)
	l, _ := o[key].([]any)
	return l
}

func obj(m any, key string) map[string]any {
	o, _ := m.(map[string]any)
	r, _ := o[key].(map[string]any)
	return r
}

func str(m any, key string) string {
	o, _ := m.(map[string]any)
	switch v := o[key].(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	}
	return ""
}

// jsonIDs lists, in order, the ids of the spans (trace, span, parent), or
// log records (trace, span), of a recorded body, straight from the JSON.
func jsonIDs(body map[string]any) [][3]string {
	var out [][3]string
	for _, r := range list(body, "resourceSpans") {
		for _, s := range list(r, "scopeSpans") {
			for _, sp := range list(s, "spans") {
				out = append(out, [3]string{str(sp, "traceId"), str(sp, "spanId"), str(sp, "parentSpanId")})
			}
		}
	}
	for _, r := range list(body, "resourceLogs") {
		for _, s := range list(r, "scopeLogs") {
			for _, lr := range list(s, "logRecords") {
				out = append(out, [3]string{str(lr, "traceId"), str(lr, "spanId"), ""})
			}
		}
	}
	return out
}

// jsonPoints counts the data points of a recorded metrics body.
func jsonPoints(body map[string]any) int {
	n := 0
	for _, r := range list(body, "resourceMetrics") {
		for _, s := range list(r, "scopeMetrics") {
			for _, m := range list(s, "metrics") {
				for _, k := range []string{"sum", "gauge", "histogram", "exponentialHistogram", "summary"} {
					n += len(list(obj(m, k), "dataPoints"))
				}
			}
		}
	}
	return n
}
