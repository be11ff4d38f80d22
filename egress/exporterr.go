package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultReportEvery is the most often a failing exporter is reported
// after its first failure: a collector that is down for an hour must not
// bury the wrapped CLI's own stderr under thousands of lines.
const DefaultReportEvery = 30 * time.Second

// maxExcerpt bounds the part of a server's answer (an HTTP body, a gRPC
// status message) quoted in a cause: enough to read "invalid API key",
// never a whole HTML error page.
const maxExcerpt = 160

// Cause describes in words why an export (or a push) failed: connection
// refused, DNS, TLS, a timeout, an HTTP status with an excerpt of the body,
// a gRPC status code and message. The words never include the endpoint
// (the caller says where) nor anything but a bounded, sanitized excerpt of
// what the server answered.
func Cause(err error) string {
	if err == nil {
		return ""
	}
	w, specific := words(err)
	if specific && errors.Is(err, context.DeadlineExceeded) {
		// The exporter retried until its time ran out: the last attempt's
		// error is the one worth reading.
		return "timed out retrying; last error: " + w
	}
	return w
}

// words classifies err; specific is false when all it could say is that
// time ran out or the error's own (sanitized) text.
func words(err error) (w string, specific bool) {
	// A gRPC status first: it wraps the transport's failure in its message.
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		if s := se.GRPCStatus(); s != nil && s.Code() != codes.OK {
			msg := s.Message()
			if t, ok := transportWords(msg); ok {
				msg = t
			} else {
				msg = excerpt(msg)
			}
			return "gRPC " + s.Code().String() + ": " + msg, true
		}
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return "connection refused", true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		why := "cannot resolve"
		if dns.IsNotFound {
			why = "no such host"
		} else if dns.IsTimeout {
			why = "lookup timed out"
		}
		return fmt.Sprintf("DNS: %s %s", why, excerpt(dns.Name)), true
	}
	if w, ok := tlsWords(err); ok {
		return w, true
	}
	text := err.Error()
	if w, ok := httpStatusWords(text); ok {
		return w, true
	}
	if t, ok := transportWords(text); ok {
		return t, true
	}
	if errors.Is(err, syscall.ECONNRESET) {
		return "connection reset by the endpoint", true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "connection closed by the endpoint", true
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return "timeout: no answer in time", false
	}
	if errors.Is(err, context.Canceled) {
		return "cancelled", false
	}
	return excerpt(strings.TrimPrefix(text, "traces export: ")), false
}

// tlsWords recognises the TLS failures of Go's crypto/tls and crypto/x509.
func tlsWords(err error) (string, bool) {
	var (
		ua   x509.UnknownAuthorityError
		host x509.HostnameError
		inv  x509.CertificateInvalidError
		rec  tls.RecordHeaderError
		cv   *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &ua):
		return "TLS: certificate signed by unknown authority", true
	case errors.As(err, &host):
		return "TLS: " + strings.TrimPrefix(host.Error(), "x509: "), true
	case errors.As(err, &inv):
		return "TLS: " + strings.TrimPrefix(inv.Error(), "x509: "), true
	case errors.As(err, &cv):
		return "TLS: certificate not verified: " + excerpt(strings.TrimPrefix(cv.Err.Error(), "x509: ")), true
	case errors.As(err, &rec):
		return "TLS: the endpoint does not speak TLS (try http://)", true
	}
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return "TLS: the endpoint does not speak TLS (try http://)", true
	}
	return "", false
}

// transportWords recognises a transport failure in an error's text: gRPC
// reports them only as text inside an Unavailable status.
func transportWords(msg string) (string, bool) {
	// gRPC quotes the transport's error: desc = "transport: ...".
	msg = strings.TrimRight(msg, `" `)
	switch {
	case strings.Contains(msg, "connection refused"):
		return "connection refused", true
	case strings.Contains(msg, "no such host"), strings.Contains(msg, "produced zero addresses"):
		host := ""
		if m := lookupRE.FindStringSubmatch(msg); m != nil {
			host = " " + excerpt(m[1])
		}
		return "DNS: no such host" + host, true
	case strings.Contains(msg, "server gave HTTP response to HTTPS client"), strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "TLS: the endpoint does not speak TLS (try http://)", true
	case strings.Contains(msg, "x509: "):
		return "TLS: " + excerpt(msg[strings.LastIndex(msg, "x509: ")+len("x509: "):]), true
	case strings.Contains(msg, "tls: "):
		return "TLS: " + excerpt(msg[strings.LastIndex(msg, "tls: ")+len("tls: "):]), true
	case strings.Contains(msg, "connection reset by peer"):
		return "connection reset by the endpoint", true
	case strings.Contains(msg, "i/o timeout"):
		return "timeout connecting", true
	}
	return "", false
}

