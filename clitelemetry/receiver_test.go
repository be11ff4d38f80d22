package clitelemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// recorder is a Handler keeping every request.
type recorder struct {
	mu      sync.Mutex
	traces  []*coltracepb.ExportTraceServiceRequest
	logs    []*collogspb.ExportLogsServiceRequest
	metrics []*colmetricspb.ExportMetricsServiceRequest
}

func (r *recorder) Traces(_ context.Context, m *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.traces = append(r.traces, m)
}

func (r *recorder) Logs(_ context.Context, m *collogspb.ExportLogsServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, m)
}

func (r *recorder) Metrics(_ context.Context, m *colmetricspb.ExportMetricsServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics = append(r.metrics, m)
}

func (r *recorder) reset() (t []*coltracepb.ExportTraceServiceRequest, l []*collogspb.ExportLogsServiceRequest, m []*colmetricspb.ExportMetricsServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, l, m = r.traces, r.logs, r.metrics
	r.traces, r.logs, r.metrics = nil, nil, nil
	return t, l, m
}

// testToken is the token of the receivers listen starts, which post and
// the other requests of these tests present.
const testToken = "test-token-0123456789_ABCDEF"

// authorized adds the receivers' token to req.
func authorized(req *http.Request) *http.Request {
	req.Header.Set("Authorization", "Bearer "+testToken)
	return req
}

