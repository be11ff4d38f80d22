package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/cbc-otel/cbc-otel/internal/otlpjson"
)

// jsonExporter writes each export as one ExportTraceServiceRequest in OTLP/JSON
// on a line of its own: the format of the Collector's otlpjsonfile receiver
// (and of its file exporter).
type jsonExporter struct {
	mu     sync.Mutex
	w      *bufio.Writer
	closer io.Closer // nil for a writer we do not own (stderr)
	closed bool
	buf    []byte // the line being encoded, reused: see maxKeptBuf
}

// maxKeptBuf is the largest encoding buffer an exporter keeps between
// exports: a batch of 512 spans is ~0.5 MB of JSON, one that grew past
// this (huge attributes) is let go rather than held for the process's life.
const maxKeptBuf = 4 << 20

var _ sdktrace.SpanExporter = (*jsonExporter)(nil)

// newFileExporter creates (truncates) path.
func newFileExporter(path string) (*jsonExporter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("traces file: %w", err)
	}
	return &jsonExporter{w: bufio.NewWriter(f), closer: f}, nil
}

func newWriterExporter(w io.Writer) *jsonExporter {
	return &jsonExporter{w: bufio.NewWriter(w)}
}

// MarshalRequest encodes req as one line of OTLP/JSON, the format of the
// Collector's otlpjsonfile receiver (ids in hex, stable output).
func MarshalRequest(req *collectortrace.ExportTraceServiceRequest) ([]byte, error) {
	return otlpjson.Marshal(req)
}

// UnmarshalRequest decodes one line of OTLP/JSON (hex ids), as written by
// MarshalRequest or the Collector's file exporter.
func UnmarshalRequest(line []byte) (*collectortrace.ExportTraceServiceRequest, error) {
	req := &collectortrace.ExportTraceServiceRequest{}
	if err := otlpjson.Unmarshal(line, req, protojson.UnmarshalOptions{}); err != nil {
		return nil, err
	}
	return req, nil
}

// ExportSpans writes spans as one line and flushes it, so that a crash loses
// at most the batch being written.
func (e *jsonExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errors.New("traces file exporter is shut down")
	}
	b, err := AppendRequest(e.buf[:0], spans)
	b = append(b, '\n')
	if cap(b) <= maxKeptBuf {
		e.buf = b[:0]
	} else {
		e.buf = nil
	}
	if err != nil {
		return fmt.Errorf("encoding spans: %w", err)
	}
	e.w.Write(b)
	if err := e.w.Flush(); err != nil {
		return fmt.Errorf("writing spans: %w", err)
	}
	return nil
}

// Shutdown flushes and closes the file.
func (e *jsonExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	err := e.w.Flush()
	if e.closer != nil {
		if cerr := e.closer.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("closing traces file: %w", err)
	}
	return nil
}

// spanFlags are the W3C flags plus "we know whether the parent is remote".
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	if parent.IsRemote() {
		f |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	return f
}

func spanKind(k trace.SpanKind) tracepb.Span_SpanKind {
	switch k {
	case trace.SpanKindInternal:
		return tracepb.Span_SPAN_KIND_INTERNAL
	case trace.SpanKindServer:
		return tracepb.Span_SPAN_KIND_SERVER
	case trace.SpanKindClient:
		return tracepb.Span_SPAN_KIND_CLIENT
	case trace.SpanKindProducer:
		return tracepb.Span_SPAN_KIND_PRODUCER
	case trace.SpanKindConsumer:
		return tracepb.Span_SPAN_KIND_CONSUMER
	}
	return tracepb.Span_SPAN_KIND_UNSPECIFIED
}
