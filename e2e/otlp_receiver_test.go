package e2e

// A tiny OTLP/HTTP receiver (traces, logs, metrics; protobuf or JSON) for
// the tests that look at what the real Claude Code exports by itself, on
// 127.0.0.1, kept in memory and flattened for assertions.

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	collectorlogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// otlpSpan is one received span, flattened.
type otlpSpan struct {
	Service, Scope          string
	Name                    string
	TraceID, SpanID, Parent string
	Attrs                   map[string]any
	Links                   []otlpLink
	Start, End              uint64 // unix ns
}

type otlpLink struct{ TraceID, SpanID string }

// otlpLog is one received log record (Claude Code's events), flattened.
type otlpLog struct {
	Service         string
	Event           string // event.name
	TraceID, SpanID string
	Attrs           map[string]any
}

// otlpReceiver collects what the CLI exports.
type otlpReceiver struct {
	URL string // http://127.0.0.1:PORT

	mu      sync.Mutex
	spans   []otlpSpan
	logs    []otlpLog
	metrics []string // metric names, one per received data batch
	posts   map[string]int
	ctypes  map[string]int
	auth    map[string]int // path and Authorization header → POSTs
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{URL: "http://" + ln.Addr().String(), posts: map[string]int{}, ctypes: map[string]int{}, auth: map[string]int{}}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return r
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	if err != nil || req.Method != http.MethodPost {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	ct := req.Header.Get("Content-Type")
	isJSON := strings.Contains(ct, "json")
	unmarshal := func(m proto.Message) error {
		if isJSON {
			return protojson.Unmarshal(body, m)
		}
		return proto.Unmarshal(body, m)
	}
	var resp proto.Message
	r.mu.Lock()
	defer r.mu.Unlock()
	r.posts[req.URL.Path]++
	r.ctypes[ct]++
	r.auth[req.URL.Path+" "+req.Header.Get("Authorization")]++
	switch req.URL.Path {
	case "/v1/traces":
		var m collectortrace.ExportTraceServiceRequest
		if err := unmarshal(&m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rs := range m.ResourceSpans {
			svc, _ := otlpAttrs(rs.GetResource().GetAttributes())["service.name"].(string)
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					sp := otlpSpan{Service: svc, Scope: ss.GetScope().GetName(), Name: s.Name,
						TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
						Parent: hex.EncodeToString(s.ParentSpanId), Attrs: otlpAttrs(s.Attributes),
						Start: s.StartTimeUnixNano, End: s.EndTimeUnixNano}
					for _, l := range s.Links {
						sp.Links = append(sp.Links, otlpLink{hex.EncodeToString(l.TraceId), hex.EncodeToString(l.SpanId)})
					}
					r.spans = append(r.spans, sp)
				}
			}
		}
		resp = &collectortrace.ExportTraceServiceResponse{}
	case "/v1/logs":
		var m collectorlogs.ExportLogsServiceRequest
		if err := unmarshal(&m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rl := range m.ResourceLogs {
			svc, _ := otlpAttrs(rl.GetResource().GetAttributes())["service.name"].(string)
			for _, sl := range rl.ScopeLogs {
				for _, l := range sl.LogRecords {
					a := otlpAttrs(l.Attributes)
					ev, _ := a["event.name"].(string)
					r.logs = append(r.logs, otlpLog{Service: svc, Event: ev, TraceID: hex.EncodeToString(l.TraceId),
						SpanID: hex.EncodeToString(l.SpanId), Attrs: a})
				}
			}
		}
		resp = &collectorlogs.ExportLogsServiceResponse{}
	case "/v1/metrics":
		var m collectormetrics.ExportMetricsServiceRequest
		if err := unmarshal(&m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rm := range m.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, mt := range sm.Metrics {
					r.metrics = append(r.metrics, mt.Name)
				}
			}
		}
		resp = &collectormetrics.ExportMetricsServiceResponse{}
	default:
		http.NotFound(w, req)
		return
	}
	var out []byte
	if isJSON {
		out, _ = protojson.Marshal(resp)
		w.Header().Set("Content-Type", "application/json")
	} else {
		out, _ = proto.Marshal(resp)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}
	w.Write(out)
}

// snapshot returns copies of what arrived so far.
func (r *otlpReceiver) snapshot() ([]otlpSpan, []otlpLog, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	posts := map[string]int{}
	for k, v := range r.posts {
		posts[k] = v
	}
	return append([]otlpSpan(nil), r.spans...), append([]otlpLog(nil), r.logs...), posts
}

// authorizations returns the POSTs so far by path and Authorization header.
func (r *otlpReceiver) authorizations() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.auth)
}

// otlpAttrs flattens OTLP attributes: strings, bools, int64, float64, and
// arrays/maps as their fmt rendering.
func otlpAttrs(kvs []*commonpb.KeyValue) map[string]any {
	out := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		out[kv.Key] = otlpValue(kv.Value)
	}
	return out
}

func otlpValue(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case nil:
		return nil
	default:
		return fmt.Sprint(v.GetValue())
	}
}
