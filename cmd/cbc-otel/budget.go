package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cbc-otel/cbc-otel/supervise"
	"github.com/cbc-otel/cbc-otel/telemetry"
	"github.com/prometheus/client_golang/prometheus"
)

// defaultBudgetStopTimeout bounds the wait for the CLI to acknowledge the
// budget interrupt (the SDK's current stdin line ending included) before
// the child gets SIGINT.
const defaultBudgetStopTimeout = 10 * time.Second

// budgetStopsName counts the stops of --budget.max-cost-usd.
const budgetStopsName = "cbc_budget_stops_total"

// budgetCap is `run --budget.max-cost-usd`: it sums the session's spend as
// the pipeline sees it and, once spend passes the cap, stops the work the
// way an SDK does (an interrupt control request on the child's stdin),
// escalating to SIGINT if the CLI does not acknowledge it in time.
type budgetCap struct {
	max         float64
	stopTimeout time.Duration
	log         *slog.Logger
	inj         *supervise.Injector
	sigs        chan os.Signal // what the supervisor reads: the forwarded signals, and ours
	done        chan struct{}  // closed when the child is done
	stops       prometheus.Counter
	doneOnce    sync.Once
	// watch is the cap's sink: it sums the session's spend and, once past
	// max, calls stop.
	watch   *telemetry.SpendWatch
	stopped chan struct{} // closed once the stop is done (acknowledged or escalated)
}

// newBudgetCap wraps the forwarded signals (sigs) so that the cap can
// escalate through the supervisor's own stop path.
func newBudgetCap(cfg *runConfig, log *slog.Logger, sigs <-chan os.Signal) *budgetCap {
	b := &budgetCap{
		max: cfg.budgetMaxCost, stopTimeout: cfg.budgetStopTimeout, log: log,
		inj: supervise.NewInjector(), sigs: make(chan os.Signal, 16), done: make(chan struct{}),
		stopped: make(chan struct{}),
		stops: prometheus.NewCounter(prometheus.CounterOpts{Name: budgetStopsName,
			Help: "Stops of the session by run --budget.max-cost-usd (an interrupt written to the CLI's stdin)."}),
	}
	b.watch = telemetry.NewSpendWatch(b.max, b.childGone, func(spend float64, source, sessionID string) {
		go b.stop(spend, source, sessionID) // Observe runs on the consumer's goroutine
	})
	go func() {
		for {
			select {
			case s := <-sigs:
				select {
				case b.sigs <- s:
				case <-b.done:
					return
				}
			case <-b.done:
				return
			}
		}
	}()
	return b
}

// register adds the stops counter to the telemetry's registry.
func (b *budgetCap) register(reg prometheus.Registerer, log *slog.Logger) {
	if err := reg.Register(b.stops); err != nil {
		log.Error("registering the budget metrics", "err", err)
	}
}

// childDone ends the cap's goroutines: nothing is stopped any more.
func (b *budgetCap) childDone() { b.doneOnce.Do(func() { close(b.done) }) }

// interruptRequest is the control request an SDK sends to stop the
// session, with the session id when known (cbc wants it; Claude Code's SDK
// sends none and the CLI ignores it).
func interruptRequest(id, sessionID string) []byte {
	b := []byte(`{"type":"control_request","request_id":` + strconv.Quote(id) + `,"request":{"subtype":"interrupt"`)
	if sessionID != "" {
		b = append(b, `,"session_id":`+strconv.Quote(sessionID)...)
	}
	return append(b, "}}"...)
}

// stop writes the interrupt and waits for its acknowledgement, at most
// stopTimeout (the SDK's current stdin line ending included), then SIGINTs
// the child (and the supervisor SIGKILLs it --child.kill-timeout later).
func (b *budgetCap) stop(spend float64, source, sessionID string) {
	defer close(b.stopped)
	id := telemetry.BudgetRequestID()
	b.stops.Inc()
	b.log.Warn("budget: the session's spend passed --budget.max-cost-usd; interrupting it",
		"spend_usd", spend, "max_cost_usd", b.max, "source", source, "request_id", id, "session_id", sessionID)
	t := time.NewTimer(b.stopTimeout)
	defer t.Stop()
	ans, err := b.inj.Send(interruptRequest(id, sessionID), id)
	if err != nil {
		b.escalate(fmt.Errorf("cannot write the interrupt: %w", err))
		return
	}
	select {
	case a := <-ans:
		if !isSuccess(a) {
			b.escalate(errors.New("the CLI refused the interrupt"))
		}
	case <-t.C:
		b.escalate(fmt.Errorf("the CLI did not acknowledge the interrupt within --budget.stop-timeout %v", b.stopTimeout))
	case <-b.done:
	}
}

// isSuccess reports whether a control_response says success.
func isSuccess(line []byte) bool {
	var r struct {
		Response struct {
			Subtype string `json:"subtype"`
		} `json:"response"`
	}
	return json.Unmarshal(line, &r) == nil && r.Response.Subtype == "success"
}

// childGone reports whether the child is done.
func (b *budgetCap) childGone() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// escalate SIGINTs the child through the supervisor, as a user's Ctrl-C.
func (b *budgetCap) escalate(why error) {
	if b.childGone() {
		return
	}
	b.log.Warn("budget: sending SIGINT to the child", "why", why)
	select {
	case b.sigs <- syscall.SIGINT:
	case <-b.done:
	}
}

// Tripped reports whether the cap stopped the session.
func (b *budgetCap) Tripped() bool {
	if b == nil {
		return false
	}
	return b.watch.Tripped()
}
