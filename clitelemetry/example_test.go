package clitelemetry_test

import (
	"context"
	"fmt"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"

	"github.com/cbc-otel/cbc-otel/clitelemetry"
	"github.com/cbc-otel/cbc-otel/egress"
)

// Wiring: the receiver hands spans, logs and metrics to the process's
// egress, which converts and queues them without blocking; the CLI is
// pointed at r.Endpoint() with r.Headers(), its token, which every
// request must carry.
func Example() {
	ctx := context.Background()
	out, err := egress.New(ctx, egress.Config{Endpoint: "none", Forward: true})
	if err != nil {
		panic(err)
	}
	r, err := clitelemetry.Listen(clitelemetry.ReceiverConfig{}, clitelemetry.Handlers{
		TracesFunc: func(_ context.Context, req *coltracepb.ExportTraceServiceRequest) {
			out.ForwardSpans(req.GetResourceSpans())
		},
		LogsFunc: func(_ context.Context, req *collogspb.ExportLogsServiceRequest) {
			out.ForwardLogs(req)
		},
		MetricsFunc: func(_ context.Context, req *colmetricspb.ExportMetricsServiceRequest) {
			out.ForwardMetrics(req)
		},
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
	_ = out.Shutdown(shutdownCtx)
	fmt.Println(len(out.Losses()), "losses")
	// Output: 0 losses
}
