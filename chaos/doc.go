// Package chaos is the fault and abuse suite of cbc-otel: it attacks the
// built binaries (adversarial streams, failing backends, killed processes,
// hostile input, planted secrets, probed endpoints) and prints a table of
// figures, failing on any breach of the bounds in docs/reliability.md.
//
// Its tests carry the build tag "chaos" so that `make test` stays fast; run
// the suite with `make chaos` (chaos/run.sh), which also runs the native
// fuzzing pass whose figures join the same table.
package chaos
