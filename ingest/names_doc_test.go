package ingest_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/internal/mdtable"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// namesDoc is the reference that lists the names.
const namesDoc = "../docs/reconstruction.md"

// docs/reconstruction.md documents the closed sets of rejection reasons
// and violation kinds as tables, each after a fixed lead-in:
//
//	Rejection reasons (...):
//
//	| reason | meaning |
//	|---|---|
//	| `invalid_json` | ... |
//
// TestDocNames keeps those tables equal to the sets the code declares,
// both ways: a kind added to the code and not documented fails, and so
// does a documented one the code does not have.
func TestDocNames(t *testing.T) {
	b, err := os.ReadFile(namesDoc)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)

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
		doc, err := docTable(md, c.leadIn, c.column)
		if err != nil {
			t.Errorf("%s: %v", namesDoc, err)
			continue
		}
		if missing := minus(c.code, doc); len(missing) > 0 {
			t.Errorf("%s: the %q table lacks %s declared by package ingest", namesDoc, c.column, strings.Join(missing, ", "))
		}
		if extra := minus(doc, c.code); len(extra) > 0 {
			t.Errorf("%s: the %q table lists %s, which package ingest does not declare", namesDoc, c.column, strings.Join(extra, ", "))
		}
	}
}

// nameCell is a table's first cell: one backticked name.
var nameCell = regexp.MustCompile("^`([a-z][a-z0-9_]*)`$")

// docTable returns the names in the first column of the one table whose
// intro (the paragraph above it) starts with leadIn, whose header's first
// cell is column.
func docTable(md, leadIn, column string) ([]string, error) {
	var found []mdtable.Table
	for _, tb := range mdtable.Tables(md) {
		if strings.HasPrefix(tb.Intro, leadIn) {
			found = append(found, tb)
		}
	}
	switch {
	case len(found) == 0:
		return nil, fmt.Errorf("no table follows a paragraph starting with %q", leadIn)
	case len(found) > 1:
		return nil, fmt.Errorf("more than one table follows a paragraph starting with %q", leadIn)
	}
	tb := found[0]
	if len(tb.Header) == 0 || tb.Header[0] != column {
		return nil, fmt.Errorf("the table after %q has header %q; want its first column to be %q", leadIn, tb.Header, column)
	}
	var names []string
	seen := map[string]bool{}
	for _, row := range tb.Rows {
		m := nameCell.FindStringSubmatch(row[0])
		if m == nil {
			return nil, fmt.Errorf("row %q of the %q table: the first cell is not one backticked name", row, column)
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
