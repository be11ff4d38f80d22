package e2e

// promAlert is one element of /api/v1/alerts.
type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	Value       string            `json:"value"`
}

// alerts returns the active (pending or firing) alerts.
func (p *prometheusServer) alerts() ([]promAlert, error) {
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	if err := p.api("/api/v1/alerts", &data); err != nil {
		return nil, err
	}
	return data.Alerts, nil
}

// ruleHealth returns the health of every loaded rule ("ok", "err",
// "unknown") by name, with the last error, from /api/v1/rules.
func (p *prometheusServer) ruleHealth() (map[string]string, error) {
	var data struct {
		Groups []struct {
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.api("/api/v1/rules", &data); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, g := range data.Groups {
		for _, rl := range g.Rules {
			out[rl.Name] = rl.Health + " " + rl.LastError
		}
	}
	return out, nil
}