func listen(t *testing.T, cfg ReceiverConfig, h Handler) *Receiver {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	r, err := Listen(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return r
}

func post(t testing.TB, url, ct, ce string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ct)
	if ce != "" {
		req.Header.Set("Content-Encoding", ce)
	}
	resp, err := http.DefaultClient.Do(authorized(req))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// toProtobuf re-encodes a recorded JSON body as binary protobuf.
func toProtobuf(t testing.TB, path string, body []byte) []byte {
	t.Helper()
	var m proto.Message
	var err error
	switch path {
	case "/v1/traces":
		m, err = DecodeTraces(body, JSON)
	case "/v1/logs":
		m, err = DecodeLogs(body, JSON)
	case "/v1/metrics":
		m, err = DecodeMetrics(body, JSON)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hexs(b []byte) string { return hex.EncodeToString(b) }

// TestReceiverCorpus posts every recorded request as recorded (JSON) and as
// protobuf, plain and gzipped, and checks what the Handler gets against the
// JSON: the number of spans, log records and points, and every id.
func TestReceiverCorpus(t *testing.T) {
	rec := &recorder{}
	r := listen(t, ReceiverConfig{}, rec)
	corpus := loadCorpus(t)
	for _, l := range corpus {
		want := generic(t, l.Body)
		wantIDs, wantPoints := jsonIDs(want), jsonPoints(want)
		pb := toProtobuf(t, l.Path, l.Body)
		for _, tc := range []struct {
			name, ct, ce string
			body         []byte
		}{
			{"json", "application/json", "", l.Body},
			{"json+gzip", "application/json", "gzip", gz(t, l.Body)},
			{"protobuf", "application/x-protobuf", "", pb},
			{"protobuf+gzip", "application/x-protobuf", "gzip", gz(t, pb)},
		} {
			t.Run(l.Name+"/"+tc.name, func(t *testing.T) {
				resp, body := post(t, r.Endpoint()+l.Path, tc.ct, tc.ce, tc.body)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				if got := resp.Header.Get("Content-Type"); got != tc.ct {
					t.Errorf("response content type %q, want %q", got, tc.ct)
				}
				if tc.ct == "application/json" && string(body) != "{}" {
					t.Errorf("response body %q, want {}", body)
				}
				if tc.ct == "application/x-protobuf" && len(body) != 0 {
					t.Errorf("response body %x, want empty", body)
				}
				traces, logs, metrics := rec.reset()
				var gotIDs [][3]string
				points := 0
				switch l.Path {
				case "/v1/traces":
					if len(traces) != 1 {
						t.Fatalf("%d trace requests handled, want 1", len(traces))
					}
					for _, rs := range traces[0].GetResourceSpans() {
						for _, ss := range rs.GetScopeSpans() {
							for _, s := range ss.GetSpans() {
								gotIDs = append(gotIDs, [3]string{hexs(s.GetTraceId()), hexs(s.GetSpanId()), hexs(s.GetParentSpanId())})
							}
						}
					}
				case "/v1/logs":
					if len(logs) != 1 {
						t.Fatalf("%d log requests handled, want 1", len(logs))
					}
					for _, rl := range logs[0].GetResourceLogs() {
						for _, sl := range rl.GetScopeLogs() {
							for _, lr := range sl.GetLogRecords() {
								gotIDs = append(gotIDs, [3]string{hexs(lr.GetTraceId()), hexs(lr.GetSpanId()), ""})
							}
						}
					}
				case "/v1/metrics":
					if len(metrics) != 1 {
						t.Fatalf("%d metric requests handled, want 1", len(metrics))
					}
					points = CountDataPoints(metrics[0].GetResourceMetrics())
				}
				if fmt.Sprint(gotIDs) != fmt.Sprint(wantIDs) {
					t.Errorf("ids:\n got %v\nwant %v", gotIDs, wantIDs)
				}
				if points != wantPoints {
					t.Errorf("%d data points, want %d", points, wantPoints)
				}
			})
		}
	}
	st := r.Stats()
	var spans, records, points int
	for _, l := range corpus {
		g := generic(t, l.Body)
		switch l.Path {
		case "/v1/traces":
			spans += len(jsonIDs(g))
		case "/v1/logs":
			records += len(jsonIDs(g))
		case "/v1/metrics":
			points += jsonPoints(g)
		}
	}
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"spans", st.Traces.Items.Load(), 4 * int64(spans)},
		{"log records", st.Logs.Items.Load(), 4 * int64(records)},
		{"points", st.Metrics.Items.Load(), 4 * int64(points)},
	} {
		if c.got != c.want || c.want == 0 {
			t.Errorf("Stats %s = %d, want %d (> 0)", c.name, c.got, c.want)
		}
	}
	t.Logf("corpus: %d requests, %d spans, %d log records, %d points", len(corpus), spans, records, points)
}

// logsWithIDs is a one-record logs request with the given ids, as protobuf.
func logsWithIDs(t testing.TB, tid, sid []byte) []byte {
	t.Helper()
	b, err := proto.Marshal(&collogspb.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{
		ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{TraceId: tid, SpanId: sid}}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func spanWithIDs(t testing.TB, tid, sid []byte) []byte {
	t.Helper()
	b, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{TraceId: tid, SpanId: sid, Name: "x"}}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReceiverErrors checks each refusal's status, body and counter.
func TestReceiverErrors(t *testing.T) {
	const limit = 64 << 10
	r := listen(t, ReceiverConfig{MaxBodyBytes: limit}, &recorder{})
	tid, sid := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 8)
	big := bytes.Repeat([]byte(" "), limit+1)
	bomb := gz(t, bytes.Repeat([]byte(" "), 4*limit))
	if len(bomb) >= limit {
		t.Fatalf("bomb of %d bytes is not small", len(bomb))
	}
	st := r.Stats()
	for _, tc := range []struct {
		name, method, path, ct, ce string
		body                       []byte
		chunked                    bool
		want                       int
		counter                    *atomic.Int64
		status                     bool // a google.rpc.Status body in ct
	}{
		{"get", http.MethodGet, "/v1/traces", "application/json", "", nil, false, 405, &st.Traces.WrongMethod, false},
		{"put", http.MethodPut, "/v1/logs", "application/json", "", []byte("{}"), false, 405, &st.Logs.WrongMethod, false},
		{"unknown path", http.MethodPost, "/v1/profiles", "application/json", "", []byte("{}"), false, 404, &st.NotFound, false},
		{"text/plain", http.MethodPost, "/v1/metrics", "text/plain", "", []byte("{}"), false, 415, &st.Metrics.UnsupportedMedia, false},
		{"no content type", http.MethodPost, "/v1/metrics", "", "", []byte("{}"), false, 415, &st.Metrics.UnsupportedMedia, false},
		{"brotli", http.MethodPost, "/v1/traces", "application/json", "br", []byte("{}"), false, 415, &st.Traces.UnsupportedMedia, false},
		{"bad json", http.MethodPost, "/v1/traces", "application/json", "", []byte(`{"resourceSpans":[`), false, 400, &st.Traces.BadRequest, true},
		{"json trailing data", http.MethodPost, "/v1/traces", "application/json", "", []byte(`{} {}`), false, 400, &st.Traces.BadRequest, true},
		{"json wrong type", http.MethodPost, "/v1/logs", "application/json", "", []byte(`{"resourceLogs":{}}`), false, 400, &st.Logs.BadRequest, true},
		{"json base64 id", http.MethodPost, "/v1/traces", "application/json", "", []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"AQEBAQEBAQEBAQEBAQEBAQ==","spanId":"0202020202020202"}]}]}]}`), false, 400, &st.Traces.BadRequest, true},
		{"json short span id", http.MethodPost, "/v1/traces", "application/json", "", []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0123456789abcdef0123456789abcdef","spanId":"0202"}]}]}]}`), false, 400, &st.Traces.BadRequest, true},
		{"json numeric id", http.MethodPost, "/v1/logs", "application/json", "", []byte(`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"spanId":12}]}]}]}`), false, 400, &st.Logs.BadRequest, true},
		{"json bad exemplar id", http.MethodPost, "/v1/metrics", "application/json", "", []byte(`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"gauge":{"dataPoints":[{"asInt":"1","exemplars":[{"traceId":"zz"}]}]}}]}]}]}`), false, 400, &st.Metrics.BadRequest, true},
		{"protobuf garbage", http.MethodPost, "/v1/logs", "application/x-protobuf", "", []byte{0xff, 0xff, 0xff}, false, 400, &st.Logs.BadRequest, true},
		{"protobuf short trace id", http.MethodPost, "/v1/logs", "application/x-protobuf", "", logsWithIDs(t, tid[:15], sid), false, 400, &st.Logs.BadRequest, true},
		{"protobuf span without ids", http.MethodPost, "/v1/traces", "application/x-protobuf", "", spanWithIDs(t, nil, nil), false, 400, &st.Traces.BadRequest, true},
		{"bad gzip", http.MethodPost, "/v1/logs", "application/x-protobuf", "gzip", []byte("not gzip"), false, 400, &st.Logs.BadRequest, true},
		{"truncated gzip", http.MethodPost, "/v1/logs", "application/x-protobuf", "gzip", gz(t, logsWithIDs(t, tid, sid))[:20], false, 400, &st.Logs.BadRequest, true},
		{"too large", http.MethodPost, "/v1/logs", "application/json", "", big, false, 413, &st.Logs.TooLarge, true},
		{"too large chunked", http.MethodPost, "/v1/logs", "application/json", "", big, true, 413, &st.Logs.TooLarge, true},
		{"gzip bomb", http.MethodPost, "/v1/traces", "application/x-protobuf", "gzip", bomb, false, 413, &st.Traces.TooLarge, true},
		{"ok", http.MethodPost, "/v1/logs", "application/x-protobuf", "", logsWithIDs(t, tid, sid), false, 200, &st.Logs.OK, false},
		{"ok without ids", http.MethodPost, "/v1/logs", "application/x-protobuf", "", logsWithIDs(t, nil, nil), false, 200, &st.Logs.OK, false},
		{"ok charset", http.MethodPost, "/v1/logs", "application/json; charset=utf-8", "", []byte(`{}`), false, 200, &st.Logs.OK, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = bytes.NewReader(tc.body)
			if tc.chunked {
				body = io.MultiReader(body) // hides the length: chunked
			}
			req, err := http.NewRequest(tc.method, r.Endpoint()+tc.path, body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.ct != "" {
				req.Header.Set("Content-Type", tc.ct)
			}
			if tc.ce != "" {
				req.Header.Set("Content-Encoding", tc.ce)
			}
			resp, b := sendCounted(t, authorized(req), tc.want, tc.counter)
			if tc.status {
				var s spb.Status
				var err error
				if strings.HasPrefix(tc.ct, "application/json") {
					err = protojson.Unmarshal(b, &s)
				} else {
					err = proto.Unmarshal(b, &s)
				}
				if err != nil || s.GetMessage() == "" || s.GetCode() == 0 {
					t.Errorf("body %q: not a google.rpc.Status with code and message (%v)", b, err)
				}
			}
			if tc.want == 405 && resp.Header.Get("Allow") != http.MethodPost {
				t.Errorf("Allow %q, want POST", resp.Header.Get("Allow"))
			}
		})
	}
}

