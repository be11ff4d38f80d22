package clitel

import (
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// TestParse covers the endpoint and protocol rules.
func TestParse(t *testing.T) {
	on := map[string]string{EnvEnableTelemetry: "1", EnvEnhancedTelemetry: "1", EnvTracesExporter: "otlp", EnvLogsExporter: "console,otlp"}
	with := func(kv ...string) func(string) string {
		m := map[string]string{}
		for k, v := range on {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return envOf(m)
	}
	set, err := Parse(with(EnvEndpoint, "http://127.0.0.1:4318/", EnvTracesEndpoint, "http://other:1/x", EnvLogsProtocol, ProtocolJSON))
	if err != nil {
		t.Fatal(err)
	}
	if set.TracesURL != "http://other:1/x" || set.LogsURL != "http://127.0.0.1:4318/v1/logs" ||
		set.TracesProtocol != ProtocolProtobuf || set.LogsProtocol != ProtocolJSON || set.ShutdownTimeout != 2*time.Second || set.HasParent() {
		t.Errorf("got %+v", set)
	}
	set, err = Parse(with(EnvTraceparent, "00-zz-1-01"))
	if err != nil || !set.Spans || set.HasParent() {
		t.Errorf("a malformed TRACEPARENT must be ignored: %+v %v", set, err)
	}
	for _, bad := range [][]string{{EnvProtocol, "grpc"}, {EnvEndpoint, "127.0.0.1:4318"}, {EnvShutdownTimeout, "soon"}} {
		if _, err := Parse(with(bad...)); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
