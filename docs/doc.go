// Package docs holds the repository's reference documentation (the
// Markdown files of this directory, which README.md maps) and the tests
// that keep the documentation navigable: every relative link and #anchor
// of README.md, docs/*.md, BENCHMARKS.md, dashboards/README.md and
// deploy/helm/README.md resolves, no Markdown file skips a heading level,
// README.md stays short, each file of docs/ opens with its title and an
// introduction, and docs/metrics.md names every metric family the
// code declares (a scan of the module's Go source, which needs no package
// of its own). The other tests that hold what the documents say to the
// code (flag tables equal to -h, closed sets of names, the JSON keys) live
// beside the code they check.
package docs
