// otlpReceiver is a local OTLP/gRPC trace receiver for the benchmark
// harness: a real peer for `run --otlp.endpoint` that only counts what it
// gets, so the figures include the export without a Collector's own load.
// (Folded from bench/internal/otlprecv: the harness is its one user.)

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	// The exporter compresses when OTEL_EXPORTER_OTLP_COMPRESSION says
	// gzip: the receiver must then know the codec, or every export fails.
	_ "google.golang.org/grpc/encoding/gzip"
)

// otlpReceiver is a local OTLP/gRPC trace receiver: it accepts every export
// and counts the spans, so that `run --otlp.endpoint` has a real peer to
// export to (a connection, protobuf decoding on the other side, the
// responses) without a Collector's own load on this machine.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	srv   *grpc.Server
	Addr  string // host:port it listens on
	spans atomic.Int64
	reqs  atomic.Int64
	done  chan error
}

// startOTLPReceiver listens on a loopback port and serves until Stop.
func startOTLPReceiver() (*otlpReceiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("OTLP receiver: %w", err)
	}
	r := &otlpReceiver{srv: grpc.NewServer(), Addr: l.Addr().String(), done: make(chan error, 1)}
	collectortrace.RegisterTraceServiceServer(r.srv, r)
	go func() { r.done <- r.srv.Serve(l) }()
	return r, nil
}

// Export is the TraceService method: it counts the request's spans.
func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	var n int64
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
		}
	}
	r.spans.Add(n)
	r.reqs.Add(1)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// Received returns the spans and export requests received so far.
func (r *otlpReceiver) Received() (spans, requests int64) {
	return r.spans.Load(), r.reqs.Load()
}

// Stop closes the listener and every connection and waits for the server.
func (r *otlpReceiver) Stop() error {
	r.srv.Stop()
	if err := <-r.done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("OTLP receiver: %w", err)
	}
	return nil
}
