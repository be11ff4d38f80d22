package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
)

// selfRegisterer is the one place the process's own collectors register
// (the spool writer's, the join's, the budget cap's, serve's engine): on
// reg, the registry behind /metrics, the file and the push, with the
// const labels of every series (demo's demo="true") on theirs too. The
// metrics sink registers its own with the same labels (metrics.Options).
func selfRegisterer(reg *prometheus.Registry, constLabels map[string]string) prometheus.Registerer {
	if len(constLabels) == 0 {
		return reg
	}
	return prometheus.WrapRegistererWith(constLabels, reg)
}

// register adds c to the process's own metrics; a collector that cannot
// register (a duplicate) is logged: its series are missing, nothing else.
func (t *Telemetry) register(c prometheus.Collector, what string) {
	if err := t.self.Register(c); err != nil {
		t.logger.Error("registering the "+what+" metrics", "err", err)
	}
}
