package telemetry

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/join"
	"github.com/cbc-otel/cbc-otel/traces"
)

// cliJoin is run --cli-telemetry.join: the join.Session of the child, the
// call queue it feeds the pipeline through, and whether we minted the
// parent span it runs under (then we export it). A nil *cliJoin is no join.
type cliJoin struct {
	s       *join.Session
	calls   *ingest.CallQueue
	parent  trace.SpanContext
	minted  bool
	started time.Time
}

// newCLIJoin ties the join's knot, in order: the parent (the user's
// TRACEPARENT, else one we mint), the call queue the pipeline will take,
// then the session on tr's egress. The traces sink, made next, takes
// the session's launcher.
func newCLIJoin(tr *tracesRuntime, env func(string) string, hold time.Duration, log *slog.Logger) *cliJoin {
	j := &cliJoin{parent: traces.ParentFromEnv(env), calls: ingest.NewCallQueue()}
	if !j.parent.IsValid() {
		j.parent, j.minted = join.MintParent(), true
	}
	opts := join.SessionOptions{Parent: j.parent, Calls: j.calls, Hold: hold, Logger: log}
	if tr.enabled() {
		// The CLI's spans, logs and metrics leave where ours do; with
		// tracing off they go nowhere.
		parent := j.parent
		opts.Out = tr.outlet()
		opts.AgentSpan = func(task, run string, index int) trace.SpanContext {
			return traces.AgentSpanContext(parent, task, run, index)
		}
	}
	j.s = join.NewSession(opts)
	return j
}

// start starts the session's receiver and registers its metrics with
// tel's; a receiver that cannot start is logged, never fatal.
func (j *cliJoin) start(ctx context.Context, tel *Telemetry, log *slog.Logger) {
	if err := j.s.Start(ctx); err != nil {
		log.Error("the CLI's own telemetry will not be joined: its receiver did not start", "err", err)
		return
	}
	tel.register(j.s.Collector(), "join")
	j.started = time.Now()
}

// env is the child's environment; nil means the wrapper's own.
func (j *cliJoin) env() []string {
	if j == nil {
		return nil
	}
	return j.s.ChildEnv(os.Environ())
}

// childDone and streamDone pass the child's end and the stream's on to the
// session (see join.Session).
func (j *cliJoin) childDone(ctx context.Context) {
	if j != nil {
		j.s.ChildDone(ctx)
	}
}

func (j *cliJoin) streamDone(ctx context.Context) {
	if j != nil {
		j.s.StreamDone(ctx)
	}
}

// shutdown exports the minted parent span around the child's life; the
// CLI's logs and metrics are flushed with the spans (egress.Shutdown).
func (j *cliJoin) shutdown(tel *Telemetry, command string) {
	if j == nil {
		return
	}
	if j.minted && tel.traces.enabled() && !j.started.IsZero() {
		name := filepath.Base(command)
		tel.traces.sk.ExportParent("run "+name, j.started, time.Now(), attribute.String("process.executable.name", name))
	}
}
