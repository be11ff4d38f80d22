// Package clitelemetry receives the OpenTelemetry telemetry the wrapped CLI
// emits itself (Claude Code with CLAUDE_CODE_ENABLE_TELEMETRY=1 and
// OTEL_EXPORTER_OTLP_ENDPOINT pointed at us); package egress sends it on.
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
// # Sending it on
//
// The receiver only receives and decodes. The join hands what it received
// to package egress, which converts it (internal/otlpconv) and forwards it
// to where our own spans go; Count* count what a request holds.
package clitelemetry
