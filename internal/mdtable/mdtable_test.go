package mdtable

import (
	"reflect"
	"testing"
)

// TestSlug holds the slug rule to anchors GitHub gave headings of this
// repository (and github-slugger's own cases): punctuation and backticks
// go, every space is a '-' (so "a — b" gives "a--b"), '_' and '-' stay,
// letters of any script stay, lower-cased.
func TestSlug(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"Supported CLIs", "supported-clis"},
		{"`replay --json`: a contract for scripts", "replay---json-a-contract-for-scripts"},
		{"A spend cap: `--budget.max-cost-usd`", "a-spend-cap---budgetmax-cost-usd"},
		{"The CLI's own telemetry, joined", "the-clis-own-telemetry-joined"},
		{"`serve`: the sidecar", "serve-the-sidecar"},
		{"In a real runtime: podman", "in-a-real-runtime-podman"},
		{"cbc workflows — overview", "cbc-workflows--overview"},
		{"SLO burn rate (page)", "slo-burn-rate-page"},
		{"snake_case and kebab-case", "snake_case-and-kebab-case"},
		{"Größe Ünïcödé", "größe-ünïcödé"},
		{"日本語 heading", "日本語-heading"},
		{"emoji 🎉 here", "emoji--here"},
		{"v1.2 & co.", "v12--co"},
		{"  two  spaces ", "--two--spaces-"},
		{"", ""},
	} {
		if got := Slug(c.in); got != c.want {
			t.Errorf("Slug(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestHeadings: levels, closing #s, code blocks skipped, duplicate slugs
// numbered as GitHub numbers them, #s without a space no heading.
func TestHeadings(t *testing.T) {
	md := "# Title\n\ntext\n\n## Flags ##\n```sh\n# a comment\n```\n~~~\n## not either\n~~~\n### Flags\n#hashtag\n#### Flags\n   ## indented\n    ## code\n"
	got := Headings(md)
	want := []Heading{
		{1, 1, "Title", "title"},
		{5, 2, "Flags", "flags"},
		{12, 3, "Flags", "flags-1"},
		{14, 4, "Flags", "flags-2"},
		{15, 2, "indented", "indented"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Headings =\n%+v\nwant\n%+v", got, want)
	}
	if a := Anchors(md); !a["flags-2"] || a["not-either"] || a["a-comment"] || len(a) != 5 {
		t.Errorf("Anchors = %v", a)
	}
}

// TestTables: the tag and intro above a table, cells with escaped pipes
// and code, a table ending at the first line that is no row, tables in
// code blocks skipped, a row without a delimiter row no table.
func TestTables(t *testing.T) {
	md := `# Doc

Violation kinds (one,
two):

| kind | meaning |
|---|---|
| ` + "`a`" + ` | x \| y |
| ` + "`b`" + ` |  |
after

<!-- flags: run demo -->
| flag | env | default |
|:---|:---:|---:|
| ` + "`--x REGEX\\|FILE`" + ` | | ` + "`1`" + ` |

## Heading
| not | a table |
text

` + "```" + `
| in | code |
|---|---|
` + "```" + `
`
	got := Tables(md)
	want := []Table{
		{Line: 6, Intro: "Violation kinds (one, two):", Header: []string{"kind", "meaning"},
			Rows: [][]string{{"`a`", "x | y"}, {"`b`", ""}}},
		{Line: 13, Tag: "flags: run demo", Intro: "after", Header: []string{"flag", "env", "default"},
			Rows: [][]string{{"`--x REGEX|FILE`", "", "`1`"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Tables =\n%#v\nwant\n%#v", got, want)
	}
	tb := got[1]
	if tb.Column("default") != 2 || tb.Column("nope") != -1 || tb.Cell(tb.Rows[0], "default") != "`1`" || tb.Cell(tb.Rows[0], "nope") != "" {
		t.Errorf("Column/Cell of %+v", tb)
	}
}

// TestCells: GitHub's split of a row, pipes optional at the ends.
func TestCells(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"| a | b |", []string{"a", "b"}},
		{"|a|b", []string{"a", "b"}},
		{"| a \\| b | c \\|", []string{"a | b", "c |"}},
		{"| | |", []string{"", ""}},
		{"|", []string{""}},
		{`| a \\| b |`, []string{`a \\`, "b"}},
		{`| \_x\* \a |`, []string{`\_x\* \a`}},
	} {
		if got := Cells(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Cells(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestLinks: inline links and images with their targets (titles and
// angle brackets dropped), code in a link's text, and no link read from
// code spans or blocks.
func TestLinks(t *testing.T) {
	md := "see [a](docs/a.md#x) and ![img](runs-page.png \"title\")\n" +
		"[`--flag`](#the-flag), `[not](a-link)`, ``[nor](this)``\n" +
		"```\n[in](code)\n```\n" +
		"[empty]() [abs](https://example.com/a#b) [angle](<b.md>)\n"
	got := Links(md)
	want := []Link{{1, "docs/a.md#x"}, {1, "runs-page.png"}, {2, "#the-flag"}, {6, ""}, {6, "https://example.com/a#b"}, {6, "b.md"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Links = %+v, want %+v", got, want)
	}
}
