// Package otlpconv converts OTLP protobuf messages (what the CLI-telemetry
// receiver decodes) into the OTel Go SDK's records (what the SDK's
// exporters take), so that the CLI's own spans, log records and metrics
// can leave through our exporters: ReadOnlySpans, LogRecord,
// ResourceMetrics, and the values, resources and scopes they share. It
// knows nothing of ours; egress is its user.
package otlpconv
