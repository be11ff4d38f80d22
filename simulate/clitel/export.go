package clitel

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cbc-otel/cbc-otel/internal/otlpjson"
)

// Requests are built by hand from the generated proto types
// rather than through the OTel SDK: the SDK's HTTP trace exporter speaks
// only protobuf (the CLI also speaks http/json), the log SDK is not among
// our modules, and a stand-in must set ids, parents and timestamps (from
// its virtual clock) exactly, which the SDK keeps to itself.

// Bounds of an export queue.
const (
	queueCap      = 8192             // records waiting; beyond, new ones are dropped (never block the stream)
	maxBatch      = 512              // records per request
	exportTimeout = 10 * time.Second // one request, as OTEL_EXPORTER_OTLP_TIMEOUT's default
)

// exportQueue batches one signal's records on its own goroutine and posts
// them, so that a slow or absent receiver never holds up stdout.
type exportQueue[T any] struct {
	url      string
	headers  map[string]string
	json     bool
	wrap     func([]T) proto.Message // the request for a batch
	interval time.Duration
	client   *http.Client
	warn     func(error)

	q       chan T
	done    chan struct{}
	life    context.Context // ends when the final flush gives up
	cancel  context.CancelFunc
	dropped int // session goroutine only
}

func startQueue[T any](url, protocol string, headers map[string]string, interval time.Duration, warn func(error), wrap func([]T) proto.Message) *exportQueue[T] {
	life, cancel := context.WithCancel(context.Background())
	e := &exportQueue[T]{url: url, headers: headers, json: protocol == ProtocolJSON, wrap: wrap, interval: interval,
		client: &http.Client{}, warn: warn, q: make(chan T, queueCap), done: make(chan struct{}),
		life: life, cancel: cancel}
	go e.run()
	return e
}

// add queues v, or drops it when the queue is full.
func (e *exportQueue[T]) add(v T) {
	select {
	case e.q <- v:
	default:
		e.dropped++
	}
}

func (e *exportQueue[T]) run() {
	defer close(e.done)
	tick := time.NewTicker(e.interval)
	defer tick.Stop()
	var batch []T
	send := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(e.life, exportTimeout)
		if err := e.post(ctx, e.wrap(batch)); err != nil {
			e.warn(err)
		}
		cancel()
		batch = nil
	}
	for {
		select {
		case v, ok := <-e.q:
			if !ok { // closed by shutdown: what was queued is in batch
				send()
				return
			}
			if batch = append(batch, v); len(batch) >= maxBatch {
				send()
			}
		case <-tick.C:
			send()
		}
	}
}

// close ends the queue: the goroutine exports what is left and exits.
func (e *exportQueue[T]) close() { close(e.q) }

// wait waits for the final export until ctx ends, then abandons it.
func (e *exportQueue[T]) wait(ctx context.Context) {
	select {
	case <-e.done:
	case <-ctx.Done():
		e.cancel()
		<-e.done // the request in flight ends with e.life
	}
	e.cancel()
	if e.dropped > 0 {
		e.warn(fmt.Errorf("%d records dropped: the export queue was full", e.dropped))
	}
}

func (e *exportQueue[T]) post(ctx context.Context, m proto.Message) error {
	ct, encode := "application/x-protobuf", proto.Marshal
	if e.json {
		ct, encode = "application/json", otlpJSON
	}
	body, err := encode(m)
	if err != nil {
		return fmt.Errorf("encoding for %s: %w", e.url, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range e.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", ct)
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("export to %s: %s", e.url, resp.Status)
	}
	return nil
}

// otlpJSON encodes m as OTLP/JSON (ids in hex), which receivers expect.
func otlpJSON(m proto.Message) ([]byte, error) { return otlpjson.Marshal(m) }
