package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestStampLine checks that the probe lines are valid JSON, carry their
// stamp where the reader looks for it, stay about 200 bytes, and run
// through whole task cycles (started, progress, notification).
func TestStampLine(t *testing.T) {
	var subtypes []string
	buf := make([]byte, 0, 256)
	for seq := -1; seq < 2*latencyCycle; seq++ {
		before := time.Now().UnixNano()
		buf = stampLine(buf, seq)
		var l struct {
			Subtype string `json:"subtype"`
			TaskID  string `json:"task_id"`
			T       int64  `json:"t"`
		}
		if err := json.Unmarshal(buf, &l); err != nil {
			t.Fatalf("line %d: %v: %s", seq, err, buf)
		}
		if l.T < before || bytes.Count(buf, []byte(stampField)) != 1 {
			t.Fatalf("line %d: stamp %d (before %d): %s", seq, l.T, before, buf)
		}
		if len(buf) < 150 || len(buf) > 250 {
			t.Errorf("line %d is %d bytes", seq, len(buf))
		}
		if seq >= 0 {
			subtypes = append(subtypes, l.Subtype)
		}
	}
	for i, st := range subtypes {
		want := "task_progress"
		switch i % latencyCycle {
		case 0:
			want = "task_started"
		case latencyCycle - 1:
			want = "task_notification"
		}
		if st != want {
			t.Fatalf("line %d is %s, want %s", i, st, want)
		}
	}
}

// TestAddedSeries checks that the added latency is taken run by run.
func TestAddedSeries(t *testing.T) {
	run := []latencyQuantiles{{p50: 10, p99: 100}, {p50: 20, p99: 50}}
	base := []latencyQuantiles{{p50: 4, p99: 120}, {p50: 5, p99: 10}}
	a50, a99 := addedSeries(run, base)
	if len(a50) != 2 || a50[0] != 6 || a50[1] != 15 || a99[0] != -20 || a99[1] != 40 {
		t.Fatalf("added p50 %v, p99 %v", a50, a99)
	}
}

// TestOTLPReceiver checks that the receiver counts the spans of every
// export it gets over gRPC.
func TestOTLPReceiver(t *testing.T) {
	rcv, err := startOTLPReceiver()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rcv.stop(); err != nil {
			t.Error(err)
		}
	}()
	conn, err := grpc.NewClient(rcv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := collectortrace.NewTraceServiceClient(conn)
	req := &collectortrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{
		{ScopeSpans: []*tracepb.ScopeSpans{{Spans: make([]*tracepb.Span, 3)}, {Spans: make([]*tracepb.Span, 2)}}},
		{ScopeSpans: []*tracepb.ScopeSpans{{Spans: make([]*tracepb.Span, 1)}}},
	}}
	for i := range req.ResourceSpans {
		for _, ss := range req.ResourceSpans[i].ScopeSpans {
			for j := range ss.Spans {
				ss.Spans[j] = &tracepb.Span{Name: "s"}
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		if _, err := client.Export(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if spans, reqs := rcv.received(); spans != 12 || reqs != 2 {
		t.Fatalf("received %d spans in %d requests, want 12 in 2", spans, reqs)
	}
}

// TestPollWeb checks that the poller GETs the runs page and /metrics at
// once when it starts, and counts the answers.
func TestPollWeb(t *testing.T) {
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
	if ws.page < 1 || ws.metrics > 1 || ws.failed != 0 {
		t.Fatalf("poller counted %v, want a page GET, at most 1 /metrics GET, none failed", ws)
	}
}
