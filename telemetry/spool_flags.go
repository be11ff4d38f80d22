package telemetry

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbc-otel/cbc-otel/spool"
	"github.com/cbc-otel/cbc-otel/tap"
)

// SpoolFlags are run's flags for handing the stream to a sidecar.
type SpoolFlags struct {
	Dir     string // --spool.dir; "": no spool
	Process bool   // --spool.process
}

// Register defines the flags on fs.
func (s *SpoolFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&s.Dir, "spool.dir", "",
		"also write the tapped stdout (without control_response lines, which carry credentials; with the interrupt/stop_task requests seen on stdin) to a new file in this directory, for the serve sidecar; "+
			"run then does no processing of its own unless --spool.process")
	fs.BoolVar(&s.Process, "spool.process", false,
		"with --spool.dir, also run the pipeline and telemetry in the wrapper as without it")
}

// telemetryOutputFlags are the flags that ask the wrapper itself for
// telemetry output; with --spool.dir they need --spool.process.
var telemetryOutputFlags = []string{
	"web.listen-address", "web.config.file", "push.gateway", "metrics.file",
	"traces.exporter", "otlp.endpoint", "otlp.protocol", "traces.file", "summary.waterfall", "summary.file",
}

// Validate checks the spool flags against the flags set explicitly.
func (s *SpoolFlags) Validate(explicit map[string]bool) error {
	if s.Dir == "" {
		if s.Process {
			return errors.New("--spool.process needs --spool.dir")
		}
		return nil
	}
	if s.Process {
		return nil
	}
	var bad []string
	for _, name := range telemetryOutputFlags {
		if explicit[name] {
			bad = append(bad, "--"+name)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("%s with --spool.dir need --spool.process (without it the wrapper only spools; the sidecar does the rest)", strings.Join(bad, ", "))
	}
	return nil
}

// spooling is the spool side of one run: its taps and its writer.
type spooling struct {
	stdout, stdin *tap.Tap
	stats         *spool.Stats
	done          chan struct{}
	path          string
}

// startSpool creates the spool file and starts its consumer. A file that
// cannot be created (missing directory, full disk, no permission) is logged
// and counted: the taps are then drained into nothing, and the passthrough
// goes on.
func startSpool(dir string, tapQueue int, log *slog.Logger) *spooling {
	sp := &spooling{
		stdout: tap.NewTap(tapQueue),
		stdin:  tap.NewTap(tapQueue),
		stats:  new(spool.Stats),
		done:   make(chan struct{}),
	}
	w, err := spool.Create(dir, log, sp.stats)
	if err != nil {
		log.Error("spool file not created; the stream is passed through but not spooled", "dir", dir, "err", err)
		go func() {
			defer close(sp.done)
			spool.Drain(sp.stdout, sp.stdin, sp.stats)
		}()
		return sp
	}
	sp.path = w.Path()
	log.Info("spooling", "file", sp.path)
	go func() {
		defer close(sp.done)
		// Errors are logged and counted by the writer.
		_ = w.Consume(sp.stdout, sp.stdin)
	}()
	return sp
}

// tapOf returns the spool's tap of src; nil on a nil spooling.
func (sp *spooling) tapOf(src tap.Source) *tap.Tap {
	switch {
	case sp == nil:
		return nil
	case src == tap.SourceStdin:
		return sp.stdin
	}
	return sp.stdout
}

// close ends the taps (the writer then finishes the file and renames it).
func (sp *spooling) close() {
	sp.stdout.Close()
	sp.stdin.Close()
}

// logTotals reports what was spooled, at warn when something was lost.
func (sp *spooling) logTotals(log *slog.Logger) {
	level := slog.LevelDebug
	if sp.stats.Errors.Load() > 0 || sp.stats.BytesDropped.Load() > 0 || sp.stats.StdinDropped.Load() > 0 {
		level = slog.LevelWarn
	}
	log.Log(context.Background(), level, "spool totals", "file", sp.path, "bytes_written", sp.stats.BytesWritten.Load(),
		"bytes_dropped", sp.stats.BytesDropped.Load(), "errors", sp.stats.Errors.Load(),
		"stdin_records", sp.stats.StdinRecords.Load(), "stdin_dropped", sp.stats.StdinDropped.Load(),
		"stdout_skipped", sp.stats.StdoutSkipped.Load())
}

// collector exposes the spool counters (with --spool.process, on the
// wrapper's own /metrics).
func (sp *spooling) collector() prometheus.Collector {
	return spoolCollector{sp.stats}
}

type spoolCollector struct{ st *spool.Stats }

var (
	spoolBytesDesc   = prometheus.NewDesc("cbc_otel_spool_bytes_total", "Bytes written to the spool file.", nil, nil)
	spoolDroppedDesc = prometheus.NewDesc("cbc_otel_spool_dropped_bytes_total", "Tapped bytes that did not reach the spool file (tap full, write error, no file).", nil, nil)
	spoolErrorsDesc  = prometheus.NewDesc("cbc_otel_spool_errors_total", "Spool file failures (create, write, sync, rename).", nil, nil)
)

func (c spoolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- spoolBytesDesc
	ch <- spoolDroppedDesc
	ch <- spoolErrorsDesc
}

func (c spoolCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(spoolBytesDesc, prometheus.CounterValue, float64(c.st.BytesWritten.Load()))
	ch <- prometheus.MustNewConstMetric(spoolDroppedDesc, prometheus.CounterValue, float64(c.st.BytesDropped.Load()))
	ch <- prometheus.MustNewConstMetric(spoolErrorsDesc, prometheus.CounterValue, float64(c.st.Errors.Load()))
}
