package main

import (
	"context"
	"fmt"
)

// cmdServe is the long-lived sidecar of issue #6. Not built yet: it says so
// and fails, rather than pretending to run.
func cmdServe(_ context.Context, _ []string, sio stdio) int {
	fmt.Fprintln(sio.err, "cbc-otel serve: not implemented yet (issue #6)")
	return exitFailure
}
