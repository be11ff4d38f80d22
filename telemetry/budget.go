package telemetry

import (
	"crypto/rand"
	"encoding/hex"
	"sync"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/report"
)

// SpendWatch is the sink of run --budget.max-cost-usd: it sums the
// session's spend as the step outputs sum it (report.Spend: the result
// lines' total_cost_usd, or the joined cost, whichever is higher) and,
// once it passes the cap, trips: once, and not for a session already over
// (the last result read after the child's exit). What a trip does (the
// interrupt on the child's stdin) is the command's.
type SpendWatch struct {
	max  float64
	gone func() bool // the child is done
	trip func(spend float64, source, sessionID string)

	mu        sync.Mutex
	spend     report.Spend
	sessionID string
	tripped   bool
}

// NewSpendWatch watches the spend against max; trip is called on the
// consumer's goroutine (it must not block), with the spend, its source
// ("result" or "joined") and the session id.
func NewSpendWatch(max float64, childGone func() bool, trip func(spend float64, source, sessionID string)) *SpendWatch {
	return &SpendWatch{max: max, gone: childGone, trip: trip}
}

// Observe implements ingest.Sink: it sums the spend and trips the cap.
func (b *SpendWatch) Observe(l ingest.Lifecycle) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case l.Kind == ingest.TurnEnded && l.Turn != nil:
		b.sessionID = cmpOr(l.Turn.SessionID, b.sessionID)
	case l.Kind == ingest.ModelCallSeen && l.Call != nil:
		b.sessionID = cmpOr(b.sessionID, l.Call.SessionID)
	case l.Kind == ingest.RunStarted && l.Run != nil:
		b.sessionID = cmpOr(b.sessionID, l.Run.SessionID)
		return
	default:
		return
	}
	b.spend.Observe(l)
	spend, joined := b.spend.Costs()
	src := "result"
	if joined > spend {
		spend, src = joined, "joined"
	}
	if b.tripped || spend <= b.max || b.gone() {
		return // a session already over (the last result read after the exit) is not stopped
	}
	b.tripped = true
	b.trip(spend, src, b.sessionID)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Tripped reports whether the cap tripped.
func (b *SpendWatch) Tripped() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tripped
}

// BudgetRequestID is a new request id for the cap's interrupt: the
// Tracker knows its prefix (ingest.BudgetRequestIDPrefix), so that the
// budget's stop is told apart from the SDK's.
func BudgetRequestID() string {
	var r [8]byte
	rand.Read(r[:]) // crypto/rand.Read never fails on supported platforms
	return ingest.BudgetRequestIDPrefix + hex.EncodeToString(r[:])
}
