package clitelemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	crand "crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Receiver defaults.
const (
	// DefaultAddr is where Listen listens unless told: loopback, any port.
	DefaultAddr = "127.0.0.1:0"
	// DefaultMaxBodyBytes bounds a request body, compressed and decompressed.
	DefaultMaxBodyBytes = 8 << 20
	// DefaultMaxConcurrent bounds the requests read and decoded at once.
	DefaultMaxConcurrent = 4
	// DefaultBusyWait is how long a request waits for a free slot before
	// it is answered 503.
	DefaultBusyWait = 100 * time.Millisecond
	// DefaultReadTimeout bounds reading one request, body included.
	DefaultReadTimeout = 10 * time.Second
	// MinTokenLen is the shortest ReceiverConfig.Token accepted; a token
	// Listen makes is 43 characters (32 random bytes).
	MinTokenLen = 16
)

// Reasons a request is refused with 401 (AuthStats, the
// cbc_otel_cli_requests_unauthorized_total{reason} values).
const (
	ReasonMissing   = "missing"   // no Authorization header
	ReasonMalformed = "malformed" // not one "Bearer <token>" credential
	ReasonWrong     = "wrong"     // another token than the receiver's
)

// Handler receives each decoded request. Its methods are called
// synchronously from the HTTP handler, before the client gets its answer,
// and may run concurrently (up to ReceiverConfig.MaxConcurrent at once): they
// must be fast and must not block (the CLI waits for the answer, at exit
// too). They may keep the request; the receiver does not reuse it.
type Handler interface {
	Traces(context.Context, *coltracepb.ExportTraceServiceRequest)
	Logs(context.Context, *collogspb.ExportLogsServiceRequest)
	Metrics(context.Context, *colmetricspb.ExportMetricsServiceRequest)
}

// Handlers is a Handler made of functions; a nil function discards its
// signal.
type Handlers struct {
	TracesFunc  func(context.Context, *coltracepb.ExportTraceServiceRequest)
	LogsFunc    func(context.Context, *collogspb.ExportLogsServiceRequest)
	MetricsFunc func(context.Context, *colmetricspb.ExportMetricsServiceRequest)
}

// Traces calls TracesFunc if set.
func (h Handlers) Traces(ctx context.Context, r *coltracepb.ExportTraceServiceRequest) {
	if h.TracesFunc != nil {
		h.TracesFunc(ctx, r)
	}
}

// Logs calls LogsFunc if set.
func (h Handlers) Logs(ctx context.Context, r *collogspb.ExportLogsServiceRequest) {
	if h.LogsFunc != nil {
		h.LogsFunc(ctx, r)
	}
}

// Metrics calls MetricsFunc if set.
func (h Handlers) Metrics(ctx context.Context, r *colmetricspb.ExportMetricsServiceRequest) {
	if h.MetricsFunc != nil {
		h.MetricsFunc(ctx, r)
	}
}

// ReceiverConfig configures Listen; zero values take the defaults.
type ReceiverConfig struct {
	// Addr is the listen address; "" means DefaultAddr.
	Addr string
	// MaxBodyBytes bounds a body, compressed and decompressed; larger
	// requests are answered 413. 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxConcurrent bounds the requests being read, decoded and handled
	// at once, and so the memory they hold: about MaxConcurrent ×
	// MaxBodyBytes × 10-20 while decoding (TestReceiverFlood measures the
	// heap peak, garbage included, at +21-36 MiB for 2 × 1 MiB, JSON or
	// protobuf, under a flood of 192 requests). Requests waiting for a slot
	// have read nothing but their headers. 0 means DefaultMaxConcurrent.
	MaxConcurrent int
	// BusyWait is how long a request over the bound waits for a slot before
	// it is answered 503 with Retry-After. 0 means DefaultBusyWait; negative
	// means not at all.
	BusyWait time.Duration
	// ReadTimeout bounds reading one request; 0 means DefaultReadTimeout.
	ReadTimeout time.Duration
	// Logger receives the receiver's own failures (never payloads, never
	// the token); nil discards them.
	Logger *slog.Logger
	// Token is the secret every request must present as "Authorization:
	// Bearer <Token>" (Headers gives the child the variable's value); ""
	// makes a random one (32 bytes of crypto/rand). Loopback is shared by
	// every process of the host: without it, any of them could inject
	// spans and costs into the child's run. At least MinTokenLen
	// characters of base64url (A-Z, a-z, 0-9, - and _), without padding.
	Token string
}

