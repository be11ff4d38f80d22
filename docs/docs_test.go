package docs

import (
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/internal/mdtable"
)

// root is the repository, relative to this package.
const root = ".."

// linked are the documents whose links TestLinks checks (globs, from the
// root): the README, the reference, and the READMEs the reference links.
var linked = []string{"README.md", "docs/*.md", "BENCHMARKS.md", "dashboards/README.md", "deploy/helm/README.md"}

// maxReadmeLines bounds README.md: what it is, the two commands, the quick
// start, the supported CLIs and a map of docs/ fit in it; the reference
// does not (issue 30: a 1,456-line README took half an hour to read).
const maxReadmeLines = 300

// repoURL is this repository on GitHub: a link to a file of its main
// branch is checked like a relative one (the runbook URLs, for one).
const repoURL = "https://github.com/cbc-otel/cbc-otel/blob/main/"

// documents returns the files (slash paths from the root) the globs match.
func documents(t *testing.T, globs []string) []string {
	t.Helper()
	var out []string
	for _, g := range globs {
		m, err := fs.Glob(os.DirFS(root), g)
		if err != nil || len(m) == 0 {
			t.Fatalf("%s matches no file (%v)", g, err)
		}
		out = append(out, m...)
	}
	return out
}

// anchorsCache holds the heading anchors of the Markdown files read.
type anchorsCache map[string]map[string]bool

func (c anchorsCache) of(t *testing.T, file string) map[string]bool {
	t.Helper()
	if a, ok := c[file]; ok {
		return a
	}
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	c[file] = mdtable.Anchors(string(b))
	return c[file]
}

// TestLinks: every relative link and image of the documents names a file
// or directory of the repository, and every #anchor (in the same document
// or another Markdown file) is a heading there, by GitHub's slug rule. A
// link to this repository's main branch on GitHub is checked the same way.
func TestLinks(t *testing.T) {
	anchors := anchorsCache{}
	n := 0
	for _, doc := range documents(t, linked) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(doc)))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range mdtable.Links(string(b)) {
			target, ok := strings.CutPrefix(l.Target, repoURL)
			if ok {
				target = "/" + target
			}
			u, err := url.Parse(target)
			if err != nil || target == "" {
				t.Errorf("%s:%d: link %q does not parse (%v)", doc, l.Line, l.Target, err)
				continue
			}
			if u.Scheme != "" || u.Host != "" {
				continue // another site: not ours to check offline
			}
			n++
			file := doc
			if u.Path != "" {
				file = path.Clean(path.Join(path.Dir(doc), u.Path))
				if strings.HasPrefix(u.Path, "/") {
					file = strings.TrimPrefix(path.Clean(u.Path), "/")
				}
				if strings.HasPrefix(file, "../") || file == ".." {
					t.Errorf("%s:%d: link %q leaves the repository", doc, l.Line, l.Target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(file))); err != nil {
					t.Errorf("%s:%d: link %q: no file %s", doc, l.Line, l.Target, file)
					continue
				}
			}
			if u.Fragment == "" {
				continue
			}
			if !strings.HasSuffix(file, ".md") {
				t.Errorf("%s:%d: link %q: an anchor into %s, which is no Markdown file", doc, l.Line, l.Target, file)
				continue
			}
			if !anchors.of(t, file)[u.Fragment] {
				t.Errorf("%s:%d: link %q: %s has no heading #%s", doc, l.Line, l.Target, file, u.Fragment)
			}
		}
	}
	if n < 50 {
		t.Errorf("checked %d links; the documents have far more: is the link reader broken?", n)
	}
}

// TestHeadingLevels: no Markdown file of the repository skips a heading
// level (a ## followed by a ####): a reader's outline and GitHub's table
// of contents then nest what the text nests. The first heading may be of
// any level (a file included elsewhere), each next one at most one deeper.
func TestHeadingLevels(t *testing.T) {
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "sdk", "bin":
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".md") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		prev := 0
		for _, h := range mdtable.Headings(string(b)) {
			if prev > 0 && h.Level > prev+1 {
				t.Errorf("%s:%d: %q is a level-%d heading under a level-%d one", p, h.Line, h.Text, h.Level, prev)
			}
			prev = h.Level
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Errorf("read %d Markdown files; want every one of the repository's", n)
	}
}