// sendCounted sends req, which must be answered status want and move
// counter by one; it returns the answer and its body.
func sendCounted(t *testing.T, req *http.Request, want int, counter *atomic.Int64) (*http.Response, []byte) {
	t.Helper()
	before := counter.Load()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("status %d (%q), want %d", resp.StatusCode, b, want)
	}
	if got := counter.Load() - before; got != 1 {
		t.Errorf("counter moved by %d, want 1", got)
	}
	return resp, b
}

// blocking is a Handler whose Logs calls wait for release, telling entered.
type blocking struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blocking) Traces(context.Context, *coltracepb.ExportTraceServiceRequest) {}
func (b *blocking) Metrics(context.Context, *colmetricspb.ExportMetricsServiceRequest) {
}

func (b *blocking) Logs(context.Context, *collogspb.ExportLogsServiceRequest) {
	b.entered <- struct{}{}
	<-b.release
}

// TestReceiverBusy: with every slot taken, a request is answered 503 with
// Retry-After at once, and served again once a slot is free.
func TestReceiverBusy(t *testing.T) {
	h := &blocking{entered: make(chan struct{}), release: make(chan struct{})}
	r := listen(t, ReceiverConfig{MaxConcurrent: 1, BusyWait: -1}, h)
	body := logsWithIDs(t, nil, nil)
	first := make(chan int)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, r.Endpoint()+"/v1/logs", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-protobuf")
		resp, err := http.DefaultClient.Do(authorized(req))
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-h.entered
	resp, _ := post(t, r.Endpoint()+"/v1/logs", "application/x-protobuf", "", body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("over the bound: status %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(h.release)
	if got := <-first; got != http.StatusOK {
		t.Errorf("first request: status %d, want 200", got)
	}
	go func() { <-h.entered }()
	if resp, _ := post(t, r.Endpoint()+"/v1/logs", "application/x-protobuf", "", body); resp.StatusCode != http.StatusOK {
		t.Errorf("after release: status %d, want 200", resp.StatusCode)
	}
	if got := r.Stats().Logs.Busy.Load(); got != 1 {
		t.Errorf("Busy = %d, want 1", got)
	}
}

// counting is a Handler tracking how many calls run at once.
type counting struct {
	now, peak atomic.Int64
	spans     atomic.Int64
}

func (c *counting) enter() {
	n := c.now.Add(1)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			break
		}
	}
	runtime.Gosched()
	c.now.Add(-1)
}

