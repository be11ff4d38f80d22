package ingest_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// The README documents the closed sets of rejection reasons and violation
// kinds as tables, each after a fixed lead-in line:
//
//	Rejection reasons (...):
//
//	| reason | meaning |
//	|---|---|
//	| `invalid_json` | ... |
//
// TestReadmeNames keeps those tables equal to the sets the code declares,
// both ways: a kind added to the code and not documented fails, and so
// does a documented one the code does not have.
func TestReadmeNames(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)

	var reasons, kinds []string
	for _, r := range streamjson.Reasons() {
		reasons = append(reasons, r.String())
	}
	for _, v := range ingest.Violations() {
		kinds = append(kinds, v.String())
	}
	for _, c := range []struct {
		leadIn, column string
		code           []string
	}{
		{"Rejection reasons (", "reason", reasons},
		{"Violation kinds (", "kind", kinds},
	} {
		doc, err := readmeTable(readme, c.leadIn, c.column)
		if err != nil {
			t.Errorf("README.md: %v", err)
			continue
		}
		if missing := minus(c.code, doc); len(missing) > 0 {
			t.Errorf("README.md: the %q table lacks %s declared by package ingest", c.column, strings.Join(missing, ", "))
		}
		if extra := minus(doc, c.code); len(extra) > 0 {
			t.Errorf("README.md: the %q table lists %s, which package ingest does not declare", c.column, strings.Join(extra, ", "))
		}
	}
}

// nameCell is a table's first cell: one backticked name.
var nameCell = regexp.MustCompile("^`([a-z][a-z0-9_]*)`$")

// readmeTable returns the names in the first column of the table that
// follows the line starting with leadIn, whose header's first cell is
// column.
func readmeTable(readme, leadIn, column string) ([]string, error) {
	lines := strings.Split(readme, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, leadIn) })
	if start < 0 {
		return nil, fmt.Errorf("no line starts with %q", leadIn)
	}
	if slices.ContainsFunc(lines[start+1:], func(l string) bool { return strings.HasPrefix(l, leadIn) }) {
		return nil, fmt.Errorf("more than one line starts with %q", leadIn)
	}
	i := start + 1
	for i < len(lines) && !strings.HasPrefix(lines[i], "|") {
		i++
	}
	if i+1 >= len(lines) {
		return nil, fmt.Errorf("no table after %q", leadIn)
	}
	if h := cells(lines[i]); len(h) == 0 || h[0] != column {
		return nil, fmt.Errorf("the table after %q has header %q; want its first column to be %q", leadIn, lines[i], column)
	}
	if !strings.HasPrefix(lines[i+1], "|---") {
		return nil, fmt.Errorf("the table after %q has no separator row under its header", leadIn)
	}
	var names []string
	seen := map[string]bool{}
	for _, l := range lines[i+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		m := nameCell.FindStringSubmatch(cells(l)[0])
		if m == nil {
			return nil, fmt.Errorf("row %q of the %q table: the first cell is not one backticked name", l, column)
		}
		if seen[m[1]] {
			return nil, fmt.Errorf("the %q table lists %s twice", column, m[1])
		}
		seen[m[1]] = true
		names = append(names, m[1])
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("the %q table has no rows", column)
	}
	return names, nil
}

// cells splits a table row into its trimmed cells.
func cells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	out := strings.Split(row, "|")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// minus returns the elements of a not in b, in a's order.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
