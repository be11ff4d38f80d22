// Command gen writes cbc-otel's generated dashboards, rules and sloth spec
// into the dashboards directory (go generate ./dashboards runs it there),
// and refreshes the panel reference of its README.
//
// Flags change the rendering, e.g. for a different SLO target:
//
//	go run ./dashboards/gen -dir /tmp/out -target 0.995
//
// It also renders the monitoring mixin (alerts.yaml, rules.yaml,
// dashboards_out/) from the mixin's configuration file, mixin/config.yaml
// of the dashboards directory. With -out it renders only the mixin, from
// -mixin-config, into -out:
//
//	go run ./dashboards/gen -mixin-config my.yaml -out /tmp/mixin
//
// The committed files are the defaults; the tests compare against them.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cbc-otel/cbc-otel/dashboards"
)

func main() {
	var (
		opts    dashboards.Options
		dir     string
		groupBy string
		stopped string
		mixCfg  string
		mixOut  string
	)
	flag.StringVar(&dir, "dir", ".", "the dashboards directory to write into")
	flag.Float64Var(&opts.Rules.Target, "target", dashboards.DefaultTarget, "SLO target: the share of terminal runs that must succeed, in (0, 1)")
	flag.StringVar(&stopped, "stopped", string(dashboards.StoppedExcluded), "how stopped (user-cancelled) runs count in the SLI: excluded, good or bad")
	flag.StringVar(&groupBy, "group-by", "", "comma-separated labels to compute the SLO per (e.g. namespace); empty = one SLO")
	flag.StringVar(&opts.Rules.JobRegex, "job-regex", dashboards.DefaultJobRegex, "regex of cbc-otel's scrape job names (exporter-down alert)")
	flag.StringVar(&opts.Rules.RunbookURL, "runbook-url", dashboards.DefaultRunbookURL, "base URL of the runbooks (the README); alerts append #anchor")
	flag.DurationVar(&opts.Rules.InterruptP95, "interrupt-p95", dashboards.DefaultInterruptP95, "interrupt → stop p95 latency that alerts")
	flag.Float64Var(&opts.Rules.WindowScale, "window-scale", 1, "scale every rule window (tests only, e.g. 0.016666 for 1h → 1m)")
	flag.StringVar(&opts.Tracing, "tracing", "tempo", "tracing datasource type of exemplar links: tempo or jaeger")
	flag.StringVar(&mixCfg, "mixin-config", "", "the mixin's configuration file (default: <dir>/mixin/config.yaml)")
	flag.StringVar(&mixOut, "out", "", "render only the mixin, into this directory (the other rendering flags are then unused)")
	flag.Parse()
	defaultCfg := mixCfg == ""
	if defaultCfg {
		mixCfg = filepath.Join(dir, dashboards.MixinDir, dashboards.MixinConfigFile)
	}
	if mixOut != "" {
		if err := runMixin(mixCfg, mixOut); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		return
	}
	opts.Rules.Stopped = dashboards.StoppedPolicy(stopped)
	if groupBy != "" {
		opts.Rules.GroupBy = strings.Split(groupBy, ",")
	}
	err := run(dir, opts)
	if _, serr := os.Stat(mixCfg); err == nil && (serr == nil || !defaultCfg) {
		// A rendering elsewhere (-dir) without a mixin config has no mixin.
		err = runMixin(mixCfg, filepath.Join(dir, dashboards.MixinDir))
	}
	if err == nil {
		err = runBudgetFixture(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// runBudgetFixture renders the budget tests' recording rules from their
// configuration, when dir has it (a rendering elsewhere has not).
func runBudgetFixture(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(dashboards.BudgetFixtureConfig)))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	out, err := dashboards.RenderBudgetRules(b)
	if err != nil {
		return fmt.Errorf("%s: %w", dashboards.BudgetFixtureConfig, err)
	}
	return write(dir, map[string][]byte{dashboards.BudgetFixtureRules: out})
}

// runMixin renders the mixin of the configuration file cfg into out.
func runMixin(cfg, out string) error {
	b, err := os.ReadFile(cfg)
	if err != nil {
		return err
	}
	files, err := dashboards.MixinFiles(b)
	if err != nil {
		return fmt.Errorf("%s: %w", cfg, err)
	}
	return write(out, files)
}

func run(dir string, opts dashboards.Options) error {
	files, err := dashboards.Files(opts)
	if err != nil {
		return err
	}
	if err := write(dir, files); err != nil {
		return err
	}
	readme := filepath.Join(dir, dashboards.ReadmeFile)
	old, err := os.ReadFile(readme)
	if os.IsNotExist(err) {
		return nil // a rendering elsewhere (-dir) has no README to refresh
	}
	if err != nil {
		return err
	}
	updated, err := dashboards.UpdateReadme(old, opts)
	if err != nil {
		return err
	}
	return os.WriteFile(readme, updated, 0o644)
}

// write writes files (relative path → content) under dir.
func write(dir string, files map[string][]byte) error {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, files[n], 0o644); err != nil {
			return err
		}
	}
	return nil
}