var (
	lookupRE = regexp.MustCompile(`lookup ([^\s:]+)`)
	// otlptracehttp: "failed to send to URL: 401 Unauthorized (body: ...)";
	// otlploghttp and otlpmetrichttp: "failed to send logs to URL: ...",
	// "failed to send metrics to URL: ...".
	sentRE = regexp.MustCompile(`(?s)failed to send (?:logs |metrics )?to \S+: (\d{3})([^(]*)\(body: (.*)\)$`)
	// client_golang's push: "unexpected status code 401 while pushing to URL: body".
	pushRE = regexp.MustCompile(`(?s)unexpected status code (\d{3}) while (?:pushing to|deleting) \S+: (.*)$`)
	// otlptracehttp's retryable statuses (429, 502, 503, 504) lose their
	// code: "retry-able request failure: body: ...".
	retryRE = regexp.MustCompile(`(?s)retry-able request failure: body: (.*)$`)
)

// httpStatusWords finds the HTTP status and body in the text of an HTTP
// exporter's or pusher's error: neither has a type to read them from.
func httpStatusWords(text string) (string, bool) {
	if m := sentRE.FindStringSubmatch(text); m != nil {
		return fmt.Sprintf("HTTP %s%s, body: %s", m[1], strings.TrimRight(m[2], " "), bodyExcerpt(m[3])), true
	}
	if m := pushRE.FindStringSubmatch(text); m != nil {
		return fmt.Sprintf("HTTP %s, body: %s", m[1], bodyExcerpt(m[2])), true
	}
	if m := retryRE.FindStringSubmatch(text); m != nil {
		return "collector busy or unavailable (HTTP 429, 502, 503 or 504), body: " + bodyExcerpt(m[1]), true
	}
	return "", false
}

func bodyExcerpt(s string) string {
	if s = excerpt(s); s == "" {
		return "(empty)"
	}
	return s
}

// excerpt makes s fit for one log line: valid UTF-8, no control
// characters, runs of spaces collapsed, at most maxExcerpt runes.
func excerpt(s string) string {
	var b strings.Builder
	n, space := 0, false
	for _, r := range strings.ToValidUTF8(s, "?") {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			space = b.Len() > 0
			continue
		}
		if n >= maxExcerpt {
			b.WriteString("…")
			break
		}
		if space {
			b.WriteByte(' ')
			n++
			space = false
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}

// exportReporter says on a logger what becomes of one exporter's exports,
// for every signal alike: the first failure at warn, then at most one line
// per interval with the failures since, and, at info, that exports succeed
// again. It keeps the last cause for the exit summary. Its clock is
// injected for tests.
type exportReporter struct {
	log      *slog.Logger
	now      func() time.Time
	every    time.Duration
	endpoint string // where, without credentials
	protocol string // grpc, http/protobuf, file, console
	// what the lines say: the failure and recovery messages, the key of
	// the items lost, and attributes before the others (the signal).
	failMsg, okMsg, lostKey string
	attrs                   []any

	mu       sync.Mutex
	cause    string    // of the last failure
	failing  bool      // no success since the last failure
	reported bool      // a failure line was written since the last recovery line
	lastLine time.Time // of the last failure line; zero: none yet
	failures int64     // failed attempts and exports since the last failure line
	lost     int64     // spans lost since the last failure line

	// fails is signalled on every failure: a shutdown waiting for this
	// exporter stops waiting for a collector that has failed.
	fails chan struct{}
}

func newExportReporter(log *slog.Logger, now func() time.Time, every time.Duration, endpoint, protocol string) *exportReporter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	if every <= 0 {
		every = DefaultReportEvery
	}
	return &exportReporter{log: log, now: now, every: every, endpoint: endpoint, protocol: protocol, fails: make(chan struct{}, 1),
		failMsg: "trace export failed", okMsg: "trace export recovered", lostKey: "spans_lost"}
}

