package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/join"
	"github.com/cbc-otel/cbc-otel/traces"
)

// cliJoin is run --cli-telemetry.join: the join.Session of the child, and
// whether we minted the parent span it runs under (then we export it).
// A nil *cliJoin is no join.
type cliJoin struct {
	s       *join.Session
	minted  bool
	started time.Time
}

// newCLIJoin prepares the join before the telemetry starts: the traces sink
// needs the parent, the launcher and to hold agent spans. The parent is
// the user's TRACEPARENT, else one we mint.
func newCLIJoin(cfg *runConfig, log *slog.Logger) *cliJoin {
	parent := traces.ParentFromEnv(os.Getenv)
	j := &cliJoin{}
	if !parent.IsValid() {
		parent, j.minted = join.MintParent(), true
	}
	j.s = join.NewSession(parent, cfg.tel.grace, log)
	cfg.tel.traces.join = &tracesJoin{parent: parent, launcher: j.s.Joiner.Launcher}
	return j
}

// start wires the session to the pipeline and the sinks and starts its
// receiver; a receiver that cannot start is logged, never fatal.
func (j *cliJoin) start(ctx context.Context, tel *telemetry, p *ingest.Pipeline, log *slog.Logger) {
	w := join.Wiring{Pipeline: p, Out: tel.traces.prov}
	if tel.traces.enabled() {
		w.AgentSpan = tel.traces.sk.AgentSpanContext
	}
	if err := j.s.Start(ctx, w); err != nil {
		log.Error("the CLI's own telemetry will not be joined: its receiver did not start", "err", err)
		return
	}
	if err := tel.metrics.registry().Register(j.s.Collector()); err != nil {
		log.Error("registering the join metrics", "err", err)
	}
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
func (j *cliJoin) shutdown(ctx context.Context, tel *telemetry, command string) {
	if j == nil {
		return
	}
	if j.minted && tel.traces.enabled() && !j.started.IsZero() {
		name := filepath.Base(command)
		tel.traces.sk.ExportParent("run "+name, j.started, time.Now(), attribute.String("process.executable.name", name))
	}
}
