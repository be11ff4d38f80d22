// Package clitel is the simulator's stand-in for Claude Code's own
// telemetry: what Claude Code 2.1.334 exports over OTLP/HTTP when its
// environment switches it on (/work/shared/CLI-TELEMETRY.md describes it,
// its corpus holds samples), so that `run --cli-telemetry.join` can be
// shown without the real CLI. It reads the variables the CLI reads
// (Parse), records the spans and log events of a session (Recorder) and
// exports them on goroutines of its own, never to stdout, which is the
// stream. It knows nothing of the stream: package simulate says what
// happened when.
package clitel

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Telemetry environment variables, as Claude Code reads them.
const (
	EnvEnableTelemetry   = "CLAUDE_CODE_ENABLE_TELEMETRY"         // "1": any telemetry at all
	EnvEnhancedTelemetry = "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA"  // "1": spans (with OTEL_TRACES_EXPORTER=otlp)
	EnvTracesExporter    = "OTEL_TRACES_EXPORTER"                 // "otlp": spans
	EnvLogsExporter      = "OTEL_LOGS_EXPORTER"                   // "otlp": log events
	EnvEndpoint          = "OTEL_EXPORTER_OTLP_ENDPOINT"          // base URL; /v1/traces and /v1/logs are appended
	EnvTracesEndpoint    = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"   // full URL, wins over EnvEndpoint for spans
	EnvLogsEndpoint      = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"     // full URL, wins over EnvEndpoint for logs
	EnvProtocol          = "OTEL_EXPORTER_OTLP_PROTOCOL"          // http/json or http/protobuf (default)
	EnvTracesProtocol    = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"   // per signal, wins over EnvProtocol
	EnvLogsProtocol      = "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL"     // per signal, wins over EnvProtocol
	EnvHeaders           = "OTEL_EXPORTER_OTLP_HEADERS"           // key=value,... sent with every export
	EnvTracesHeaders     = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"    // per signal, merged over EnvHeaders
	EnvLogsHeaders       = "OTEL_EXPORTER_OTLP_LOGS_HEADERS"      // per signal, merged over EnvHeaders
	EnvTracesInterval    = "OTEL_TRACES_EXPORT_INTERVAL"          // ms between exports during the run (default 5000)
	EnvLogsInterval      = "OTEL_LOGS_EXPORT_INTERVAL"            // ms between exports during the run (default 5000)
	EnvShutdownTimeout   = "CLAUDE_CODE_OTEL_SHUTDOWN_TIMEOUT_MS" // bound of the final flush (default 2000)
	EnvTraceparent       = "TRACEPARENT"                          // W3C parent of every interaction
)

// Protocols the simulator exports with (gRPC, which the CLI may also
// speak, is refused: nothing here needs it).
const (
	ProtocolJSON     = "http/json"
	ProtocolProtobuf = "http/protobuf"
)

// Defaults as the OTel specification and the CLI set them.
const (
	defaultEndpoint        = "http://localhost:4318"
	defaultInterval        = 5 * time.Second
	defaultShutdownTimeout = 2 * time.Second
)

// Settings is what the environment asks of the telemetry. The zero value exports nothing.
type Settings struct {
	// Spans is set when traces are on (telemetry, the beta switch and the
	// otlp traces exporter), and TRACEPARENT, if any, is sampled.
	Spans bool
	// Logs is set when log events are on (telemetry and the otlp logs
	// exporter).
	Logs bool
	// TracesURL and LogsURL are the full URLs posted to.
	TracesURL, LogsURL string
	// TracesProtocol and LogsProtocol are ProtocolJSON or ProtocolProtobuf.
	TracesProtocol, LogsProtocol string
	// TracesHeaders and LogsHeaders are sent with every export (e.g. the
	// token of run --cli-telemetry.join's receiver).
	TracesHeaders, LogsHeaders map[string]string
	// TraceID and ParentSpanID come from TRACEPARENT; zero without it.
	TraceID      [16]byte
	ParentSpanID [8]byte
	// TracesInterval and LogsInterval are how often queued records are
	// exported while the session runs.
	TracesInterval, LogsInterval time.Duration
	// ShutdownTimeout bounds the final flush.
	ShutdownTimeout time.Duration
}

// Enabled reports whether anything is exported.
func (t Settings) Enabled() bool { return t.Spans || t.Logs }

// HasParent reports whether TRACEPARENT gave a parent.
func (t Settings) HasParent() bool { return t.TraceID != [16]byte{} }