// TestReadmeLength: README.md stays a first read, at most maxReadmeLines
// lines; the reference is in docs/, which it maps.
func TestReadmeLength(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, want at most %d: move reference material to docs/", n, maxReadmeLines)
	}
	for _, doc := range documents(t, []string{"docs/*.md"}) {
		if !strings.Contains(string(b), "]("+doc+")") {
			t.Errorf("README.md does not link %s: the map of the docs is incomplete", doc)
		}
	}
}

// metricLiteral is a Go string literal that is a metric family name of
// ours: cbc_ and at least one more word.
var metricLiteral = regexp.MustCompile(`"(cbc_[a-z0-9_]*[a-z0-9])"`)

// docMetric is a metric name in backticks in the docs, labels or a
// selector possibly after it.
var docMetric = regexp.MustCompile("`(cbc_[a-z0-9_]*[a-z0-9])(?:\\{[^`]*\\})?`")

// notSources are the directories whose Go code declares no metric of
// ours: queries, tests and tools quote the names, they do not make them.
var notSources = map[string]bool{"bench": true, "chaos": true, "dashboards": true, "deploy": true, "e2e": true, "simulate": true, "testdata": true, "tools": true, "docs": true}

// declaredMetrics returns the metric family names the module's non-test Go
// code spells, with the file that spells each (wherever a package moves
// them, the scan finds them).
func declaredMetrics(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if notSources[d.Name()] || (p != root && strings.HasPrefix(d.Name(), ".")) {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range metricLiteral.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = p
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMetricsDocNamesEveryFamily holds docs/metrics.md to the metric
// families the code declares, both ways: every family is named there (in
// the table, or in the lines on serve's and the spool writer's own), every
// name the docs give outside code blocks is a family (or a histogram's
// _bucket, _count, _sum), and every row of the metrics table names one.
func TestMetricsDocNamesEveryFamily(t *testing.T) {
	declared := declaredMetrics(t)
	if len(declared) < 40 {
		t.Fatalf("found %d metric names in the code; is the scan broken?", len(declared))
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	known := func(name string) bool {
		for _, suffix := range []string{"", "_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && declared[base] != "" {
				return true
			}
		}
		return false
	}
	documented := map[string]bool{}
	for _, l := range mdtable.Lines(string(b)) {
		if l.Code {
			continue
		}
		for _, m := range docMetric.FindAllStringSubmatch(l.Text, -1) {
			documented[m[1]] = true
			if !known(m[1]) {
				t.Errorf("docs/metrics.md names %s, which no code declares", m[1])
			}
		}
	}
	for name, file := range declared {
		if !documented[name] {
			t.Errorf("docs/metrics.md does not name %s (declared in %s)", name, file)
		}
	}
	rows := 0
	for _, tb := range mdtable.Tables(string(b)) {
		if tb.Column("name") != 0 || tb.Column("type") != 1 {
			continue
		}
		for _, row := range tb.Rows {
			rows++
			if names := docMetric.FindAllString(row[0], -1); len(names) == 0 {
				t.Errorf("docs/metrics.md: the metrics table's row %q names no metric", row[0])
			}
		}
	}
	if rows < 30 {
		t.Errorf("docs/metrics.md: %d rows in the metrics table (| name | type | ...); want every family", rows)
	}
}

// TestDocsOpenWithTitleAndIntro: each file of docs/ opens with one
// level-1 heading, its title, and a paragraph saying what the file holds
// before its first section, so that a reader sent there from a link knows
// where they landed.
func TestDocsOpenWithTitleAndIntro(t *testing.T) {
	for _, doc := range documents(t, []string{"docs/*.md"}) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(doc)))
		if err != nil {
			t.Fatal(err)
		}
		hs := mdtable.Headings(string(b))
		if len(hs) == 0 || hs[0].Line != 1 || hs[0].Level != 1 {
			t.Errorf("%s does not open with a level-1 heading", doc)
			continue
		}
		for _, h := range hs[1:] {
			if h.Level == 1 {
				t.Errorf("%s:%d: a second level-1 heading %q", doc, h.Line, h.Text)
			}
		}
		lines := mdtable.Lines(string(b))
		end := len(lines)
		if len(hs) > 1 {
			end = hs[1].Line - 1
		}
		intro := 0
		for _, l := range lines[1:end] {
			if !l.Code && strings.TrimSpace(l.Text) != "" && !strings.HasPrefix(l.Text, "|") {
				intro++
			}
		}
		if intro == 0 {
			t.Errorf("%s has no introduction between its title and its first section", doc)
		}
	}
}