// Outcome counters of one signal's requests, and what they carried.
type SignalStats struct {
	// OK counts requests decoded and handed to the Handler.
	OK atomic.Int64
	// BadRequest counts malformed bodies (400).
	BadRequest atomic.Int64
	// UnsupportedMedia counts unknown content types or encodings (415).
	UnsupportedMedia atomic.Int64
	// TooLarge counts bodies over the bound (413).
	TooLarge atomic.Int64
	// Busy counts requests refused over the concurrency bound (503).
	Busy atomic.Int64
	// WrongMethod counts requests other than POST (405).
	WrongMethod atomic.Int64
	// Items counts what the OK requests carried: spans, log records or
	// metric data points.
	Items atomic.Int64
}

// AuthStats counts the requests refused with 401, by reason.
type AuthStats struct {
	// Missing counts requests without an Authorization header.
	Missing atomic.Int64
	// Malformed counts headers that are not one Bearer credential.
	Malformed atomic.Int64
	// Wrong counts Bearer tokens other than the receiver's.
	Wrong atomic.Int64
}

// Stats is the receiver's counters, safe to read at any time.
type Stats struct {
	Traces, Logs, Metrics SignalStats
	// NotFound counts authorized requests to other paths (404).
	NotFound atomic.Int64
	// Unauthorized counts the requests refused before anything else was
	// looked at (401), whatever their path.
	Unauthorized AuthStats
}

// Receiver is an OTLP/HTTP server for /v1/traces, /v1/logs and /v1/metrics.
type Receiver struct {
	cfg   ReceiverConfig
	h     Handler
	log   *slog.Logger
	ln    net.Listener
	srv   *http.Server
	token []byte // "Bearer " excluded
	sem   chan struct{}
	stats Stats
	done  chan struct{}
	err   error // of Serve, read after done
}

// Listen starts a Receiver handing requests to h. It listens before it
// returns, so Addr is valid at once.
func Listen(cfg ReceiverConfig, h Handler) (*Receiver, error) {
	if h == nil {
		return nil, errors.New("clitelemetry: nil Handler")
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	if cfg.BusyWait == 0 {
		cfg.BusyWait = DefaultBusyWait
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.Token == "" {
		var b [32]byte
		_, _ = crand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
		cfg.Token = base64.RawURLEncoding.EncodeToString(b[:])
	}
	if err := checkToken(cfg.Token); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("clitelemetry: listen: %w", err)
	}
	r := &Receiver{cfg: cfg, h: h, log: logger, ln: ln, token: []byte(cfg.Token), sem: make(chan struct{}, cfg.MaxConcurrent), done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/traces", r.serve(sigTraces))
	mux.HandleFunc("/v1/logs", r.serve(sigLogs))
	mux.HandleFunc("/v1/metrics", r.serve(sigMetrics))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		r.stats.NotFound.Add(1)
		http.Error(w, "not found: OTLP paths are /v1/traces, /v1/logs, /v1/metrics", http.StatusNotFound)
	})
	r.srv = &http.Server{
		Handler:           r.authorize(mux),
		ReadHeaderTimeout: cfg.ReadTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.ReadTimeout,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	go func() {
		defer close(r.done)
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.err = err
		}
	}()
	return r, nil
}

// Addr is the address the receiver listens on, host:port.
func (r *Receiver) Addr() string { return r.ln.Addr().String() }

// Endpoint is the receiver's base URL, for OTEL_EXPORTER_OTLP_ENDPOINT.
func (r *Receiver) Endpoint() string { return "http://" + r.Addr() }

// Headers is the value of OTEL_EXPORTER_OTLP_HEADERS (or a per-signal
// variable) that makes an OTel exporter present the receiver's token:
// "authorization=Bearer%20<token>" (the variables' values are
// percent-decoded). It holds the secret: the child's environment only.
func (r *Receiver) Headers() string { return "authorization=Bearer%20" + string(r.token) }

// Stats returns the receiver's live counters.
func (r *Receiver) Stats() *Stats { return &r.stats }

