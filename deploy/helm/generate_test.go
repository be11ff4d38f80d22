package helm_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/dashboards"
	"github.com/cbc-otel/cbc-otel/internal/golden"
)

// Sentinels of the generated rule file: templates/prometheusrule.yaml
// replaces each by the value of the same name (a plain string replace, so
// every sentinel is a token found nowhere else in the rules).
var sentinelRules = dashboards.RuleOptions{
	Target:       0.987654321,                        // "0.987654321", percentage "98.765432"
	GroupBy:      []string{"cbc_group_by_sentinel"},  // " by (cbc_group_by_sentinel)"
	JobRegex:     "CBC_JOB_REGEX_SENTINEL",           // up{job=~"..."}
	RunbookURL:   "https://cbc-otel.invalid/runbook", // runbook_url base
	InterruptP95: 987654321 * time.Microsecond,       // "987.654321"
	Stopped:      dashboards.StoppedExcluded,         // statuses widened by the template
}

// TestGeneratedFiles keeps the chart's files/ equal to what the dashboards
// package renders: the rules (with sentinels) and the dashboards JSON for
// each tracing datasource. -update rewrites them.
func TestGeneratedFiles(t *testing.T) {
	rules, err := dashboards.RenderRules(sentinelRules)
	if err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, filepath.Join(chartDir, "files", "rules", "cbc-otel.rules.yml"), rules)
	for _, tracing := range []string{"tempo", "jaeger"} {
		files, err := dashboards.Files(dashboards.Options{Tracing: tracing})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{dashboards.OverviewFile, dashboards.HealthFile} {
			b, ok := files[name]
			if !ok {
				t.Fatalf("dashboards.Files has no %s", name)
			}
			golden.Assert(t, filepath.Join(chartDir, "files", "dashboards", tracing, filepath.Base(name)), b)
		}
	}
}

// TestGoldenDefault is the whole rendering of the default values.
func TestGoldenDefault(t *testing.T) {
	out, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, filepath.Join("testdata", "default.golden.yaml"), []byte(out))
}
