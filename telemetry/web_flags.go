package telemetry

import (
	"errors"
	"flag"
	"fmt"
	"runtime"

	"github.com/cbc-otel/cbc-otel/exposition"
)

// webFlags are the exporter conventions node_exporter has (issue 21): the
// telemetry path, the bound on parallel scrapes, the exporter's own
// go_*/process_* metrics and systemd socket activation. Every command with
// --web.listen-address has them.
type webFlags struct {
	telemetryPath     string
	maxRequests       int
	noExporterMetrics bool
	systemdSocket     bool
	pprof             bool // --web.enable-pprof
	registered        bool // replay has none of them
}

func (w *webFlags) register(fs *flag.FlagSet) {
	w.registered = true
	fs.StringVar(&w.telemetryPath, "web.telemetry-path", exposition.DefaultTelemetryPath,
		"path under which the metrics are served (/, /healthz and /readyz stay where they are)")
	fs.IntVar(&w.maxRequests, "web.max-requests", exposition.DefaultMaxRequests,
		"most scrapes served in parallel; beyond it a scrape gets 503 (0 = no limit)")
	fs.BoolVar(&w.noExporterMetrics, "web.disable-exporter-metrics", false,
		"leave cbc-otel's own go_* and process_* metrics out of the metrics endpoint and file")
	fs.BoolVar(&w.systemdSocket, "web.systemd-socket", false,
		"serve on the sockets systemd passes (socket activation, Linux only) instead of binding --web.listen-address")
	fs.BoolVar(&w.pprof, "web.enable-pprof", false,
		"serve the Go runtime's profiles under /debug/pprof/ on --web.listen-address, behind the same --web.config.file (TLS, basic auth) as the metrics")
}

// validate checks the values; listen is --web.listen-address.
func (w *webFlags) validate(listen string) error {
	if !w.registered {
		return nil
	}
	var errs []error
	if err := exposition.CheckTelemetryPath(w.telemetryPath); err != nil {
		errs = append(errs, fmt.Errorf("--web.telemetry-path %q: %w", w.telemetryPath, err))
	}
	if w.maxRequests < 0 {
		errs = append(errs, fmt.Errorf("--web.max-requests %d: must not be negative (0 = no limit)", w.maxRequests))
	}
	if w.systemdSocket {
		if runtime.GOOS != "linux" {
			errs = append(errs, errors.New("--web.systemd-socket: socket activation is Linux only"))
		}
		if listen == "" {
			errs = append(errs, errors.New("--web.systemd-socket needs a --web.listen-address (an empty one disables the endpoint)"))
		}
	}
	return errors.Join(errs...)
}
