package main

import (
	"context"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestReceiver checks that the receiver counts the spans of every
// export it gets over gRPC.
func TestReceiver(t *testing.T) {
	rcv, err := startOTLPReceiver()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rcv.Stop(); err != nil {
			t.Error(err)
		}
	}()
	conn, err := grpc.NewClient(rcv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
	if spans, reqs := rcv.Received(); spans != 12 || reqs != 2 {
		t.Fatalf("received %d spans in %d requests, want 12 in 2", spans, reqs)
	}
}
