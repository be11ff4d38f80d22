package join

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbc-otel/cbc-otel/clitelemetry"
)

// Collector exports the session's counters (docs/traces.md lists them).
func (s *Session) Collector() prometheus.Collector {
	return &collector{s: s,
		spans: prometheus.NewDesc("cbc_otel_cli_spans_total",
			"Spans of the CLI's own telemetry (run --join-cli-telemetry) by what the join did: received (all), reparented (under an agent's span), unmatched (its agent never named within the hold), foreign (another trace), overflow (the hold was full).", []string{"outcome"}, nil),
		requests: prometheus.NewDesc("cbc_otel_cli_requests_total",
			"OTLP requests of the CLI's own telemetry, by signal and outcome (ok, bad_request, unsupported_media, too_large, busy, wrong_method).", []string{"signal", "outcome"}, nil),
		calls: prometheus.NewDesc("cbc_otel_cli_model_calls_total",
			"api_request events of the CLI's own telemetry by outcome: handled (handed to the pipeline), lost (its queue was full).", []string{"outcome"}, nil),
		forwarded: prometheus.NewDesc("cbc_otel_cli_forward_lost_total",
			"The CLI's log records and metric points not forwarded (queue full, export failed, unsupported), by signal.", []string{"signal"}, nil),
		unauthorized: prometheus.NewDesc("cbc_otel_cli_requests_unauthorized_total",
			"Requests to the CLI-telemetry receiver refused with 401, not the child's, by reason: missing (no Authorization header), malformed (not one Bearer token), wrong (another token).", []string{"reason"}, nil),
	}
}

type collector struct {
	s                                               *Session
	spans, requests, calls, forwarded, unauthorized *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.spans
	ch <- c.requests
	ch <- c.calls
	ch <- c.forwarded
	ch <- c.unauthorized
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	st := c.s.Joiner.Stats()
	counter(c.spans, st.Spans.Load(), "received")
	counter(c.spans, st.Reparented.Load(), "reparented")
	counter(c.spans, st.Unmatched.Load(), "unmatched")
	counter(c.spans, st.Foreign.Load(), "foreign")
	counter(c.spans, st.HeldDropped.Load(), "overflow")
	counter(c.calls, st.ModelCalls.Load()-st.CallsLost.Load(), "handled")
	counter(c.calls, st.CallsLost.Load(), "lost")
	if c.s.out != nil {
		if logs, points, ok := c.s.out.ForwardLost(); ok {
			counter(c.forwarded, logs, "logs")
			counter(c.forwarded, points, "metrics")
		}
	}
	if c.s.recv == nil {
		return
	}
	rs := c.s.recv.Stats()
	for _, s := range []struct {
		name string
		st   *clitelemetry.SignalStats
	}{{"traces", &rs.Traces}, {"logs", &rs.Logs}, {"metrics", &rs.Metrics}} {
		counter(c.requests, s.st.OK.Load(), s.name, "ok")
		counter(c.requests, s.st.BadRequest.Load(), s.name, "bad_request")
		counter(c.requests, s.st.UnsupportedMedia.Load(), s.name, "unsupported_media")
		counter(c.requests, s.st.TooLarge.Load(), s.name, "too_large")
		counter(c.requests, s.st.Busy.Load(), s.name, "busy")
		counter(c.requests, s.st.WrongMethod.Load(), s.name, "wrong_method")
	}
	counter(c.unauthorized, rs.Unauthorized.Missing.Load(), clitelemetry.ReasonMissing)
	counter(c.unauthorized, rs.Unauthorized.Malformed.Load(), clitelemetry.ReasonMalformed)
	counter(c.unauthorized, rs.Unauthorized.Wrong.Load(), clitelemetry.ReasonWrong)
}
