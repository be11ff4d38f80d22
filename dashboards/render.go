package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Committed file names, relative to the dashboards directory.
const (
	OverviewFile = "overview.json"
	HealthFile   = "exporter-health.json"
	RulesFile    = "rules/cbc-otel.rules.yml"
	SlothFile    = "slo/sloth.yml"
	ReadmeFile   = "README.md"
)

// README markers around the generated panel reference.
const (
	panelsBegin = "<!-- BEGIN GENERATED PANELS (go generate ./dashboards) -->"
	panelsEnd   = "<!-- END GENERATED PANELS -->"
)

// RenderDashboard builds spec and renders it as indented JSON.
func RenderDashboard(spec DashboardSpec, opts Options) ([]byte, error) {
	d, err := Build(spec, opts)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	// Queries hold <, > and &: keep them readable in the committed JSON.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Files renders every generated file except the README: path (relative to
// the dashboards directory) → content.
func Files(opts Options) (map[string][]byte, error) {
	specs, err := Specs(opts)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, s := range specs {
		b, err := RenderDashboard(s, opts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.UID, err)
		}
		name := OverviewFile
		if s.UID == HealthUID {
			name = HealthFile
		}
		out[name] = b
	}
	if out[RulesFile], err = RenderRules(opts.Rules); err != nil {
		return nil, err
	}
	if out[SlothFile], err = RenderSloth(opts.Rules); err != nil {
		return nil, err
	}
	return out, nil
}

// PanelReference renders the README's panel reference: every panel, its
// queries and what to do when it is red.
func PanelReference(opts Options) (string, error) {
	specs, err := Specs(opts)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, s := range specs {
		fmt.Fprintf(&b, "\n### %s\n\n`%s.json`, uid `%s`.\n", s.Title, strings.TrimSuffix(fileOf(s), ".json"), s.UID)
		for _, row := range s.Rows {
			fmt.Fprintf(&b, "\n#### Row: %s\n", row.Title)
			for _, p := range row.Panels {
				fmt.Fprintf(&b, "\n**%s** (unit `%s`). %s\n\n", p.Title, p.Unit, p.Description)
				b.WriteString("```promql\n")
				for i, q := range p.Queries {
					if i > 0 {
						b.WriteString("\n")
					}
					b.WriteString(q.Expr + "\n")
				}
				b.WriteString("```\n\n")
				fmt.Fprintf(&b, "When red: %s\n", p.WhenRed)
			}
		}
	}
	return b.String(), nil
}

func fileOf(s DashboardSpec) string {
	if s.UID == HealthUID {
		return HealthFile
	}
	return OverviewFile
}

// UpdateReadme replaces the generated panel reference in readme.
func UpdateReadme(readme []byte, opts Options) ([]byte, error) {
	ref, err := PanelReference(opts)
	if err != nil {
		return nil, err
	}
	s := string(readme)
	i := strings.Index(s, panelsBegin)
	j := strings.Index(s, panelsEnd)
	if i < 0 || j < i {
		return nil, fmt.Errorf("dashboards: README lacks the %q … %q markers", panelsBegin, panelsEnd)
	}
	return []byte(s[:i+len(panelsBegin)] + "\n" + ref + "\n" + s[j:]), nil
}
