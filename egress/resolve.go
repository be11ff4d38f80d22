package egress

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
)

// Signals, as they appear in the OTEL_EXPORTER_OTLP_<SIGNAL>_* variables
// (upper case) and in the HTTP paths /v1/<signal> (lower case).
const (
	signalTraces  = "traces"
	signalLogs    = "logs"
	signalMetrics = "metrics"
)

// otlpVar is the variable OTEL_EXPORTER_OTLP_<SIGNAL>_<name>, or the
// general OTEL_EXPORTER_OTLP_<name> when signal is "".
func otlpVar(signal, name string) string {
	if signal == "" {
		return "OTEL_EXPORTER_OTLP_" + name
	}
	return "OTEL_EXPORTER_OTLP_" + strings.ToUpper(signal) + "_" + name
}

// otlpEndpoint is where one signal goes, and which rule said so.
type otlpEndpoint struct {
	url *url.URL
	// flag: from Config.Endpoint, passed to the exporter as an option (over
	// the environment). Otherwise the exporter reads it itself.
	flag bool
	// perSignal: from the signal's own variable
	// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT for spans), whose HTTP path the
	// exporter uses as is.
	perSignal bool
	// fromTraces: a log or metric endpoint derived from
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (rule 3), passed as an option.
	fromTraces bool
}

// resolve is the one endpoint rule of every signal, the first that
// applies:
//
//  1. flagValue (Config.Endpoint): a URL or host:port (plaintext).
//  2. OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT, then OTEL_EXPORTER_OTLP_ENDPOINT,
//     from the process environment, which the exporter reads itself; they
//     must be http or https URLs (the SDK would read host:port as a URL
//     with scheme "host", or not at all).
//  3. For logs and metrics, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, so that one
//     configured traces endpoint is enough for all three signals.
//
// "none" where a rule applies means no endpoint. It returns nil when there
// is none; an endpoint that is set but invalid comes back non-nil with the
// error.
func resolve(flagValue, signal string) (*otlpEndpoint, error) {
	invalid := &otlpEndpoint{}
	if strings.TrimSpace(flagValue) != "" {
		if NoEndpoint(flagValue) {
			// An explicit "none" wins over the environment and disables
			// OTLP, leaving a --traces-file alone.
			return nil, nil
		}
		u, err := parseEndpoint(flagValue)
		if err != nil {
			return invalid, err
		}
		return &otlpEndpoint{url: u, flag: true}, nil
	}
	names := []string{otlpVar(signal, "ENDPOINT"), otlpVar("", "ENDPOINT")}
	if signal != signalTraces {
		names = append(names, otlpVar(signalTraces, "ENDPOINT"))
	}
	for i, name := range names {
		v := strings.TrimSpace(os.Getenv(name))
		if v == "" {
			continue
		}
		if NoEndpoint(v) {
			return nil, nil
		}
		u, err := url.Parse(v)
		if err != nil {
			return invalid, fmt.Errorf("%s: not a URL (want http://host:port or https://host:port)", name)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return invalid, fmt.Errorf("%s %q: want an http:// or https:// URL with a host (host:port alone is for --otlp.endpoint)", name, u.Redacted())
		}
		return &otlpEndpoint{url: u, perSignal: i == 0, fromTraces: i == 2}, nil
	}
	return nil, nil
}

// exportURL is where the exporter of signal sends over protocol, and
// whether that URL is to be passed to it (else it reads its variables
// itself and the URL only describes what it does). HTTP paths: a flag's
// URL for spans gets /v1/traces when it has no path, and is used as is
// otherwise; a flag's or the traces variable's URL for logs and metrics
// has a path ending in /v1/traces replaced by /v1/<signal>, and any other
// path (none included) is a base that gets /v1/<signal> appended; the
// signal's own variable is used as is, the general one is a base. gRPC
// uses the URL as it is.
func (ep *otlpEndpoint) exportURL(protocol, signal string) (u url.URL, pass bool) {
	u, pass = *ep.url, ep.flag || ep.fromTraces
	if protocol != ProtocolHTTP {
		return u, pass
	}
	switch {
	case ep.flag && signal == signalTraces:
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
	case pass:
		base := strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1/traces")
		u.Path = path.Join("/", base, "/v1/"+signal)
		u.RawPath = ""
	case ep.perSignal:
		if u.Path == "" {
			u.Path = "/"
		}
	default:
		u.Path = path.Join("/", u.Path, "v1/"+signal)
	}
	return u, pass
}