// Parse reads the telemetry switches through getenv (nil: none set). A malformed TRACEPARENT is ignored, as the CLI does; an endpoint
// that is not an http(s) URL, an unsupported protocol or a bad number is an
// error, so that a demo misconfigured fails at once instead of exporting
// nowhere.
func Parse(getenv func(string) string) (Settings, error) {
	var t Settings
	if getenv == nil || !truthy(getenv(EnvEnableTelemetry)) {
		return t, nil
	}
	t.Spans = truthy(getenv(EnvEnhancedTelemetry)) && hasOTLP(getenv(EnvTracesExporter))
	t.Logs = hasOTLP(getenv(EnvLogsExporter))
	if !t.Enabled() {
		return t, nil
	}
	var errs []error
	sampled := true
	if tp := strings.TrimSpace(getenv(EnvTraceparent)); tp != "" {
		tid, sid, flags, ok := parseTraceparent(tp)
		if ok {
			t.TraceID, t.ParentSpanID, sampled = tid, sid, flags&1 == 1
		}
	}
	// An unsampled parent: the CLI exports no span at all.
	t.Spans = t.Spans && sampled
	base := strings.TrimRight(getenv(EnvEndpoint), "/")
	if base == "" {
		base = defaultEndpoint
	}
	endpoint := func(specific, path string) string {
		if u := getenv(specific); u != "" {
			return u
		}
		return base + path
	}
	protocol := func(specific string) (string, error) {
		p := getenv(specific)
		if p == "" {
			p = getenv(EnvProtocol)
		}
		switch p {
		case "":
			return ProtocolProtobuf, nil
		case ProtocolJSON, ProtocolProtobuf:
			return p, nil
		}
		return "", fmt.Errorf("%s: protocol %q not supported (want %s or %s)", specific, p, ProtocolJSON, ProtocolProtobuf)
	}
	headers := func(specific string) (map[string]string, error) {
		h, err := ParseHeaders(getenv(EnvHeaders))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvHeaders, err)
		}
		more, err := ParseHeaders(getenv(specific))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", specific, err)
		}
		for k, v := range more { // the JS SDK's merge: per signal over generic
			h[k] = v
		}
		return h, nil
	}
	var err error
	if t.Spans {
		t.TracesURL = endpoint(EnvTracesEndpoint, "/v1/traces")
		errs = append(errs, checkURL(EnvTracesEndpoint, t.TracesURL))
		t.TracesProtocol, err = protocol(EnvTracesProtocol)
		errs = append(errs, err)
		t.TracesHeaders, err = headers(EnvTracesHeaders)
		errs = append(errs, err)
		t.TracesInterval, err = millis(getenv, EnvTracesInterval, defaultInterval)
		errs = append(errs, err)
	}
	if t.Logs {
		t.LogsURL = endpoint(EnvLogsEndpoint, "/v1/logs")
		errs = append(errs, checkURL(EnvLogsEndpoint, t.LogsURL))
		t.LogsProtocol, err = protocol(EnvLogsProtocol)
		errs = append(errs, err)
		t.LogsHeaders, err = headers(EnvLogsHeaders)
		errs = append(errs, err)
		t.LogsInterval, err = millis(getenv, EnvLogsInterval, defaultInterval)
		errs = append(errs, err)
	}
	t.ShutdownTimeout, err = millis(getenv, EnvShutdownTimeout, defaultShutdownTimeout)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return Settings{}, fmt.Errorf("telemetry: %w", err)
	}
	return t, nil
}

// Environ is the environment that turns every signal the
// simulator emits on, towards an OTLP/HTTP receiver at endpoint (a base
// URL such as http://127.0.0.1:4318) with protocol ("" = http/protobuf):
// what a demo adds to the simulator's environment. TRACEPARENT is not in
// it: the wrapper that starts the child sets that.
func Environ(endpoint, protocol string) []string {
	env := []string{EnvEnableTelemetry + "=1", EnvEnhancedTelemetry + "=1", EnvTracesExporter + "=otlp",
		EnvLogsExporter + "=otlp", EnvEndpoint + "=" + endpoint}
	if protocol != "" {
		env = append(env, EnvProtocol+"="+protocol)
	}
	return env
}

// ParseHeaders reads an OTLP headers variable as the OTel SDKs do:
// "key=value,key2=value2", each key and value percent-decoded and trimmed,
// empty entries skipped; an entry without "=" or a key that is empty is
// an error.
func ParseHeaders(v string) (map[string]string, error) {
	h := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("header %q: no '='", kv)
		}
		k, kerr := url.PathUnescape(strings.TrimSpace(k))
		val, verr := url.PathUnescape(strings.TrimSpace(val))
		if err := errors.Join(kerr, verr); err != nil || k == "" {
			return nil, fmt.Errorf("header %q: not key=value, percent-encoded", kv)
		}
		h[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return h, nil
}

// truthy reads a boolean switch the way the CLI does: "1" or "true".
func truthy(v string) bool {
	v = strings.ToLower(strings.TrimSpace(v))
	return v == "1" || v == "true"
}

// hasOTLP reports whether an exporter list (comma-separated) names otlp.
func hasOTLP(v string) bool {
	for _, e := range strings.Split(v, ",") {
		if strings.TrimSpace(e) == "otlp" {
			return true
		}
	}
	return false
}

func checkURL(name, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s: %q is not an http(s) URL", name, raw)
	}
	return nil
}

// millis reads a duration in milliseconds, def when unset.
func millis(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s: %q is not a positive number of milliseconds", name, v)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// parseTraceparent reads a W3C traceparent: version 00, non-zero ids.
func parseTraceparent(s string) (tid [16]byte, sid [8]byte, flags byte, ok bool) {
	p := strings.Split(s, "-")
	if len(p) != 4 || p[0] != "00" || len(p[1]) != 32 || len(p[2]) != 16 || len(p[3]) != 2 {
		return tid, sid, 0, false
	}
	f, err1 := hex.DecodeString(p[3])
	_, err2 := hex.Decode(tid[:], []byte(p[1]))
	_, err3 := hex.Decode(sid[:], []byte(p[2]))
	if err1 != nil || err2 != nil || err3 != nil || tid == [16]byte{} || sid == [8]byte{} {
		return [16]byte{}, [8]byte{}, 0, false
	}
	return tid, sid, f[0], true
}