func (c *counting) Traces(_ context.Context, m *coltracepb.ExportTraceServiceRequest) {
	c.spans.Add(int64(CountSpans(m.GetResourceSpans())))
	c.enter()
}
func (c *counting) Logs(context.Context, *collogspb.ExportLogsServiceRequest)          { c.enter() }
func (c *counting) Metrics(context.Context, *colmetricspb.ExportMetricsServiceRequest) { c.enter() }

// bigTraces is an OTLP/JSON traces request of about size bytes.
func bigTraces(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"claude-code"}}]},"scopeSpans":[{"spans":[`)
	for i := 0; b.Len() < size-300; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"traceId":"0123456789abcdef0123456789abcdef","spanId":"%016x","name":"s","kind":1,"startTimeUnixNano":"1","endTimeUnixNano":"2","attributes":[{"key":"k","value":{"stringValue":"%s"}},{"key":"n","value":{"intValue":"%d"}}]}`, i+1, strings.Repeat("x", 64), i)
	}
	b.WriteString(`]}]}]}`)
	return []byte(b.String())
}

// TestReceiverFlood sends many concurrent large requests: every one is
// answered (200 or 503), no more than MaxConcurrent are handled at once,
// and the heap stays within MaxConcurrent × MaxBodyBytes × a decoding factor.
func TestReceiverFlood(t *testing.T) {
	const maxBody = 1 << 20
	jsonBody := bigTraces(maxBody - 1024)
	for _, tc := range []struct {
		name, ct string
		body     []byte
	}{
		{"json", "application/json", jsonBody},
		{"protobuf", "application/x-protobuf", toProtobuf(t, "/v1/traces", bigTraces(2*maxBody))[:0]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body
			if len(body) == 0 {
				// As much protobuf as fits the cap.
				full := toProtobuf(t, "/v1/traces", bigTraces(3*maxBody))
				req, _ := DecodeTraces(full, Protobuf)
				spans := req.ResourceSpans[0].ScopeSpans[0].Spans
				for {
					b, _ := proto.Marshal(req)
					if len(b) <= maxBody {
						body = b
						break
					}
					spans = spans[:len(spans)*9/10]
					req.ResourceSpans[0].ScopeSpans[0].Spans = spans
				}
			}
			flood(t, tc.ct, body, maxBody)
		})
	}
}

