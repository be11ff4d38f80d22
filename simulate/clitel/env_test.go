package clitel

import (
	"maps"
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

// TestParseHeaders: the OTLP headers variables as the SDKs read them, and
// Parse's merge of the generic one under the per-signal ones.
func TestParseHeaders(t *testing.T) {
	for in, want := range map[string]map[string]string{
		"":                                 {},
		"authorization=Bearer%20tok":       {"authorization": "Bearer tok"},
		" a = 1 ,b=x%2Cy,, c=":             {"a": "1", "b": "x,y", "c": ""},
		"x-api-key=s3cret%20one,x-team=ag": {"x-api-key": "s3cret one", "x-team": "ag"},
	} {
		got, err := ParseHeaders(in)
		if err != nil || !maps.Equal(got, want) {
			t.Errorf("ParseHeaders(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"novalue", "=v", "a=%zz"} {
		if h, err := ParseHeaders(bad); err == nil {
			t.Errorf("ParseHeaders(%q) = %v, no error", bad, h)
		}
	}
	env := envOf(map[string]string{EnvEnableTelemetry: "1", EnvEnhancedTelemetry: "1", EnvTracesExporter: "otlp", EnvLogsExporter: "otlp",
		EnvHeaders: "x-team=agents,authorization=Bearer%20generic", EnvTracesHeaders: "authorization=Bearer%20traces"})
	set, err := Parse(env)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"x-team": "agents", "authorization": "Bearer traces"}; !maps.Equal(set.TracesHeaders, want) {
		t.Errorf("traces headers %v, want %v", set.TracesHeaders, want)
	}
	if want := map[string]string{"x-team": "agents", "authorization": "Bearer generic"}; !maps.Equal(set.LogsHeaders, want) {
		t.Errorf("logs headers %v, want %v", set.LogsHeaders, want)
	}
	if _, err := Parse(envOf(map[string]string{EnvEnableTelemetry: "1", EnvLogsExporter: "otlp", EnvLogsHeaders: "broken"})); err == nil {
		t.Error("a malformed per-signal headers variable: no error")
	}
}
