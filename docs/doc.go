// Package docs holds the repository's reference documentation (the
// Markdown files of this directory, which README.md maps) and the tests
// that keep the documentation navigable: every relative link and #anchor
// of README.md, docs/*.md, BENCHMARKS.md, dashboards/README.md and
// deploy/helm/README.md resolves, no Markdown file skips a heading level,
// and README.md stays short. The tests that hold what the documents say
// to the code (flag tables equal to -h, closed sets of names, the JSON
// keys) live beside the code they check.
package docs
