// Package egress is everything of one process that leaves over OTLP: our
// spans (to an OTLP endpoint over gRPC or HTTP, an OTLP/JSON file, the
// console), and, under run --join-cli-telemetry, the CLI's own spans, log
// records and metrics, forwarded. The endpoints and the OTEL_EXPORTER_OTLP_*
// environment are resolved here once, for every signal; each exporter has
// a bounded queue that drops and counts rather than block; failures are
// said by one reporter; losses are counted in one Loss type.
//
// It knows no sink: the traces sink makes spans with TracerProvider (its
// deterministic IDGenerator comes in through Config), and the join hands
// the CLI's telemetry to ForwardSpans, ForwardLogs and ForwardMetrics as
// the OTLP protobuf it received (internal/otlpconv converts it).
//
// # Endpoints
//
// Each signal (traces, logs, metrics) finds its endpoint by the first rule
// that applies (resolve):
//
//  1. Config.Endpoint (--otlp.endpoint): a URL or host:port (plaintext).
//     For spans over HTTP, a URL without a path gets /v1/traces and any
//     other path is used as is. For logs and metrics over HTTP, a path
//     ending in /v1/traces has that replaced by /v1/logs or /v1/metrics;
//     any other path (none included) is a base and gets /v1/logs or
//     /v1/metrics appended. gRPC uses the host.
//  2. OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT, then OTEL_EXPORTER_OTLP_ENDPOINT:
//     left to the exporter, which reads them itself (the per-signal one as
//     is, the general one with /v1/<signal> appended for HTTP). They must be
//     http or https URLs.
//  3. For logs and metrics, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, derived as
//     in rule 1, so that one configured traces endpoint is enough for all
//     three signals.
//  4. Otherwise that signal does not leave over OTLP.
//
// "none" where a rule applies turns the signal's OTLP export off. The
// protocol is Config.Protocol, else OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL,
// else OTEL_EXPORTER_OTLP_PROTOCOL, else grpc; the forwarded signals take
// the spans' protocol, to keep the signals together. Headers, TLS,
// compression and timeouts are read by the SDK's exporters from
// OTEL_EXPORTER_OTLP[_<SIGNAL>]_* in the process environment; a malformed
// header list is refused here (the SDK would drop it and export without
// credentials), and our queue's bound on one export is raised to the
// exporter's own timeout (exportTimeout).
//
// # Spans
//
// Ended spans go through a bounded queue per exporter (batcher) that
// drops (and counts) rather than block the pipeline; every export runs
// under a timeout, and Shutdown flushes under the caller's deadline and
// never waits past it, nor long for a collector that has already failed
// (FailedCollectorWait).
//
// # Forwarding
//
// The CLI's log records and metrics go through the OTel Go SDK's own OTLP
// exporters (otlploggrpc/otlploghttp, otlpmetricgrpc/otlpmetrichttp), so
// that they take the same endpoint, headers, TLS, compression and timeout
// settings as our spans. Log records are emitted through one sdk/log
// LoggerProvider per distinct resource (the CLI's resource:
// service.name=claude-code ...), with their timestamps, severity, body,
// attributes, event name and trace and span id, so that they keep their
// correlation with the CLI's spans. Metrics are converted to metricdata
// and exported with their temporality (Claude Code sends delta). Both go
// through a bounded queue and one export goroutine: the receiver's handler
// never blocks, and what is dropped or fails is counted (ForwardLost).
//
// # Failures and losses
//
// A failing exporter, of spans or of a forwarded signal, is said on
// Config.Logger as it fails: the first failure at warn with the endpoint,
// the protocol and the cause in words (Cause), then at most one line per
// ReportEvery, and at info that exports succeed again. After Shutdown,
// Losses says per span exporter and per forwarded signal how much was not
// delivered, where and why, one Loss each ("7 spans dropped, not delivered
// to http://collector:4317 (grpc): …").
package egress
