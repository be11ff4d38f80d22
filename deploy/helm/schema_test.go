package helm_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSchemaRejects: values.schema.json (and the template's own checks for
// combinations) refuse bad values, each with an error naming the problem.
func TestSchemaRejects(t *testing.T) {
	cases := []struct {
		name, values, wantErr string
	}{
		{"unknown top-level key", "replicas: 2\n", "replicas"},
		{"unknown nested key", "sidecar:\n  bogus: 1\n", "bogus"},
		{"wrong type: port as string", "sidecar:\n  port: \"9478\"\n", "/sidecar/port"},
		{"wrong type: native as string", "sidecar:\n  native: \"yes\"\n", "/sidecar/native"},
		{"wrong type: command as string", "workload:\n  command: cbc -p hi\n", "/workload/command"},
		{"port out of range", "sidecar:\n  port: 70000\n", "/sidecar/port"},
		{"bad enum: workload kind", "workload:\n  kind: StatefulSet\n", "/workload/kind"},
		{"bad enum: otlp protocol", "otlp:\n  protocol: http\n", "/otlp/protocol"},
		{"bad enum: stopped policy", "prometheusRule:\n  stopped: ignored\n", "/prometheusRule/stopped"},
		{"bad enum: log level", "sidecar:\n  logLevel: verbose\n", "/sidecar/logLevel"},
		{"bad enum: tracing", "grafanaDashboards:\n  tracing: zipkin\n", "/grafanaDashboards/tracing"},
		{"negative cpu request", "sidecar:\n  resources:\n    requests:\n      cpu: -1\n", "/sidecar/resources/requests/cpu"},
		{"negative memory limit", "workload:\n  resources:\n    limits:\n      memory: -64Mi\n", "/workload/resources/limits/memory"},
		{"bad quantity", "install:\n  resources:\n    limits:\n      memory: lots\n", "/install/resources/limits/memory"},
		{"unknown resource key", "sidecar:\n  resources:\n    request:\n      cpu: 1\n", "request"},
		{"negative replicas", "workload:\n  deployment:\n    replicas: -1\n", "/workload/deployment/replicas"},
		{"empty command", "workload:\n  command: []\n", "/workload/command"},
		{"target out of range", "prometheusRule:\n  target: 1.5\n", "/prometheusRule/target"},
		{"target zero", "prometheusRule:\n  target: 0\n", "/prometheusRule/target"},
		{"bad duration", "sidecar:\n  idleTimeout: 5 minutes\n", "/sidecar/idleTimeout"},
		{"zero duration", "sidecar:\n  pollInterval: 0s\n", "/sidecar/pollInterval"},
		{"bad digest", "image:\n  digest: latest\n", "/image/digest"},
		{"bad secret name", "webConfig:\n  existingSecret: Not_A_Name\n", "/webConfig/existingSecret"},
		{"bad group-by label", "prometheusRule:\n  groupBy: [\"name space\"]\n", "/prometheusRule/groupBy"},
		{"wrapper arg not a flag", "workload:\n  wrapper:\n    args: [cbc]\n", "/workload/wrapper/args"},
		{"wrong type: joinCliTelemetry as string", "workload:\n  wrapper:\n    joinCliTelemetry: \"yes\"\n", "/workload/wrapper/joinCliTelemetry"},
		{"env without name", "workload:\n  env:\n    - value: x\n", "/workload/env"},
		{"unknown securityContext field", "sidecar:\n  securityContext:\n    runAsRoot: true\n", "runAsRoot"},
		{"bad seccomp type", "podSecurityContext:\n  seccompProfile:\n    type: Default\n", "/podSecurityContext/seccompProfile/type"},
		// Combinations, refused by the templates.
		{"plain sidecar with a Job", "sidecar:\n  native: false\n", "sidecar.native=false works only with workload.kind=Deployment"},
		{"both monitors", "serviceMonitor:\n  enabled: true\npodMonitor:\n  enabled: true\n", "choose one"},
		{"TLS without a web config", "webConfig:\n  tls: true\n", "need webConfig.existingSecret"},
		{"headers twice", "otlp:\n  headers:\n    a: b\n  existingSecret:\n    name: s\n    headersKey: h\n", "give the headers one way"},
	}
	dir := t.TempDir()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".yaml")
			if err := os.WriteFile(f, []byte(c.values), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := render(t, []string{f})
			if err == nil {
				t.Fatalf("case %d: accepted:\n%s", i, c.values)
			}
			if !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("error does not mention %q:\n%v", c.wantErr, err)
			}
		})
	}
}
