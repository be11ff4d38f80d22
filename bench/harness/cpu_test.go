package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAddCompared(t *testing.T) {
	bins := []cpuBin{{name: "new"}, {name: "baseline abc"}}
	rep := &report{}
	addCompared(rep, bins, "cpu", "replay", "µs", "%.2f", [][]float64{{1, 3, 2}, {4, 4}}, "≤ 2 µs", func(v float64) bool { return v <= 2 })
	if len(rep.rows) != 3 {
		t.Fatalf("rows: %+v", rep.rows)
	}
	if r := rep.rows[0]; r.value != "2.00 µs (1.00–3.00)" || r.verdict != "meets" {
		t.Errorf("new row: %+v", r)
	}
	if r := rep.rows[1]; r.name != "replay, baseline abc" || r.value != "4.00 µs (4.00–4.00)" || r.target != "" {
		t.Errorf("baseline row: %+v", r)
	}
	if r := rep.rows[2]; r.value != "0.50" {
		t.Errorf("ratio row: %+v", r)
	}
	rep = &report{}
	addCompared(rep, bins[:1], "cpu", "run", "µs", "%.2f", [][]float64{nil}, "≤ 10 µs", func(v float64) bool { return v <= 10 })
	if len(rep.rows) != 1 || rep.rows[0].verdict != "" || !strings.Contains(rep.rows[0].value, "no valid run") {
		t.Errorf("no valid run: %+v", rep.rows)
	}
}

func TestIsPrefix(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	long := write("long", "a\nb\nc\n")
	for _, tc := range []struct {
		short string
		want  bool
	}{{"a\nb\n", true}, {"", true}, {"a\nc\n", false}, {"a\nb\nc\nd\n", false}} {
		got, err := isPrefix(write("short", tc.short), long)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("isPrefix(%q) = %v, want %v", tc.short, got, tc.want)
		}
	}
}
