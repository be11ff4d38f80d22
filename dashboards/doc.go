// Package dashboards generates cbc-otel's Grafana dashboards, its
// Prometheus rules (the workflow-success SLO with multiwindow
// multi-burn-rate alerts, and operational alerts) and a sloth spec of the
// same SLO, all from Go so that their parameters (the SLO target above
// all) stay in one place.
//
// The committed renderings (overview.json, exporter-health.json,
// rules/cbc-otel.rules.yml, slo/sloth.yml, the panel table of README.md,
// the monitoring mixin mixin/{alerts.yaml,rules.yaml,dashboards_out/}
// rendered from mixin/config.yaml, and the budget tests' recording rules
// rules/tests/budgets/rules.yml rendered from the config beside them) are
// written by
//
//	go generate ./dashboards
//
// and the tests fail when they differ from what the code generates. The
// tests also run promtool (check rules, test rules), check every metric
// name and label used by a query or rule against the exporter's real
// registry (package metrics), and round-trip the dashboard JSON through
// the Grafana Foundation SDK's strict decoder.
//
// The dashboards use Grafana's classic JSON model (package dashboard of
// the SDK), which the SDK marks deprecated in favour of dashboardv2, and
// staticcheck's SA1019 is silenced where the two deprecated names are
// used. That is on purpose: dashboardv2 is another schema (elements and
// layouts in a Kubernetes-style resource) that Grafana 11 cannot import
// and Grafana 12 only behind feature toggles, while the README promises
// import into Grafana 11 and 12 and the Helm chart provisions these files
// through the Grafana sidecar. Moving to v2 rewrites every committed
// dashboard and is a decision of its own, not a lint fix.
package dashboards

//go:generate go run ./gen
