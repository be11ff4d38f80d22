package traces

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// Span kinds hashed into span ids. They are part of the id contract: a
// replay, a sidecar restart and the live wrapper must all derive the same
// ids, so these strings never change.
const (
	kindWorkflow = "workflow"
	kindPhase    = "phase"
	kindAgent    = "agent"
)

// TraceID returns the deterministic trace id of a run: the first 16 bytes of
// sha256("cbc-otel/trace\x00" + taskID + "\x00" + runID). Task ids are not
// always UUIDs (Claude Code's look like "ww1t7k50l"), so they are hashed,
// never parsed.
func TraceID(taskID, runID string) trace.TraceID {
	// One stack buffer and sha256.Sum256: no hash object, nothing on the
	// heap for ids of usual length (they are computed for every span).
	var buf [128]byte
	b := append(buf[:0], "cbc-otel/trace\x00"...)
	b = append(b, taskID...)
	b = append(b, 0)
	b = append(b, runID...)
	sum := sha256.Sum256(b)
	var id trace.TraceID
	copy(id[:], sum[:])
	if !id.IsValid() {
		id[15] = 1 // an all-zero id is invalid in W3C; 2^-128, but be total
	}
	return id
}

// SpanID returns the deterministic span id of one span of a run: the first 8
// bytes of sha256("cbc-otel/span\x00" + taskID + "\x00" + runID + "\x00" +
// kind + "\x00" + decimal index). kind is "workflow" (index 0), "phase"
// (the phase index) or "agent" (the agent index).
func SpanID(taskID, runID, kind string, index int) trace.SpanID {
	var buf [160]byte
	b := append(buf[:0], "cbc-otel/span\x00"...)
	b = append(b, taskID...)
	b = append(b, 0)
	b = append(b, runID...)
	b = append(b, 0)
	b = append(b, kind...)
	b = append(b, 0)
	b = strconv.AppendInt(b, int64(index), 10)
	sum := sha256.Sum256(b)
	var id trace.SpanID
	copy(id[:], sum[:])
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// IDs returns the trace id and the workflow span id of r as exported when
// no TRACEPARENT is in effect: a nested run's trace is its chain's root's,
// a resumed run's its first run's.
// Use (*Sink).IDs when the sink may have a parent: then the trace id is the
// parent's.
func IDs(r *ingest.Run) (trace.TraceID, trace.SpanID) {
	tid := TraceID(r.TaskID, r.RunID)
	if p := &r.Parent; p.TaskID != "" {
		tid = TraceID(p.RootTask, p.RootRun)
	} else if p := r.Resumes; p != nil {
		tid = TraceID(p.RootTask, p.RootRun)
	}
	return tid, SpanID(r.TaskID, r.RunID, kindWorkflow, 0)
}

// HexIDs is IDs as lowercase hex strings, the shape exemplars and Jaeger's
// /api/traces/{id} want.
func HexIDs(r *ingest.Run) (traceID, spanID string) {
	t, s := IDs(r)
	return t.String(), s.String()
}

// wantKey is the context key under which the Sink passes the ids it wants
// the next span to get.
type wantKey struct{}

type wantIDs struct {
	trace trace.TraceID
	span  trace.SpanID
}

// idsCtx is ctx with the ids wanted for the next span: one allocation,
// where context.WithValue took two (the context and the boxed ids), and
// Value answers a pointer, which boxes nothing.
type idsCtx struct {
	context.Context
	ids wantIDs
}

// Value returns the wanted ids (a *wantIDs) for wantKey, else ctx's value.
func (c *idsCtx) Value(key any) any {
	if _, ok := key.(wantKey); ok {
		return &c.ids
	}
	return c.Context.Value(key)
}

// withIDs returns ctx asking IDGenerator for these ids.
func withIDs(ctx context.Context, tid trace.TraceID, sid trace.SpanID) context.Context {
	return &idsCtx{Context: ctx, ids: wantIDs{trace: tid, span: sid}}
}

// IDGenerator is an sdktrace.IDGenerator that gives a span the ids the Sink
// put in its start context, so that span ids are a function of the stream
// and not of chance. Spans started by anyone else get random ids, as with
// the SDK's default generator.
type IDGenerator struct {
	mu  sync.Mutex
	rnd *rand.Rand
}

var _ sdktrace.IDGenerator = (*IDGenerator)(nil)

// NewIDGenerator returns an IDGenerator. A TracerProvider given to New must
// be built with it (sdktrace.WithIDGenerator) for the ids to be
// deterministic; Setup does so.
func NewIDGenerator() *IDGenerator {
	var seed [32]byte
	_, _ = crand.Read(seed[:]) // crypto/rand.Read never fails on supported platforms
	return &IDGenerator{rnd: rand.New(rand.NewChaCha8(seed))}
}

// NewIDs returns the wanted trace and span id, or random ones.
func (g *IDGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if w, ok := ctx.Value(wantKey{}).(*wantIDs); ok && w.trace.IsValid() && w.span.IsValid() {
		return w.trace, w.span
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var tid trace.TraceID
	var sid trace.SpanID
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], g.rnd.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], g.rnd.Uint64())
	}
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], g.rnd.Uint64())
	}
	return tid, sid
}

// NewSpanID returns the wanted span id, or a random one. The trace id is the
// parent's and is not ours to choose.
func (g *IDGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if w, ok := ctx.Value(wantKey{}).(*wantIDs); ok && w.span.IsValid() {
		return w.span
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], g.rnd.Uint64())
	}
	return sid
}

// ParentFromEnv returns the span context of a W3C TRACEPARENT (and
// TRACESTATE) in the environment, or an invalid one.
func ParentFromEnv(env func(string) string) trace.SpanContext {
	if env == nil {
		env = os.Getenv
	}
	carrier := propagation.MapCarrier{}
	if v := env("TRACEPARENT"); v != "" {
		carrier["traceparent"] = strings.TrimSpace(v)
	}
	if v := env("TRACESTATE"); v != "" {
		carrier["tracestate"] = strings.TrimSpace(v)
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
}
