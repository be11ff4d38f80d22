// Package e2e holds end-to-end tests that run the built cbc-otel binary
// against real backends (Prometheus, Jaeger) and under the real agent
// SDKs. Each test skips when its backend is not installed, unless CI is
// set, in which case a missing backend is a failure: .ci/run installs them
// (see TOOLING.md). internal/realtool does the finding and records each
// skip, which `make test` lists at its end.
package e2e
