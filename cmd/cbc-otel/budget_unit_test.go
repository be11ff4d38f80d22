package main

import (
	"log/slog"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/ingest"

	"github.com/cbc-otel/cbc-otel/internal/oteltest"
)

// Spend is the higher of the result lines' sum and the joined calls' sum;
// the cap trips once, when spend passes it (not at it); a CLI reporting 0
// never trips it. Without a stdin to write to, the stop escalates to SIGINT
// at once.
func TestBudgetCapSpend(t *testing.T) {
	turn := func(usd float64) ingest.Lifecycle {
		return ingest.Lifecycle{Kind: ingest.TurnEnded, Turn: &ingest.Turn{SessionID: "s1", CostUSD: usd}}
	}
	call := func(usd float64) ingest.Lifecycle {
		return ingest.Lifecycle{Kind: ingest.ModelCallSeen, Call: &ingest.ModelCall{SessionID: "s1", Cost: cost.Model{CostUSD: usd}}}
	}
	// After the events, turn(5) is observed: a cap that had not tripped
	// trips then, at spend + 5, so the logged spend tells which.
	for _, tc := range []struct {
		name   string
		events []ingest.Lifecycle
		spend  float64
		source string
	}{
		{"results pass", []ingest.Lifecycle{turn(0.4), turn(0.4), turn(0.3)}, 1.1, "result"},
		{"results reach, not pass", []ingest.Lifecycle{turn(0.5), turn(0.5)}, 6, "result"},
		{"codebuddy's 0", []ingest.Lifecycle{turn(0), turn(0), turn(0)}, 5, "result"},
		{"joined passes first", []ingest.Lifecycle{call(0.6), turn(0.2), call(0.5)}, 1.1, "joined"},
		{"joined lower", []ingest.Lifecycle{call(0.2), turn(1.5)}, 1.5, "result"},
		{"other events", []ingest.Lifecycle{{Kind: ingest.RunStarted, Run: &ingest.Run{SessionID: "s1"}}, {Kind: ingest.InterruptRequested}}, 5, "result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log oteltest.SyncBuffer
			cfg := runConfig{budgetMaxCost: 1, budgetStopTimeout: time.Minute}
			b := newBudgetCap(&cfg, slog.New(slog.NewTextHandler(&log, nil)), make(chan os.Signal))
			defer b.childDone()
			for _, e := range append(tc.events, turn(5), turn(1)) {
				b.watch.Observe(e)
			}
			out := awaitLog(t, b, &log)
			m := regexp.MustCompile(`interrupting it" spend_usd=(\S+) max_cost_usd=1 source=(\S+) `).FindAllStringSubmatch(out, -1)
			if len(m) != 1 {
				t.Fatalf("%d stops logged, want 1:\n%s", len(m), out)
			}
			spend, _ := strconv.ParseFloat(m[0][1], 64)
			if math.Abs(spend-tc.spend) > 1e-9 || m[0][2] != tc.source || !strings.Contains(out, "session_id=s1") {
				t.Errorf("spend %v source %s, want %v %s:\n%s", spend, m[0][2], tc.spend, tc.source, out)
			}
		})
	}
}

// awaitLog waits for the stop's escalation (no stdin: SIGINT at once) and
// returns the log.
func awaitLog(t *testing.T, b *budgetCap, log *oteltest.SyncBuffer) string {
	t.Helper()
	select {
	case s := <-b.sigs:
		if s != syscall.SIGINT {
			t.Errorf("signal %v, want SIGINT", s)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no SIGINT; log:\n%s", log.String())
	}
	return log.String()
}

// A result read after the child is done (a one-turn session's last line)
// stops nothing: no log, no count.
func TestBudgetCapAfterExit(t *testing.T) {
	var log oteltest.SyncBuffer
	cfg := runConfig{budgetMaxCost: 1, budgetStopTimeout: time.Minute}
	b := newBudgetCap(&cfg, slog.New(slog.NewTextHandler(&log, nil)), make(chan os.Signal))
	b.childDone()
	b.watch.Observe(ingest.Lifecycle{Kind: ingest.TurnEnded, Turn: &ingest.Turn{SessionID: "s1", CostUSD: 5}})
	if b.Tripped() || log.String() != "" {
		t.Errorf("tripped %v; log: %s", b.Tripped(), log.String())
	}
}

func TestInterruptRequestShape(t *testing.T) {
	for sid, want := range map[string]string{
		"":    `{"type":"control_request","request_id":"cbc-otel-budget-ab","request":{"subtype":"interrupt"}}`,
		"s-1": `{"type":"control_request","request_id":"cbc-otel-budget-ab","request":{"subtype":"interrupt","session_id":"s-1"}}`,
	} {
		if got := string(interruptRequest("cbc-otel-budget-ab", sid)); got != want {
			t.Errorf("session %q: %s, want %s", sid, got, want)
		}
	}
}
