package main

import (
	"fmt"
	"io"
	"slices"
)

// envVar is an environment variable a subcommand reads. The environment
// table of docs/cli.md lists the same (TestCLIDocAgreesWithHelp).
type envVar struct {
	name string
	cmds []string // the subcommands that read it
	what string
}

// telemetryCmds are the subcommands that export telemetry.
var telemetryCmds = []string{"run", "demo", "replay", "serve"}

// envVars lists, in the order -h prints them, every variable cbc-otel (or
// the OTel SDK under it) reads. The OTLP variables also exist per signal
// (OTEL_EXPORTER_OTLP_TRACES_*), which take precedence.
var envVars = []envVar{
	{"OTEL_TRACES_EXPORTER", telemetryCmds, "otlp, none or console when --traces.exporter is not given"},
	{"OTEL_EXPORTER_OTLP_ENDPOINT", telemetryCmds, "OTLP endpoint URL when --otlp.endpoint is not given"},
	{"OTEL_EXPORTER_OTLP_PROTOCOL", telemetryCmds, "grpc or http/protobuf when --otlp.protocol is not given"},
	{"OTEL_EXPORTER_OTLP_HEADERS", telemetryCmds, "headers of every export (key=value,...), read by the SDK"},
	{"OTEL_EXPORTER_OTLP_CERTIFICATE", telemetryCmds, "CA certificate of the OTLP endpoint, read by the SDK"},
	{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", telemetryCmds, "client certificate (mTLS), read by the SDK"},
	{"OTEL_EXPORTER_OTLP_CLIENT_KEY", telemetryCmds, "client key (mTLS), read by the SDK"},
	{"OTEL_EXPORTER_OTLP_COMPRESSION", telemetryCmds, "gzip or none, read by the SDK"},
	{"OTEL_EXPORTER_OTLP_TIMEOUT", telemetryCmds, "export timeout in ms, read by the SDK"},
	{"OTEL_EXPORTER_OTLP_INSECURE", telemetryCmds, "true: plaintext gRPC to an endpoint without a scheme, read by the SDK"},
	{"OTEL_SERVICE_NAME", telemetryCmds, "service.name of the spans (default cbc-otel)"},
	{"OTEL_RESOURCE_ATTRIBUTES", telemetryCmds, "more resource attributes (key=value,...)"},
	{"TRACEPARENT", []string{"run", "demo", "replay"}, "W3C trace context: the workflow spans become its children (serve ignores its own)"},
	{"TRACESTATE", []string{"run", "demo", "replay"}, "W3C trace state that goes with TRACEPARENT"},
	{"GITHUB_STEP_SUMMARY", []string{"run"}, "when --summary.step-file is not given: append a Markdown table of the runs seen to this file (GitHub Actions sets it)"},
	{"GITHUB_OUTPUT", []string{"run"}, "when --summary.step-output is not given: append the session's cost, tokens and runs by status to this file as step outputs (GitHub Actions sets it)"},
	{"GOMEMLIMIT", []string{"run", "serve"}, "Go's soft memory limit (run's default: 16MiB, 24MiB with an OTLP endpoint; serve's: 32MiB + --follow.memory-per-file × --follow.max-files)"},
	{"GOGC", []string{"run", "replay"}, "Go's GC target (default 400 for run and replay)"},
}

// writeEnvUsage prints the variables cmd reads, for its -h.
func writeEnvUsage(w io.Writer, cmd string) {
	first := true
	for _, v := range envVars {
		if !slices.Contains(v.cmds, cmd) {
			continue
		}
		if first {
			fmt.Fprint(w, "\nenvironment:\n")
			first = false
		}
		fmt.Fprintf(w, "  %s\n    \t%s\n", v.name, v.what)
	}
}
