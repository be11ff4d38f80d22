package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestPoll checks that the poller GETs the runs page and /metrics at
// once when it starts, and counts the answers.
func TestPoll(t *testing.T) {
	page, scrape := make(chan struct{}, 16), make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Write([]byte("<html>runs</html>"))
			page <- struct{}{}
		case "/metrics":
			w.Write([]byte("x 1\n"))
			scrape <- struct{}{}
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	stop := pollWeb(context.Background(), srv.Listener.Addr().String())
	// The poller GETs / then /metrics: once the /metrics handler ran, the
	// page GET was answered and counted; the /metrics GET may still be
	// reading its body when stop cancels it (then it is not counted).
	<-page
	<-scrape
	ws := stop()
	if ws.Page < 1 || ws.Metrics > 1 || ws.Failed != 0 {
		t.Fatalf("poller counted %v, want a page GET, at most 1 /metrics GET, none failed", ws)
	}
}