func flood(t *testing.T, ct string, body []byte, maxBody int) {
	const (
		concurrent = 2
		clients    = 64
	)
	h := &counting{}
	r := listen(t, ReceiverConfig{MaxBodyBytes: int64(maxBody), MaxConcurrent: concurrent, BusyWait: 20 * time.Millisecond}, h)
	spansPer := int64(CountSpans(mustTraces(t, ct, body).GetResourceSpans()))

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				if ms.HeapAlloc > peak.Load() {
					peak.Store(ms.HeapAlloc)
				}
			}
		}
	}()

	var ok, busy, other atomic.Int64
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: clients, MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	for range clients {
		wg.Go(func() {
			for range 3 {
				req, _ := http.NewRequest(http.MethodPost, r.Endpoint()+"/v1/traces", bytes.NewReader(body))
				req.Header.Set("Content-Type", ct)
				resp, err := client.Do(authorized(req))
				if err != nil {
					t.Errorf("request: %v", err)
					other.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusServiceUnavailable:
					busy.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	grown := int64(peak.Load()) - int64(base.HeapAlloc)
	t.Logf("flood: %d requests of %d KiB: %d ok, %d busy, %d other; peak concurrent handlers %d; heap peak +%d MiB (bound %d × %d MiB)",
		clients*3, len(body)>>10, ok.Load(), busy.Load(), other.Load(), h.peak.Load(), grown>>20, concurrent, maxBody>>20)
	if ok.Load()+busy.Load() != clients*3 || other.Load() != 0 {
		t.Errorf("not every request answered 200 or 503")
	}
	if ok.Load() == 0 {
		t.Errorf("no request served")
	}
	if h.peak.Load() > concurrent {
		t.Errorf("%d handlers at once, bound %d", h.peak.Load(), concurrent)
	}
	if got, want := h.spans.Load(), ok.Load()*spansPer; got != want {
		t.Errorf("%d spans handled, want %d", got, want)
	}
	st := r.Stats()
	if st.Traces.OK.Load() != ok.Load() || st.Traces.Busy.Load() != busy.Load() {
		t.Errorf("Stats OK %d Busy %d, want %d %d", st.Traces.OK.Load(), st.Traces.Busy.Load(), ok.Load(), busy.Load())
	}
	// Decoding JSON generically costs a multiple of the body; 40× per slot
	// plus the clients' own buffers is generous and still catches an
	// unbounded receiver (64 × 3 bodies decoded at once).
	if limit := int64(concurrent*maxBody*40 + clients*maxBody + 32<<20); grown > limit {
		t.Errorf("heap grew by %d MiB, want under %d MiB", grown>>20, limit>>20)
	}
}

func mustTraces(t *testing.T, ct string, body []byte) *coltracepb.ExportTraceServiceRequest {
	t.Helper()
	enc, _ := encodingOf(ct)
	m, err := DecodeTraces(body, enc)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestReceiverShutdown: Shutdown is idempotent and refuses later requests.
func TestReceiverShutdown(t *testing.T) {
	r, err := Listen(ReceiverConfig{}, Handlers{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 2 {
		if err := r.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := http.Post(r.Endpoint()+"/v1/logs", "application/json", strings.NewReader("{}")); err == nil {
		t.Error("request after Shutdown succeeded")
	}
}

// TestReceiverAuth: only the receiver's own token gets in. Everything else
// (no header, another scheme, another token, one character off, a prefix,
// two headers), on any path and with any method, is answered 401 with a
// google.rpc.Status before the Handler, the method or the path is looked
// at, and counted by reason; the debug log says why without the token or
// what was presented.
func TestReceiverAuth(t *testing.T) {
	var logs bytes.Buffer
	rec := &recorder{}
	r := listen(t, ReceiverConfig{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, rec)
	off := []byte(testToken)
	off[len(off)-1] ^= 1
	body := logsWithIDs(t, nil, nil)
	st := &r.Stats().Unauthorized
	for _, tc := range []struct {
		name, method, path string
		auth               []string // Authorization headers
		want               int
		counter            *atomic.Int64
	}{
		{"no header", http.MethodPost, "/v1/logs", nil, 401, &st.Missing},
		{"no header, unknown path", http.MethodPost, "/v1/profiles", nil, 401, &st.Missing},
		{"no header, GET", http.MethodGet, "/v1/traces", nil, 401, &st.Missing},
		{"empty header", http.MethodPost, "/v1/logs", []string{""}, 401, &st.Malformed},
		{"basic auth", http.MethodPost, "/v1/logs", []string{"Basic dXNlcjpwYXNz"}, 401, &st.Malformed},
		{"bare token", http.MethodPost, "/v1/logs", []string{testToken}, 401, &st.Malformed},
		{"scheme only", http.MethodPost, "/v1/metrics", []string{"Bearer"}, 401, &st.Malformed},
		{"two headers", http.MethodPost, "/v1/logs", []string{"Bearer " + testToken, "Bearer " + testToken}, 401, &st.Malformed},
		{"another token", http.MethodPost, "/v1/traces", []string{"Bearer sk-not-the-childs-token-000"}, 401, &st.Wrong},
		{"one character off", http.MethodPost, "/v1/logs", []string{"Bearer " + string(off)}, 401, &st.Wrong},
		{"a prefix", http.MethodPost, "/v1/logs", []string{"Bearer " + testToken[:MinTokenLen]}, 401, &st.Wrong},
		{"token and more", http.MethodPost, "/v1/logs", []string{"Bearer " + testToken + "x"}, 401, &st.Wrong},
		{"the token", http.MethodPost, "/v1/logs", []string{"Bearer " + testToken}, 200, &r.Stats().Logs.OK},
		{"scheme in lower case", http.MethodPost, "/v1/logs", []string{"bearer " + testToken}, 200, &r.Stats().Logs.OK},
		{"the token, unknown path", http.MethodPost, "/v1/profiles", []string{"Bearer " + testToken}, 404, &r.Stats().NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, r.Endpoint()+tc.path, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/x-protobuf")
			for _, a := range tc.auth {
				req.Header.Add("Authorization", a)
			}
			resp, b := sendCounted(t, req, tc.want, tc.counter)
			if tc.want != 401 {
				return
			}
			var s spb.Status
			if err := proto.Unmarshal(b, &s); err != nil || s.GetCode() != 16 || s.GetMessage() == "" { // 16: Unauthenticated
				t.Errorf("body %q: not a google.rpc.Status Unauthenticated (%v)", b, err)
			}
			if resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	if tr, l, m := rec.reset(); len(tr) != 0 || len(l) != 2 || len(m) != 0 {
		t.Errorf("the Handler got %d traces, %d logs, %d metrics requests; want the 2 authorized logs requests", len(tr), len(l), len(m))
	}
	got := logs.String()
	if strings.Count(got, "request refused") != 12 {
		t.Errorf("the debug log has %d refusals, want 12:\n%s", strings.Count(got, "request refused"), got)
	}
	for _, secret := range []string{testToken, testToken[:MinTokenLen], string(off), "sk-not-the-childs", "dXNlcjpwYXNz"} {
		if strings.Contains(got, secret) {
			t.Errorf("the log shows %q:\n%s", secret, got)
		}
	}
}

// TestReceiverToken: without a Token each receiver makes its own, random,
// which Headers hands to an OTel exporter; a token that is short or needs
// escaping is refused.
func TestReceiverToken(t *testing.T) {
	seen := map[string]bool{}
	for range 3 {
		r, err := Listen(ReceiverConfig{}, Handlers{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Shutdown(context.Background())
		h := r.Headers()
		tok, ok := strings.CutPrefix(h, "authorization=Bearer%20")
		if !ok || len(tok) != 43 || checkToken(tok) != nil || seen[tok] {
			t.Fatalf("Headers() = %q: want authorization=Bearer%%20 and a new 43-character token", h)
		}
		seen[tok] = true
		// What an exporter makes of the variable: the value percent-decoded.
		v, err := url.PathUnescape(strings.TrimPrefix(h, "authorization="))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, r.Endpoint()+"/v1/logs", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", v)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("with Headers()'s value: %d", resp.StatusCode)
		}
	}
	for _, bad := range []string{"short-token", testToken + " ", testToken + "=", "tok%20" + testToken, "tøken-" + testToken, testToken + "+/"} {
		if r, err := Listen(ReceiverConfig{Token: bad}, Handlers{}); err == nil {
			r.Shutdown(context.Background())
			t.Errorf("Listen took the token %q", bad)
		}
	}
}
