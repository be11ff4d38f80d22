// The web poller (pollWeb) polls a cbc-otel web listener as its readers do: a
// browser tab on the runs page and a Prometheus scraping /metrics, so the
// benchmark harness measures the wrapper's latency under that load.
// (Folded from bench/internal/webpoll: the harness is its one user.)

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// webStats is what a poller of run's web listener did during one case, and
// what the OTLP receiver got from that run and what it dropped.
type webStats struct {
	Page, Metrics, Failed int   // GETs of / and /metrics answered 200, GETs that were not
	Spans                 int64 // spans the OTLP receiver got from the run
	// TapDropped and SpansDropped are the run's own counts, from its
	// --metrics-file: bytes its tap let go, spans its exporter did.
	TapDropped, SpansDropped float64
}

// Scrape intervals of the poller: a browser tab on the runs page reloads
// every second, a Prometheus scrapes every few.
const (
	pagePollEvery    = time.Second
	metricsPollEvery = 5 * time.Second
)

// pollWeb GETs http://addr/ at once and every pagePollEvery, and
// http://addr/metrics at once and every metricsPollEvery, reading every
// body to the end (as a browser and a Prometheus do), until the returned
// stop is called; stop waits for the poller and returns its counts. A GET
// that fails is counted, not fatal: the listener may close as run exits.
func pollWeb(ctx context.Context, addr string) (stop func() webStats) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan webStats, 1)
	client := &http.Client{Timeout: 2 * time.Second}
	get := func(path string) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			return false
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return false
		}
		return resp.StatusCode == http.StatusOK
	}
	go func() {
		var ws webStats
		page := time.NewTicker(pagePollEvery)
		defer page.Stop()
		scrape := time.NewTicker(metricsPollEvery)
		defer scrape.Stop()
		count := func(ok bool, n *int) {
			if ok {
				*n++
			} else if ctx.Err() == nil {
				ws.Failed++
			}
		}
		count(get("/"), &ws.Page)
		count(get("/metrics"), &ws.Metrics)
		for {
			select {
			case <-ctx.Done():
				done <- ws
				return
			case <-page.C:
				count(get("/"), &ws.Page)
			case <-scrape.C:
				count(get("/metrics"), &ws.Metrics)
			}
		}
	}()
	return func() webStats {
		cancel()
		return <-done
	}
}

// String is the counts for a log line.
func (w webStats) String() string {
	return fmt.Sprintf("page %d, metrics %d, failed %d, spans %d, dropped %.0f B and %.0f spans", w.Page, w.Metrics, w.Failed, w.Spans, w.TapDropped, w.SpansDropped)
}