// forwarding makes r the reporter of a forwarded signal of the CLI (logs
// or metrics).
func (r *exportReporter) forwarding(signal string) {
	r.failMsg, r.okMsg = "forwarding the CLI's telemetry failed", "forwarding the CLI's telemetry recovered"
	r.lostKey = map[string]string{signalLogs: "log_records_lost", signalMetrics: "metric_points_lost"}[signal]
	r.attrs = []any{"signal", signal}
}

// attemptFailed reports one failed try of an export that the exporter
// retries (gRPC): the user hears at once that the collector is down, not
// after the export's timeout.
func (r *exportReporter) attemptFailed(err error) { r.failed(err, 0, true) }

// exportFailed reports an export whose items (spans, records, points) are
// lost.
func (r *exportReporter) exportFailed(err error, items int) { r.failed(err, items, false) }

func (r *exportReporter) failed(err error, items int, retrying bool) {
	cause := Cause(err)
	select {
	case r.fails <- struct{}{}:
	default:
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cause, r.failing = cause, true
	r.failures++
	r.lost += int64(items)
	now := r.now()
	first := r.lastLine.IsZero()
	if !first && now.Sub(r.lastLine) < r.every {
		return
	}
	attrs := append(slices.Clone(r.attrs), "endpoint", r.endpoint, "protocol", r.protocol, "cause", cause)
	if retrying {
		attrs = append(attrs, "retrying", true)
	}
	if !first {
		attrs = append(attrs, "failures", r.failures, r.lostKey, r.lost, "since", now.Sub(r.lastLine).Round(time.Second).String())
	} else if items > 0 {
		attrs = append(attrs, r.lostKey, r.lost)
	}
	r.log.Warn(r.failMsg, attrs...)
	r.lastLine, r.reported = now, true
	r.failures, r.lost = 0, 0
}

// exportOK reports a delivered export; the first after a reported failure
// says so, at info.
func (r *exportReporter) exportOK() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.failing {
		return
	}
	r.failing = false
	if r.reported {
		r.reported = false
		r.log.Info(r.okMsg, append(slices.Clone(r.attrs), "endpoint", r.endpoint, "protocol", r.protocol, "unreported_failures", r.failures)...)
	}
}

// isFailing reports whether the last export or attempt failed (no success
// since).
func (r *exportReporter) isFailing() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failing
}

// lastCause is the cause of the last failure, "" if none.
func (r *exportReporter) lastCause() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cause
}

// attemptInterceptor reports each failed gRPC attempt to r. The exporter
// retries Unavailable for as long as its timeout allows, so without this a
// refused connection would be said only when the export gives up, or never
// when shutdown's deadline comes first. An attempt cut short by its context
// (our own deadline or shutdown) says nothing about the collector.
func attemptInterceptor(r *exportReporter) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err != nil && ctx.Err() == nil && retried(status.Code(err)) {
			r.attemptFailed(err)
		}
		return err
	}
}

// retried reports whether the gRPC exporter retries an attempt that
// failed with code (as otlptracegrpc's retryable does, less
// ResourceExhausted, retried only when the server asks): any other failure
// ends the export at once, and is reported as a failed export.
func retried(code codes.Code) bool {
	switch code {
	case codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.OutOfRange, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}

// Loss is what one exporter did not deliver, for the summary at exit: the
// spans of one span exporter, or the log records or metric points of one
// forwarded signal.
type Loss struct {
	// Items is how many this exporter did not deliver, of Signal.
	Items int64
	// Signal names the items: "spans", "log records" or "metric points".
	Signal string
	// ExportErrors is how many of its export calls failed.
	ExportErrors int64
	// Endpoint is where they should have gone (a URL without credentials,
	// a file), Protocol how (grpc, http/protobuf, file, console).
	Endpoint, Protocol string
	// Cause says why, in words: the last export failure's cause, and the
	// items abandoned at the shutdown deadline (or at exit, the collector
	// having failed), dropped at a full queue or come after shutdown.
	Cause string
	// Waited is how long the exit waited for this exporter at shutdown
	// when it gave up on it (0 when it did not).
	Waited time.Duration
}

// String is the summary line: "N spans dropped, not delivered to
// <endpoint> (<protocol>): <cause>" (or N log records, N metric points).
func (l Loss) String() string {
	s := fmt.Sprintf("%d %s dropped, not delivered to %s (%s): %s", l.Items, l.Signal, l.Endpoint, l.Protocol, l.Cause)
	if l.Waited > 0 {
		s += fmt.Sprintf(" (the exit waited %s for it)", l.Waited.Round(10*time.Millisecond))
	}
	return s
}
