// Package mdtable reads the parts of this repository's Markdown that tests
// hold against the code: tables (the flag tables equal to -h, the closed
// sets of names), headings and the anchors GitHub makes of them, and
// relative links. One reader, so that every docs test reads a table, a
// heading or a link the same way, and the way GitHub renders it.
//
// It reads the GitHub-flavoured Markdown this repository writes, not all of
// it: ATX headings (`## Title`), pipe tables, inline links and images;
// fenced code blocks (``` and ~~~) and code spans are skipped.
//
// It is internal because it is test support shared by this module's
// packages, not API.
package mdtable

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Table is a pipe table of a Markdown document.
type Table struct {
	// Line is the 1-based line of the header row.
	Line int
	// Tag is the text of an HTML comment on the line right above the
	// header (`<!-- flags: run demo -->` gives "flags: run demo"), or "".
	Tag string
	// Intro is the paragraph above the table (above its tag, if any), its
	// lines joined by spaces, or "" when a heading, a table or the start
	// of the document comes first.
	Intro string
	// Header holds the header row's cells.
	Header []string
	// Rows holds the body rows' cells, trimmed, `\|` read as `|`.
	Rows [][]string
}

// Column returns the index of the header cell named name, or -1.
func (t Table) Column(name string) int {
	for i, h := range t.Header {
		if h == name {
			return i
		}
	}
	return -1
}

// Cell returns row's cell under the header cell named name, or "" when the
// table has no such column or the row is shorter.
func (t Table) Cell(row []string, name string) string {
	if i := t.Column(name); i >= 0 && i < len(row) {
		return row[i]
	}
	return ""
}

// delimiterRow is a table's second line: | --- | :--: | ---: |
var delimiterRow = regexp.MustCompile(`^\|? *:?-+:? *(\| *:?-+:? *)*\|? *$`)

// tagLine is an HTML comment alone on its line.
var tagLine = regexp.MustCompile(`^<!-- *(.*?) *-->$`)

// Tables returns md's pipe tables in order. A table is a row starting with
// `|` followed by a delimiter row; it ends at the first line that does not
// start with `|`.
func Tables(md string) []Table {
	lines := Lines(md)
	var out []Table
	for i := 0; i+1 < len(lines); i++ {
		if lines[i].Code || !strings.HasPrefix(lines[i].Text, "|") || !delimiterRow.MatchString(lines[i+1].Text) {
			continue
		}
		t := Table{Line: i + 1, Header: Cells(lines[i].Text)}
		j := i - 1
		if j >= 0 && !lines[j].Code {
			if m := tagLine.FindStringSubmatch(lines[j].Text); m != nil {
				t.Tag = m[1]
				j--
			}
		}
		for j >= 0 && !lines[j].Code && strings.TrimSpace(lines[j].Text) == "" {
			j--
		}
		end := j
		for j >= 0 && !lines[j].Code && isParagraphLine(lines[j].Text) {
			j--
		}
		if end > j {
			var para []string
			for _, l := range lines[j+1 : end+1] {
				para = append(para, strings.TrimSpace(l.Text))
			}
			t.Intro = strings.Join(para, " ")
		}
		i += 2
		for ; i < len(lines) && !lines[i].Code && strings.HasPrefix(lines[i].Text, "|"); i++ {
			t.Rows = append(t.Rows, Cells(lines[i].Text))
		}
		out = append(out, t)
		i--
	}
	return out
}

// isParagraphLine reports whether l can be a line of a paragraph: not
// blank, no heading, table row or HTML comment.
func isParagraphLine(l string) bool {
	t := strings.TrimSpace(l)
	return t != "" && !strings.HasPrefix(t, "#") && !strings.HasPrefix(t, "|") && !tagLine.MatchString(t)
}

