// Package clicorpus reads the recorded OTLP/HTTP requests of Claude Code's
// own telemetry (testdata/corpus/claude-code-2.1.334-otel), for the tests
// of the packages that receive, convert and forward them.
package clicorpus

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// Line is one recorded OTLP/HTTP request of the CLI.
type Line struct {
	Name string          // file:line
	Path string          `json:"path"`
	CT   string          `json:"ct"`
	Body json.RawMessage `json:"body"`
}

// Load reads every recorded request.
func Load(t testing.TB) []Line {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	pattern := filepath.Join(filepath.Dir(self), "..", "..", "testdata", "corpus", "claude-code-2.1.334-otel", "*", "*.jsonl")
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("corpus: %v (%d files)", err, len(files))
	}
	var out []Line
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 16<<20)
		for n := 1; sc.Scan(); n++ {
			var l Line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s:%d: %v", f, n, err)
			}
			l.Name = filepath.Base(filepath.Dir(f)) + "/" + filepath.Base(f) + ":" + strconv.Itoa(n)
			out = append(out, l)
		}
	}
	return out
}

// Generic decodes JSON with numbers kept as written.
func Generic(t testing.TB, b []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// List and Obj walk generic JSON; missing is empty.
func List(m any, key string) []any {
	o, _ := m.(map[string]any)
	l, _ := o[key].([]any)
	return l
}

// Obj is the object under key; nil when missing.
func Obj(m any, key string) map[string]any {
	o, _ := m.(map[string]any)
	r, _ := o[key].(map[string]any)
	return r
}

// Str is the string or number under key, as written; "" when missing.
func Str(m any, key string) string {
	o, _ := m.(map[string]any)
	switch v := o[key].(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	}
	return ""
}

// Num is the integer under key (a number or, as OTLP/JSON writes int64, a
// string); 0 when missing.
func Num(m any, key string) int64 {
	n, _ := strconv.ParseInt(Str(m, key), 10, 64)
	return n
}

// Points counts the data points of a recorded metrics body.
func Points(body map[string]any) int {
	n := 0
	for _, r := range List(body, "resourceMetrics") {
		for _, s := range List(r, "scopeMetrics") {
			for _, m := range List(s, "metrics") {
				for _, k := range []string{"sum", "gauge", "histogram", "exponentialHistogram", "summary"} {
					n += len(List(Obj(m, k), "dataPoints"))
				}
			}
		}
	}
	return n
}
