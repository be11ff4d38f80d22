package clitelemetry

import (
	"fmt"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/cbc-otel/cbc-otel/internal/otlpjson"
)

// Encoding is the wire format of an OTLP/HTTP request body.
type Encoding int

// The two encodings of OTLP/HTTP.
const (
	// Protobuf is binary protobuf, application/x-protobuf.
	Protobuf Encoding = iota
	// JSON is OTLP/JSON, application/json: protojson with the ids in hex.
	JSON
)

// errBadID is a trace or span id of the wrong length or not hex.
var errBadID = otlpjson.ErrBadID

var jsonOpts = protojson.UnmarshalOptions{DiscardUnknown: true}

// DecodeTraces decodes an ExportTraceServiceRequest and checks its ids.
func DecodeTraces(body []byte, enc Encoding) (*coltracepb.ExportTraceServiceRequest, error) {
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := decode(body, enc, req); err != nil {
		return nil, err
	}
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				if !idLen(s.GetTraceId(), 16, false) || !idLen(s.GetSpanId(), 8, false) || !idLen(s.GetParentSpanId(), 8, true) {
					return nil, errBadID
				}
				for _, l := range s.GetLinks() {
					if !idLen(l.GetTraceId(), 16, false) || !idLen(l.GetSpanId(), 8, false) {
						return nil, errBadID
					}
				}
			}
		}
	}
	return req, nil
}

// DecodeLogs decodes an ExportLogsServiceRequest and checks its ids (a log
// record may have none).
func DecodeLogs(body []byte, enc Encoding) (*collogspb.ExportLogsServiceRequest, error) {
	req := &collogspb.ExportLogsServiceRequest{}
	if err := decode(body, enc, req); err != nil {
		return nil, err
	}
	for _, rl := range req.GetResourceLogs() {
		for _, sl := range rl.GetScopeLogs() {
			for _, r := range sl.GetLogRecords() {
				if !idLen(r.GetTraceId(), 16, true) || !idLen(r.GetSpanId(), 8, true) {
					return nil, errBadID
				}
			}
		}
	}
	return req, nil
}

// DecodeMetrics decodes an ExportMetricsServiceRequest and checks the ids of
// its exemplars.
func DecodeMetrics(body []byte, enc Encoding) (*colmetricspb.ExportMetricsServiceRequest, error) {
	req := &colmetricspb.ExportMetricsServiceRequest{}
	if err := decode(body, enc, req); err != nil {
		return nil, err
	}
	bad := false
	ex := func(es []*metricspb.Exemplar) {
		for _, e := range es {
			if !idLen(e.GetTraceId(), 16, true) || !idLen(e.GetSpanId(), 8, true) {
				bad = true
			}
		}
	}
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				for _, p := range m.GetGauge().GetDataPoints() {
					ex(p.GetExemplars())
				}
				for _, p := range m.GetSum().GetDataPoints() {
					ex(p.GetExemplars())
				}
				for _, p := range m.GetHistogram().GetDataPoints() {
					ex(p.GetExemplars())
				}
				for _, p := range m.GetExponentialHistogram().GetDataPoints() {
					ex(p.GetExemplars())
				}
			}
		}
	}
	if bad {
		return nil, errBadID
	}
	return req, nil
}

// idLen reports whether id has n bytes, or none when that is allowed.
func idLen(id []byte, n int, emptyOK bool) bool {
	return len(id) == n || emptyOK && len(id) == 0
}

func decode(body []byte, enc Encoding, m proto.Message) error {
	switch enc {
	case Protobuf:
		if err := proto.Unmarshal(body, m); err != nil {
			return fmt.Errorf("protobuf: %w", err)
		}
		return nil
	case JSON:
		if err := otlpjson.Unmarshal(body, m, jsonOpts); err != nil {
			return fmt.Errorf("json: %w", err)
		}
		return nil
	}
	return fmt.Errorf("encoding %d: unknown", enc)
}
