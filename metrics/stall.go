package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// stallMetrics are the stalled-run series (ingest.TrackerOptions.StallAfter).
// Unlike the run counters they are not pre-created per workflow: two more
// series for each of up to 200 names cost the state attack of
// docs/reliability.md 0.7 MiB of its 32 MiB, and a stall alert needs no
// zero to compare with.
// The stalled-agent pair (issue 31) is kept alike, for the same reasons.
type stallMetrics struct {
	stalled       *prometheus.GaugeVec
	stalls        *prometheus.CounterVec
	agentsStalled *prometheus.GaugeVec
	agentStalls   *prometheus.CounterVec
}

func newStallMetrics() *stallMetrics {
	return &stallMetrics{
		stalled: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cbc_workflow_runs_stalled",
			Help: "Unfinished workflow runs that showed no event for --tracker.stall-after; back to 0 when one comes or the run ends.",
		}, []string{"workflow"}),
		stalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cbc_workflow_stalls_total",
			Help: "Times a workflow run fell silent for --tracker.stall-after (once per silence).",
		}, []string{"workflow"}),
		agentsStalled: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cbc_workflow_agents_stalled",
			Help: "Started, live agents of unfinished workflow runs that showed no progress for --tracker.stall-after; back to 0 when they move or end or their run ends.",
		}, []string{"workflow"}),
		agentStalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cbc_workflow_agent_stalls_total",
			Help: "Times a live agent of a workflow run showed no progress for --tracker.stall-after (once per silence).",
		}, []string{"workflow"}),
	}
}

func (s *stallMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.stalled, s.stalls, s.agentsStalled, s.agentStalls}
}

// stall counts a RunStalled or RunResumed of a run whose state is st.
// Called with m.mu held.
func (m *Metrics) stall(l ingest.Lifecycle) {
	st := m.state(l.Run, true)
	switch {
	case l.Kind == ingest.RunStalled && !st.stalled:
		st.stalled = true
		m.stalls.stalled.WithLabelValues(st.label).Inc()
		m.stalls.stalls.WithLabelValues(st.label).Inc()
	case l.Kind == ingest.RunResumed && st.stalled:
		st.stalled = false
		m.stalls.stalled.WithLabelValues(st.label).Dec()
	}
}

// agentStall counts an AgentStalled or AgentResumed. Called with m.mu
// held.
func (m *Metrics) agentStall(l ingest.Lifecycle) {
	st := m.state(l.Run, true)
	i := l.Agent.Index
	switch {
	case l.Kind == ingest.AgentStalled && !st.stalledAgents[i]:
		if st.stalledAgents == nil {
			st.stalledAgents = make(map[int]bool)
		}
		st.stalledAgents[i] = true
		m.stalls.agentsStalled.WithLabelValues(st.label).Inc()
		m.stalls.agentStalls.WithLabelValues(st.label).Inc()
	case l.Kind == ingest.AgentResumed && st.stalledAgents[i]:
		delete(st.stalledAgents, i)
		m.stalls.agentsStalled.WithLabelValues(st.label).Dec()
	}
}

// agentStallsGone takes a finalized run's agents still counted stalled
// (none, when every stall was resumed as the Tracker does) off the gauge,
// so that it never leaks. Called with m.mu held.
func (m *Metrics) agentStallsGone(st *runState) {
	if n := len(st.stalledAgents); n > 0 {
		m.stalls.agentsStalled.WithLabelValues(st.label).Sub(float64(n))
		st.stalledAgents = nil
	}
}
