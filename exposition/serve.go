package exposition

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
)

// DefaultAddr is cbc-otel's documented metrics address: loopback, so that
// nothing (the runs page names workflows, agents and sessions) is served
// beyond the host unless a flag says so. 9464 is taken by Claude Code's own
// Prometheus exporter, so a wrapper and the CLI it wraps can both serve on
// one host.
const DefaultAddr = "127.0.0.1:9478"

// DefaultTelemetryPath is where the metrics are served by default.
const DefaultTelemetryPath = "/metrics"

// DefaultMaxRequests is the default bound on parallel scrapes (node_exporter's).
const DefaultMaxRequests = 40

// Options configures the metrics HTTP server.
type Options struct {
	// Addr is the listen address (host:port); ":0" picks a free port.
	Addr string
	// WebConfigFile is an exporter-toolkit web configuration (TLS, basic
	// auth); "" serves plain HTTP without authentication.
	WebConfigFile string
	// Gatherer is what /metrics exposes.
	Gatherer prometheus.Gatherer
	// Logger receives the server's own messages; nil discards them.
	Logger *slog.Logger
	// Ready answers /readyz: nil means ready, an error a 503 with its text
	// as the reason. A nil Ready means always ready.
	Ready func() error
	// Page, when set, answers "/" exactly (a landing page: cbc-otel's runs
	// page); other unknown paths stay 404. It is behind the same web
	// config (TLS, basic auth) as /metrics.
	Page http.Handler
	// TelemetryPath is where Gatherer is served; "" means /metrics. It
	// must not be "/", /healthz or /readyz (see CheckTelemetryPath).
	TelemetryPath string
	// MaxRequests bounds the scrapes served at once; beyond it a scrape
	// gets 503. 0 means no bound.
	MaxRequests int
	// SystemdSocket serves on the sockets systemd passed (socket
	// activation, LISTEN_FDS) instead of binding Addr.
	SystemdSocket bool
	// ShutdownTimeout bounds the graceful shutdown once the context ends;
	// 0 means 5 s.
	ShutdownTimeout time.Duration
	// EnablePprof serves the Go runtime's profiles under /debug/pprof/
	// (net/http/pprof), behind the same web config (TLS, basic auth) as
	// /metrics. Off, /debug/pprof/ is 404 like any unknown path.
	EnablePprof bool
}

// Server is a bound metrics server. Listen binds it; Serve runs it.
type Server struct {
	lns   []net.Listener
	srv   *http.Server
	opts  Options
	flags *web.FlagConfig
}

// Listen validates the web configuration and binds the address, so that a
// bad config or a busy port is an error the caller sees at once (and can
// log and carry on: telemetry never stops the child).
func Listen(opts Options) (*Server, error) {
	if opts.Addr == "" {
		return nil, errors.New("exposition: no listen address")
	}
	if opts.Gatherer == nil {
		return nil, errors.New("exposition: no gatherer")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 5 * time.Second
	}
	if opts.WebConfigFile != "" {
		if err := web.Validate(opts.WebConfigFile); err != nil {
			return nil, fmt.Errorf("exposition: web config %s: %w", opts.WebConfigFile, err)
		}
	}
	if opts.TelemetryPath == "" {
		opts.TelemetryPath = DefaultTelemetryPath
	}
	if err := CheckTelemetryPath(opts.TelemetryPath); err != nil {
		return nil, fmt.Errorf("exposition: telemetry path %q: %w", opts.TelemetryPath, err)
	}
	lns, err := listeners(opts)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, len(lns))
	for i, ln := range lns {
		addrs[i] = ln.Addr().String()
	}
	// The listeners exist already: the toolkit only serves them.
	systemd := false
	cfg := opts.WebConfigFile
	s := &Server{
		lns:   lns,
		opts:  opts,
		flags: &web.FlagConfig{WebListenAddresses: &addrs, WebSystemdSocket: &systemd, WebConfigFile: &cfg},
		srv: &http.Server{
			Handler:           Handler(opts),
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
		},
	}
	return s, nil
}