// Cells splits a table row into its trimmed cells, as GitHub does: the
// leading and trailing pipes are no cells, a backslash escapes the ASCII
// punctuation after it, and an escaped pipe (`\|`, also within a code
// span) is a pipe inside a cell; other escapes are left for the inline
// text (`\\|` is an escaped backslash, then a delimiter).
func Cells(row string) []string {
	row = strings.TrimPrefix(strings.TrimSpace(row), "|")
	var out []string
	var b strings.Builder
	end := false // the row ended with a delimiter
	for i := 0; i < len(row); i++ {
		end = false
		switch c := row[i]; {
		case c == '\\' && i+1 < len(row) && strings.IndexByte(asciiPunct, row[i+1]) >= 0:
			if row[i+1] != '|' {
				b.WriteByte(c)
			}
			b.WriteByte(row[i+1])
			i++
		case c == '|':
			out = append(out, strings.TrimSpace(b.String()))
			b.Reset()
			end = true
		default:
			b.WriteByte(c)
		}
	}
	if !end || len(out) == 0 {
		out = append(out, strings.TrimSpace(b.String()))
	}
	return out
}

// asciiPunct is what a backslash escapes in CommonMark.
const asciiPunct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

// Line is a line of a Markdown document.
type Line struct {
	Text string
	// Code is true inside a fenced code block, its fences included.
	Code bool
}

// Lines splits md into lines and marks those of fenced code blocks.
func Lines(md string) []Line {
	var out []Line
	fence := ""
	for _, l := range strings.Split(md, "\n") {
		t := strings.TrimSpace(l)
		switch {
		case fence == "" && (strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")):
			fence = t[:3]
			out = append(out, Line{l, true})
		case fence != "":
			if strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				fence = ""
			}
			out = append(out, Line{l, true})
		default:
			out = append(out, Line{l, false})
		}
	}
	return out
}

// Heading is an ATX heading of a Markdown document.
type Heading struct {
	// Line is 1-based.
	Line int
	// Level is the number of #: 1 to 6.
	Level int
	// Text is the heading's text, closing #s and spaces removed.
	Text string
	// Anchor is the fragment GitHub links it by, unique in the document.
	Anchor string
}

// atxHeading is `#{1,6} text`, up to three spaces indented.
var atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)

// Headings returns md's headings in order, outside code blocks, with the
// anchors GitHub gives them: Slug of the text, and a second heading of the
// same slug gets "-1", a third "-2", and so on.
func Headings(md string) []Heading {
	var out []Heading
	seen := map[string]int{}
	for i, l := range Lines(md) {
		if l.Code {
			continue
		}
		m := atxHeading.FindStringSubmatch(l.Text)
		if m == nil {
			continue
		}
		h := Heading{Line: i + 1, Level: len(m[1]), Text: m[2]}
		h.Anchor = Slug(h.Text)
		if n, ok := seen[h.Anchor]; ok {
			seen[h.Anchor] = n + 1
			h.Anchor += "-" + strconv.Itoa(n+1)
		} else {
			seen[h.Anchor] = 0
		}
		out = append(out, h)
	}
	return out
}

// Anchors returns the set of md's heading anchors.
func Anchors(md string) map[string]bool {
	out := map[string]bool{}
	for _, h := range Headings(md) {
		out[h.Anchor] = true
	}
	return out
}

// Slug is the anchor GitHub makes of a heading's text (github-slugger):
// lower case, every character but letters, numbers, marks, connector
// punctuation ('_'), '-' and spaces removed (so backticks, other
// punctuation, symbols, emoji), each space a '-'. Markdown in the text
// is read as written: a link's URL would count, and headings here have
// none.
func Slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r) || unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Link is an inline link or image of a Markdown document.
type Link struct {
	// Line is 1-based.
	Line int
	// Target is what the parentheses hold, a title left out.
	Target string
}

// inlineLink is [text](target) or ![alt](target "title"); the text may
// hold code spans but no brackets.
var inlineLink = regexp.MustCompile(`!?\[[^\[\]]*\]\(<?([^()\s<>]*)>?(?:\s+"[^"]*")?\)`)

// codeSpan is a code span of one to three backticks.
var codeSpan = regexp.MustCompile("```[^`]*```|``[^`]*``|`[^`]*`")

// Links returns md's inline links and images outside code blocks and code
// spans, in order.
func Links(md string) []Link {
	var out []Link
	for i, l := range Lines(md) {
		if l.Code {
			continue
		}
		// Blank code spans (a link's text may hold one: it stays a link).
		text := codeSpan.ReplaceAllStringFunc(l.Text, func(s string) string { return strings.Repeat(" ", len(s)) })
		for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
			out = append(out, Link{Line: i + 1, Target: m[1]})
		}
	}
	return out
}