// describe is where an exporter sends, for people: without credentials,
// and for gRPC without the path it ignores.
func describe(u url.URL, protocol string) string {
	if protocol == ProtocolGRPC {
		return fmt.Sprintf("%s://%s", u.Scheme, u.Host)
	}
	return u.Redacted()
}

// signalEndpoint is where the exporter of a log or metric signal sends:
// the URL to pass it ("" when it is to read its own variables), and
// whether the signal leaves at all.
func signalEndpoint(flagValue, protocol, signal string) (string, bool, error) {
	ep, err := resolve(flagValue, signal)
	if err != nil || ep == nil {
		return "", false, err
	}
	u, pass := ep.exportURL(protocol, signal)
	if !pass {
		return "", true, nil
	}
	return u.String(), true, nil
}

// resolveProtocol is the protocol of a signal: configured, else
// OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL,
// through env; grpc when none says. "http" is read as http/protobuf.
func resolveProtocol(configured, signal string, env func(string) string) (string, error) {
	p := firstNonEmpty(configured, env(otlpVar(signal, "PROTOCOL")), env(otlpVar("", "PROTOCOL")), ProtocolGRPC)
	switch p {
	case ProtocolGRPC:
		return ProtocolGRPC, nil
	case ProtocolHTTP, "http":
		return ProtocolHTTP, nil
	}
	return "", fmt.Errorf("otlp protocol %q: want grpc or http/protobuf", p)
}

// checkSignalHeaders refuses a malformed header list of a signal: the SDK
// drops a malformed entry with a log line and exports without it, i.e.
// without credentials.
func checkSignalHeaders(signal string) error {
	for _, name := range []string{otlpVar(signal, "HEADERS"), otlpVar("", "HEADERS")} {
		if err := checkHeaders(os.Getenv(name)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// exportTimeout is the bound of our queue on one export of a signal:
// configured, the configured one; else DefaultExportTimeout, or the
// exporter's own timeout when that is longer. Our bound must not cut short
// what OTEL_EXPORTER_OTLP[_<SIGNAL>]_TIMEOUT allows, and the SDK cannot say
// what it read, so the variables are read here as the SDK reads them
// (milliseconds, the per-signal one first, an invalid or negative value
// ignored). 0 (no timeout in the SDK) still gets the default bound: no
// export runs unbounded.
func exportTimeout(configured time.Duration, signal string) time.Duration {
	if configured > 0 {
		return configured
	}
	for _, name := range []string{otlpVar(signal, "TIMEOUT"), otlpVar("", "TIMEOUT")} {
		if ms, err := strconv.Atoi(strings.TrimSpace(os.Getenv(name))); err == nil && ms >= 0 {
			return max(DefaultExportTimeout, time.Duration(ms)*time.Millisecond)
		}
	}
	return DefaultExportTimeout
}

// CheckEndpoint reports whether s is an OTLP endpoint New accepts in
// Config.Endpoint: an http or https URL, host:port, or "none" (no OTLP
// export).
func CheckEndpoint(s string) error {
	if NoEndpoint(s) {
		return nil
	}
	_, err := parseEndpoint(s)
	return err
}

// NoEndpoint reports whether s is the endpoint "none" (any case), which
// turns OTLP export off.
func NoEndpoint(s string) bool { return strings.EqualFold(strings.TrimSpace(s), ExporterNone) }

// parseEndpoint accepts a URL or host:port (read as plaintext http://).
func parseEndpoint(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("otlp endpoint: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("otlp endpoint %q: scheme must be http or https", u.Redacted())
	}
	if u.Host == "" {
		return nil, fmt.Errorf("otlp endpoint %q: no host", u.Redacted())
	}
	return u, nil
}

// checkHeaders applies the SDK's rules for OTEL_EXPORTER_OTLP_HEADERS
// (key=value,... with token keys and URL-encoded values) and reports the
// first entry the SDK would drop. Blank entries are skipped, as they lose
// nothing. Values are never echoed: headers carry credentials.
func checkHeaders(s string) error {
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return errors.New("malformed entry (want key=value)")
		}
		if strings.IndexFunc(k, func(r rune) bool { return !isTokenChar(r) }) >= 0 {
			return fmt.Errorf("malformed entry: %q is not a valid header name", k)
		}
		if _, err := url.PathUnescape(v); err != nil {
			return fmt.Errorf("bad escape in the value of %q", k)
		}
	}
	return nil
}

// isTokenChar reports whether r may appear in an HTTP header name (RFC 9110
// token).
func isTokenChar(r rune) bool {
	return r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r))
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