// listeners binds opts.Addr, or takes the sockets systemd passed (as the
// toolkit's ListenAndServe does with --web.systemd-socket).
func listeners(opts Options) ([]net.Listener, error) {
	if !opts.SystemdSocket {
		ln, err := net.Listen("tcp", opts.Addr)
		if err != nil {
			return nil, fmt.Errorf("exposition: listen: %w", err)
		}
		return []net.Listener{ln}, nil
	}
	lns, err := activation.Listeners()
	if err != nil {
		return nil, fmt.Errorf("exposition: systemd socket activation: %w", err)
	}
	var out []net.Listener
	for _, ln := range lns {
		if ln != nil { // a passed descriptor that is no listening socket
			out = append(out, ln)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("exposition: systemd socket activation: no listening sockets passed (LISTEN_FDS)")
	}
	return out, nil
}

// pprofPath is where EnablePprof serves the profiles.
const pprofPath = "/debug/pprof/"

// CheckTelemetryPath accepts an absolute URL path other than the ones the
// server answers itself: "/" (the landing page), /healthz, /readyz and
// anything under /debug/pprof (the profiles, when enabled).
func CheckTelemetryPath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return errors.New("must start with /")
	case p == "/" || p == "/healthz" || p == "/readyz":
		return errors.New("must not be /, /healthz or /readyz")
	case p+"/" == pprofPath || strings.HasPrefix(p, pprofPath):
		return errors.New("must not be under /debug/pprof")
	case strings.ContainsAny(p, "{}?# \t"):
		return errors.New("must be a plain path")
	}
	return nil
}

// Addr is the bound address (useful with port 0).
// With several systemd sockets it is the first.
func (s *Server) Addr() net.Addr { return s.lns[0].Addr() }

// Serve serves until ctx ends, then shuts down gracefully within
// ShutdownTimeout. It returns nil after a shutdown and the error otherwise.
func (s *Server) Serve(ctx context.Context) error {
	// web.Serve may fail before http.Server owns the listeners.
	defer func() {
		for _, ln := range s.lns {
			ln.Close()
		}
	}()
	errc := make(chan error, 1)
	go func() { errc <- web.ServeMultiple(s.lns, s.srv, s.flags, s.opts.Logger) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("exposition: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		s.srv.Close()
		return fmt.Errorf("exposition: shutdown: %w", err)
	}
	return nil
}

// Serve binds opts.Addr and serves until ctx ends (see Listen and
// Server.Serve). A bind or config failure is returned at once.
func Serve(ctx context.Context, opts Options) error {
	s, err := Listen(opts)
	if err != nil {
		return err
	}
	return s.Serve(ctx)
}

// Handler returns the server's routes, as Listen serves them: the Gatherer
// at opts.TelemetryPath ("": /metrics; OpenMetrics negotiated, so
// exemplars are exposed; at most opts.MaxRequests scrapes at once, 0: no
// bound), /healthz, /readyz, the Page at "/" exactly if set, the profiles
// if enabled; anything else is 404. The web config, address and timeouts
// of opts are Listen's, not its. opts.TelemetryPath must pass
// CheckTelemetryPath (Listen checks it first): Handler panics otherwise,
// as a ServeMux does on a bad pattern.
func Handler(opts Options) http.Handler {
	if opts.TelemetryPath == "" {
		opts.TelemetryPath = DefaultTelemetryPath
	}
	if err := CheckTelemetryPath(opts.TelemetryPath); err != nil {
		panic(fmt.Sprintf("exposition: telemetry path %q: %v", opts.TelemetryPath, err))
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	mux := http.NewServeMux()
	mux.Handle(opts.TelemetryPath, promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandling:       promhttp.ContinueOnError,
		EnableOpenMetrics:   true,
		MaxRequestsInFlight: opts.MaxRequests,
		Timeout:             30 * time.Second,
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if opts.Ready != nil {
			if err := opts.Ready(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "not ready: %v\n", err)
				return
			}
		}
		io.WriteString(w, "ok\n")
	})
	// Exact paths only: "/" would otherwise match everything.
	mux.HandleFunc("/", http.NotFound)
	if opts.Page != nil {
		mux.Handle("/{$}", opts.Page)
	}
	if opts.EnablePprof {
		// On this mux, not http.DefaultServeMux (where the pprof package
		// registers itself too, and which nothing of ours serves): so the
		// web config's TLS and basic auth wrap the profiles as well.
		mux.HandleFunc(pprofPath, pprof.Index) // the named profiles: heap, goroutine, allocs, ...
		mux.HandleFunc(pprofPath+"cmdline", pprof.Cmdline)
		mux.HandleFunc(pprofPath+"profile", pprof.Profile)
		mux.HandleFunc(pprofPath+"symbol", pprof.Symbol)
		mux.HandleFunc(pprofPath+"trace", pprof.Trace)
	}
	return mux
}