// checkToken accepts MinTokenLen or more characters of base64url, which
// need no escaping in a header or the variables, and which no decoder
// reads otherwise (a "+" may become a space).
func checkToken(tok string) error {
	if len(tok) < MinTokenLen {
		return fmt.Errorf("clitelemetry: token of %d characters, want at least %d", len(tok), MinTokenLen)
	}
	for _, c := range tok {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return errors.New("clitelemetry: token: only base64url characters (A-Z a-z 0-9 - _), without padding")
		}
	}
	return nil
}

// authorize lets in only requests carrying the receiver's token, compared
// in constant time, and answers the others 401 before reading anything but
// their headers: whoever else can reach loopback gets no slot, no decoding
// and no say in the child's traces or costs. Refusals are counted, and
// logged at debug without any header.
func (r *Receiver) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		reason, counter := "", (*atomic.Int64)(nil)
		vals := req.Header.Values("Authorization")
		scheme, tok, ok := "", "", false
		if len(vals) == 1 {
			scheme, tok, ok = strings.Cut(strings.TrimSpace(vals[0]), " ")
		}
		switch {
		case len(vals) == 0:
			reason, counter = ReasonMissing, &r.stats.Unauthorized.Missing
		case !ok || !strings.EqualFold(scheme, "Bearer"):
			reason, counter = ReasonMalformed, &r.stats.Unauthorized.Malformed
		case subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), r.token) != 1:
			reason, counter = ReasonWrong, &r.stats.Unauthorized.Wrong
		default:
			next.ServeHTTP(w, req)
			return
		}
		counter.Add(1)
		r.log.Debug("clitelemetry: request refused: not the child's", "reason", reason, "path", req.URL.Path, "remote", req.RemoteAddr)
		enc, known := encodingOf(req.Header.Get("Content-Type"))
		if !known {
			enc = Protobuf
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="cbc-otel"`)
		writeStatus(w, enc, http.StatusUnauthorized, codes.Unauthenticated, "unauthorized: this receiver takes the telemetry of its own child only")
	})
}

// Shutdown stops accepting, waits for the requests in progress until ctx
// is done, then closes what is left. It is safe to call more than once.
func (r *Receiver) Shutdown(ctx context.Context) error {
	err := r.srv.Shutdown(ctx)
	if err != nil {
		_ = r.srv.Close()
		return fmt.Errorf("clitelemetry: receiver shutdown: %w", err)
	}
	<-r.done
	if r.err != nil {
		return fmt.Errorf("clitelemetry: receiver: %w", r.err)
	}
	return nil
}

type signal int

const (
	sigTraces signal = iota
	sigLogs
	sigMetrics
)

func (r *Receiver) signalStats(s signal) *SignalStats {
	switch s {
	case sigLogs:
		return &r.stats.Logs
	case sigMetrics:
		return &r.stats.Metrics
	}
	return &r.stats.Traces
}

// errTooLarge is a body over MaxBodyBytes.
var errTooLarge = errors.New("request body too large")

func (r *Receiver) serve(sig signal) http.HandlerFunc {
	st := r.signalStats(sig)
	return func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			st.WrongMethod.Add(1)
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed: POST only", http.StatusMethodNotAllowed)
			return
		}
		enc, ok := encodingOf(req.Header.Get("Content-Type"))
		if !ok {
			st.UnsupportedMedia.Add(1)
			http.Error(w, "unsupported content type: want application/x-protobuf or application/json", http.StatusUnsupportedMediaType)
			return
		}
		ce := strings.ToLower(strings.TrimSpace(req.Header.Get("Content-Encoding")))
		if ce != "" && ce != "gzip" && ce != "identity" {
			st.UnsupportedMedia.Add(1)
			http.Error(w, "unsupported content encoding: want gzip or none", http.StatusUnsupportedMediaType)
			return
		}
		if req.ContentLength > r.cfg.MaxBodyBytes {
			st.TooLarge.Add(1)
			writeStatus(w, enc, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, errTooLarge.Error())
			return
		}
		if !r.acquire(req.Context()) {
			st.Busy.Add(1)
			w.Header().Set("Retry-After", "1")
			writeStatus(w, enc, http.StatusServiceUnavailable, codes.Unavailable, "receiver busy")
			return
		}
		defer func() { <-r.sem }()

		body, err := readBody(req.Body, ce == "gzip", r.cfg.MaxBodyBytes, req.ContentLength)
		if errors.Is(err, errTooLarge) {
			st.TooLarge.Add(1)
			writeStatus(w, enc, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, err.Error())
			return
		}
		if err != nil {
			st.BadRequest.Add(1)
			writeStatus(w, enc, http.StatusBadRequest, codes.InvalidArgument, err.Error())
			return
		}
		var resp proto.Message
		var items int
		switch sig {
		case sigTraces:
			var m *coltracepb.ExportTraceServiceRequest
			if m, err = DecodeTraces(body, enc); err == nil {
				items = CountSpans(m.GetResourceSpans())
				r.h.Traces(req.Context(), m)
				resp = &coltracepb.ExportTraceServiceResponse{}
			}
		case sigLogs:
			var m *collogspb.ExportLogsServiceRequest
			if m, err = DecodeLogs(body, enc); err == nil {
				items = CountLogRecords(m.GetResourceLogs())
				r.h.Logs(req.Context(), m)
				resp = &collogspb.ExportLogsServiceResponse{}
			}
		case sigMetrics:
			var m *colmetricspb.ExportMetricsServiceRequest
			if m, err = DecodeMetrics(body, enc); err == nil {
				items = CountDataPoints(m.GetResourceMetrics())
				r.h.Metrics(req.Context(), m)
				resp = &colmetricspb.ExportMetricsServiceResponse{}
			}
		}
		if err != nil {
			st.BadRequest.Add(1)
			r.log.Debug("clitelemetry: malformed OTLP request", "path", req.URL.Path, "err", err)
			writeStatus(w, enc, http.StatusBadRequest, codes.InvalidArgument, err.Error())
			return
		}
		st.OK.Add(1)
		st.Items.Add(int64(items))
		writeMessage(w, enc, http.StatusOK, resp)
	}
}

// acquire takes a slot, waiting at most BusyWait.
func (r *Receiver) acquire(ctx context.Context) bool {
	select {
	case r.sem <- struct{}{}:
		return true
	default:
	}
	if r.cfg.BusyWait < 0 {
		return false
	}
	t := time.NewTimer(r.cfg.BusyWait)
	defer t.Stop()
	select {
	case r.sem <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// encodingOf maps a Content-Type to an Encoding.
func encodingOf(ct string) (Encoding, bool) {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return 0, false
	}
	switch mt {
	case "application/x-protobuf", "application/protobuf":
		return Protobuf, true
	case "application/json":
		return JSON, true
	}
	return 0, false
}

// readBody reads at most limit bytes, decompressed when gz, and the
// compressed stream is held to the same bound; more is errTooLarge. A
// known length (≤ limit, checked by the caller) sizes the buffer of a plain
// body at once.
func readBody(body io.Reader, gz bool, limit, length int64) ([]byte, error) {
	var raw io.Reader = &capReader{r: body, n: limit}
	if gz {
		zr, err := gzip.NewReader(raw)
		if err != nil {
			if errors.Is(err, errTooLarge) {
				return nil, err
			}
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		raw = &capReader{r: zr, n: limit}
	}
	var buf bytes.Buffer
	if !gz && length > 0 {
		buf.Grow(int(length) + 1)
	}
	_, err := buf.ReadFrom(raw)
	b := buf.Bytes()
	switch {
	case errors.Is(err, errTooLarge):
		return nil, err
	case err != nil && gz:
		return nil, fmt.Errorf("gzip: %w", err)
	case err != nil:
		return nil, fmt.Errorf("read body: %w", err)
	}
	return b, nil
}

// capReader reads at most n bytes of r; one more is errTooLarge.
type capReader struct {
	r io.Reader
	n int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		var one [1]byte
		k, err := c.r.Read(one[:])
		if k > 0 {
			return 0, errTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	k, err := c.r.Read(p)
	c.n -= int64(k)
	return k, err
}

// writeStatus answers with a google.rpc.Status in enc, as OTLP/HTTP asks
// for errors.
func writeStatus(w http.ResponseWriter, enc Encoding, httpCode int, code codes.Code, msg string) {
	writeMessage(w, enc, httpCode, &spb.Status{Code: int32(code), Message: msg}) //nolint:gosec // grpc codes fit int32.
}

func writeMessage(w http.ResponseWriter, enc Encoding, httpCode int, m proto.Message) {
	var b []byte
	var err error
	ct := "application/x-protobuf"
	if enc == JSON {
		ct = "application/json"
		b, err = protojson.Marshal(m)
	} else {
		b, err = proto.Marshal(m)
	}
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(httpCode)
	_, _ = w.Write(b)
}
