package clitelemetry

import (
	"testing"

	"github.com/cbc-otel/cbc-otel/internal/clicorpus"
)

// corpusLine is one recorded OTLP/HTTP request of the CLI.
type corpusLine = clicorpus.Line

// loadCorpus reads every recorded request under testdata.
func loadCorpus(t testing.TB) []corpusLine { return clicorpus.Load(t) }

// The corpus's JSON walkers (see clicorpus).
var (
	generic    = clicorpus.Generic
	list       = clicorpus.List
	str        = clicorpus.Str
	jsonPoints = clicorpus.Points
)

// jsonIDs lists, in order, the ids of the spans (trace, span, parent), or
// log records (trace, span), of a recorded body, straight from the JSON.
func jsonIDs(body map[string]any) [][3]string {
	var out [][3]string
	for _, r := range list(body, "resourceSpans") {
		for _, s := range list(r, "scopeSpans") {
			for _, sp := range list(s, "spans") {
				out = append(out, [3]string{str(sp, "traceId"), str(sp, "spanId"), str(sp, "parentSpanId")})
			}
		}
	}
	for _, r := range list(body, "resourceLogs") {
		for _, s := range list(r, "scopeLogs") {
			for _, lr := range list(s, "logRecords") {
				out = append(out, [3]string{str(lr, "traceId"), str(lr, "spanId"), ""})
			}
		}
	}
	return out
}
