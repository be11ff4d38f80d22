// Package exposition gets a prometheus.Gatherer out of the process: its one
// job is exposure, never what the metrics mean.
//
// Four ways out:
//
//   - Listen/Server.Serve: an HTTP server through exporter-toolkit's web
//     package (TLS and basic auth from a web config file, systemd socket
//     activation) answering the telemetry path (/metrics by default;
//     OpenMetrics negotiated, so exemplars show; parallel scrapes bounded),
//     /healthz, /readyz (a Ready func says why not), an optional page at
//     "/" exactly (cbc-otel's runs page) and, with Options.EnablePprof, the
//     Go runtime's profiles under /debug/pprof/. Every route sits behind the
//     same web config; anything else is 404. DefaultAddr is cbc-otel's
//     documented address, 127.0.0.1:9478 (loopback; 9464 is Claude Code's).
//   - WriteFile: the text exposition, written atomically (node_exporter's
//     textfile collector, a CI artifact).
//   - Push: a PUT to a Pushgateway, for batch jobs gone before any scrape;
//     a push the gateway did not take is a *PushError. WithPrefix leaves
//     out the families (go_*, process_*) that mean nothing once the
//     process has exited.
//   - Cumulative: the totals across restarts. It adds the counters and
//     histograms saved by the previous process (SetBase) to the live ones,
//     series by series (classic and native buckets merged), so that a
//     restarted sidecar shows totals that never go down; Totals is what the
//     next process needs. Saving and restoring them is the sink's business
//     (metrics.Checkpoint, which knows a Cumulative only by its methods).
//
// It imports nothing of cbc-otel: the sinks fill a registry, the command
// wires the registry to these outputs.
package exposition
