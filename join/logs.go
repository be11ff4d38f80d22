package join

import (
	"context"
	"math"
	"strconv"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/safetext"
)

// Attribute keys of Claude Code's api_request event.
const (
	keyEventName     = "event.name"
	keySessionID     = "session.id"
	keyModel         = "model"
	keyCostUSD       = "cost_usd"
	keyInput         = "input_tokens"
	keyOutput        = "output_tokens"
	keyCacheRead     = "cache_read_tokens"
	keyCacheCreation = "cache_creation_tokens"
	keyDurationMs    = "duration_ms"
	eventAPIRequest  = "api_request"
	maxModelLen      = 128
	maxIDLen         = 128
)

// Logs hands every api_request event to the pipeline as a model call, then
// forwards the request.
func (j *Joiner) Logs(_ context.Context, req *collogspb.ExportLogsServiceRequest) {
	now := j.opts.Now()
	for _, rl := range req.GetResourceLogs() {
		for _, sl := range rl.GetScopeLogs() {
			for _, lr := range sl.GetLogRecords() {
				j.stats.LogRecords.Add(1)
				c, ok := modelCall(lr)
				if !ok {
					continue
				}
				j.stats.ModelCalls.Add(1)
				// The event's active span is the Workflow call's
				// execution: it names the run.
				j.call(c, lr.GetSpanId(), now)
			}
		}
	}
	if j.opts.Logs != nil {
		j.opts.Logs(req)
	}
}

// Metrics forwards the request.
func (j *Joiner) Metrics(_ context.Context, req *colmetricspb.ExportMetricsServiceRequest) {
	var n int64
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				n += int64(len(m.GetSum().GetDataPoints()) + len(m.GetGauge().GetDataPoints()) +
					len(m.GetHistogram().GetDataPoints()) + len(m.GetExponentialHistogram().GetDataPoints()) +
					len(m.GetSummary().GetDataPoints()))
			}
		}
	}
	j.stats.DataPoints.Add(n)
	if j.opts.Metrics != nil {
		j.opts.Metrics(req)
	}
}

// modelCall reads an api_request event. Values are untrusted: ids and
// model names are cleaned and bounded, numbers must be finite and not
// negative.
func modelCall(lr *logspb.LogRecord) (ingest.ModelCall, bool) {
	attrs := lr.GetAttributes()
	name := str(attrs, keyEventName)
	if name == "" {
		name = lr.GetEventName()
	}
	if name != eventAPIRequest && name != "claude_code."+eventAPIRequest {
		return ingest.ModelCall{}, false
	}
	c := ingest.ModelCall{
		AgentID:   safetext.Clean(str(attrs, keyAgentID), maxIDLen),
		SessionID: safetext.Clean(str(attrs, keySessionID), maxIDLen),
		Cost: cost.Model{
			Model:   safetext.Clean(str(attrs, keyModel), maxModelLen),
			CostUSD: num(attrs, keyCostUSD),
		},
		DurationMs: int64(num(attrs, keyDurationMs)),
		At:         int64(lr.GetTimeUnixNano() / 1e6),
	}
	c.Cost.Tokens[cost.TokensInput] = int64(num(attrs, keyInput))
	c.Cost.Tokens[cost.TokensOutput] = int64(num(attrs, keyOutput))
	c.Cost.Tokens[cost.TokensCacheRead] = int64(num(attrs, keyCacheRead))
	c.Cost.Tokens[cost.TokensCacheCreation] = int64(num(attrs, keyCacheCreation))
	return c, true
}

// maxCount bounds one call's numbers: a token count or a dollar amount
// beyond it is not a model call, it is garbage.
const maxCount = 1e12

// num reads a number however the exporter typed it (int, double, or a
// numeric string); anything else, negative, or not finite is 0.
func num(attrs []*commonpb.KeyValue, key string) float64 {
	for _, kv := range attrs {
		if kv.GetKey() != key {
			continue
		}
		var v float64
		switch x := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_IntValue:
			v = float64(x.IntValue)
		case *commonpb.AnyValue_DoubleValue:
			v = x.DoubleValue
		case *commonpb.AnyValue_StringValue:
			f, err := strconv.ParseFloat(x.StringValue, 64)
			if err != nil {
				return 0
			}
			v = f
		}
		if math.IsNaN(v) || v < 0 || v > maxCount {
			return 0
		}
		return v
	}
	return 0
}
