package clitelemetry_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cbc-otel/cbc-otel/clitelemetry"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
)

// Wiring: the receiver hands logs and metrics to a Forwarder and spans,
// converted, to our own trace pipeline; the CLI is pointed at
// r.Endpoint() with r.Headers(), its token, which every request must
// carry.
func Example() {
	ctx := context.Background()
	fwd, err := clitelemetry.NewForwarder(ctx, clitelemetry.ForwarderConfig{Endpoint: "none"})
	if err != nil {
		panic(err)
	}
	r, err := clitelemetry.Listen(clitelemetry.ReceiverConfig{}, clitelemetry.Handlers{
		TracesFunc: func(_ context.Context, req *coltracepb.ExportTraceServiceRequest) {
			spans := clitelemetry.ReadOnlySpans(req.GetResourceSpans())
			_ = spans // to our span exporter's queue, without blocking
		},
		LogsFunc:    fwd.Logs,
		MetricsFunc: fwd.Metrics,
	})
	if err != nil {
		panic(err)
	}
	env := []string{
		"CLAUDE_CODE_ENABLE_TELEMETRY=1",
		"OTEL_LOGS_EXPORTER=otlp", "OTEL_METRICS_EXPORTER=otlp", "OTEL_TRACES_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + r.Endpoint(),
		"OTEL_EXPORTER_OTLP_HEADERS=" + r.Headers(),
	}
	_ = env // the child's environment
	// ... run the CLI, then:
	shutdownCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = r.Shutdown(shutdownCtx)
	_ = fwd.Shutdown(shutdownCtx)
	logs, points := fwd.Losses()
	fmt.Println(logs, points)
	// Output: 0 0
}
