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
	page, metrics, failed int   // GETs of / and /metrics answered 200, GETs that were not
	spans                 int64 // spans the OTLP receiver got from the run
	// tapDropped and spansDropped are the run's own counts, from its
	// --metrics-file: bytes its tap let go, spans its exporter did.
	tapDropped, spansDropped float64
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
				ws.failed++
			}
		}
		count(get("/"), &ws.page)
		count(get("/metrics"), &ws.metrics)
		for {
			select {
			case <-ctx.Done():
				done <- ws
				return
			case <-page.C:
				count(get("/"), &ws.page)
			case <-scrape.C:
				count(get("/metrics"), &ws.metrics)
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
	return fmt.Sprintf("page %d, metrics %d, failed %d, spans %d, dropped %.0f B and %.0f spans", w.page, w.metrics, w.failed, w.spans, w.tapDropped, w.spansDropped)
}
