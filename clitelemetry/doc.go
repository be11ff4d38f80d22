// Package clitelemetry receives the OpenTelemetry telemetry the wrapped CLI
// emits itself (Claude Code with CLAUDE_CODE_ENABLE_TELEMETRY=1 and
// OTEL_EXPORTER_OTLP_ENDPOINT pointed at us) and forwards it.
//
// # Receiver
//
// Listen starts an OTLP/HTTP server on loopback (127.0.0.1, any free port
// by default; Receiver.Endpoint is the URL to give the CLI) serving POST
// /v1/traces, /v1/logs and /v1/metrics in binary protobuf and in OTLP/JSON
// (ids in hex, enums as ints or names, int64 as strings or numbers), gzip or
// not. Each request is decoded into the go.opentelemetry.io/proto/otlp
// types, its ids checked, and handed to a Handler synchronously before the
// answer. It is bounded: a body (compressed and decompressed) is at most
// MaxBodyBytes, at most MaxConcurrent requests are read and decoded at
// once, and a request over that bound waits at most BusyWait for a slot
// before it is answered 503: the CLI waits for our answer before it can
// exit, so it is never kept long. Answers follow the OTLP/HTTP spec: 200
// with an empty Export*ServiceResponse, 400 with a google.rpc.Status, 413,
// 415, 405, 404, 503 with Retry-After. Stats counts requests by signal and
// outcome and the items received.
//
// Loopback is every local process's: each Receiver has a secret token
// (ReceiverConfig.Token, else 32 random bytes), which the CLI gets in its
// OTLP headers variables (Receiver.Headers). A request without it, on any
// path, is answered 401 before anything else, compared in constant time,
// and counted by reason (Stats.Unauthorized).
//
// It is a small receiver of our own rather than the OpenTelemetry
// Collector's otlpreceiver: that one pulls in the Collector's component
// framework, pdata and their dependencies, many times this package, for
// three POST handlers.
//
// # Forwarding
//
// A Forwarder sends log records and metrics on through the OTel Go SDK's
// own OTLP exporters (otlploggrpc/otlploghttp, otlpmetricgrpc/
// otlpmetrichttp), so that they take the same endpoint, headers, TLS,
// compression and timeout settings (OTEL_EXPORTER_OTLP_*) as our own trace
// exporter, read by the SDK in the same way. Log records are emitted
// through one sdk/log LoggerProvider per distinct resource (the CLI's
// resource: service.name=claude-code ...), with their timestamps,
// severity, body, attributes, event name and trace and span id, so that
// they keep their correlation with the CLI's spans. Metrics are converted
// to metricdata and exported with their temporality (Claude Code sends
// delta). Both go through a bounded queue and one export goroutine: the
// Handler never blocks, and what is dropped or fails is counted
// (Forwarder.Stats, Forwarder.Losses).
//
// Traces are not forwarded here: ReadOnlySpans converts them into SDK
// spans for our own trace exporter pipeline, which may join and amend them.
//
// # Endpoints
//
// Each of logs and metrics finds its endpoint by the first rule that
// applies:
//
//  1. ForwarderConfig.Endpoint (the same flag as our traces endpoint): a URL
//     or host:port. For http/protobuf a path ending in /v1/traces has that
//     replaced by /v1/logs or /v1/metrics; any other path (none included)
//     is a base and gets /v1/logs or /v1/metrics appended. gRPC uses the
//     host. "none" forwards nothing.
//  2. OTEL_EXPORTER_OTLP_LOGS_ENDPOINT / OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
//     then OTEL_EXPORTER_OTLP_ENDPOINT: left to the exporter, which reads
//     them itself (the per-signal one as is, the general one with
//     /v1/logs or /v1/metrics appended for HTTP).
//  3. OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, derived as in rule 1, so that
//     one configured traces endpoint is enough for all three signals.
//  4. Otherwise that signal is not forwarded.
//
// The protocol is ForwarderConfig.Protocol, else
// OTEL_EXPORTER_OTLP_{LOGS,METRICS}_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL,
// else grpc; callers pass our traces protocol to keep the signals together.
package clitelemetry
