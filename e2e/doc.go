// Package e2e holds end-to-end tests that run the built cbc-otel binary
// against real backends (Prometheus, Jaeger). Each test skips when its
// backend is not installed, unless CI is set, in which case a missing
// backend is a failure: .ci/run installs them (see TOOLING.md).
package e2e
