package main

import (
	"flag"
	"log/slog"
	"slices"
)

// renamed maps each flag name of the three old dialects (dashes, no
// namespace) to its name in the one dialect, Prometheus' dotted namespaces
// (issue 30). The old names keep working for one release as deprecated
// aliases that warn once; the next release deletes this map. docs/cli.md's
// "Deprecated flag names" table lists the same (TestCLIDocListsRenamed).
var renamed = map[string]string{
	"grace":               "tracker.grace",
	"stall-after":         "tracker.stall-after",
	"max-runs":            "tracker.max-runs",
	"max-tasks":           "tracker.max-tasks",
	"max-agents":          "tracker.max-agents",
	"max-phases":          "tracker.max-phases",
	"max-grace-runs":      "tracker.max-grace-runs",
	"max-line":            "tracker.max-line",
	"capture-errors":      "tracker.capture-errors",
	"join-cli-telemetry":  "cli-telemetry.join",
	"traces-file":         "traces.file",
	"metrics-file":        "metrics.file",
	"tap-queue":           "tap.queue-bytes",
	"kill-timeout":        "child.kill-timeout",
	"drain-timeout":       "child.drain-timeout",
	"summary":             "summary.waterfall",
	"summary-file":        "summary.file",
	"step-summary":        "summary.step-file",
	"step-output":         "summary.step-output",
	"json":                "summary.json",
	"width":               "summary.width",
	"scenarios":           "simulate.scenarios",
	"dialect":             "simulate.dialect",
	"speed":               "simulate.speed",
	"spool-dir":           "spool.dir",
	"follow":              "follow.glob",
	"idle-timeout":        "follow.idle-timeout",
	"poll-interval":       "follow.poll-interval",
	"state-dir":           "state.dir",
	"checkpoint-interval": "state.checkpoint-interval",
}

// canonical is name's name in the one dialect: itself unless it is a
// deprecated alias.
func canonical(name string) string {
	if n, ok := renamed[name]; ok {
		return n
	}
	return name
}

// alias is a deprecated flag name: it sets the value of the flag it was
// renamed to (so the last of the two on a command line wins, as with one
// flag given twice) and is left out of -h.
type alias struct {
	flag.Value
	to string // the new name
}

// IsBoolFlag forwards the new flag's kind, so that a deprecated boolean
// flag still takes no argument.
func (a alias) IsBoolFlag() bool {
	b, ok := a.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// addAliases defines, for every renamed flag whose new name is on fs, its
// old name as an alias. The flag package takes -name and --name alike, so
// both spellings of the old name work. Commands with none of the new names
// (simulate, which must also accept the CLI's own flags) get no alias.
func addAliases(fs *flag.FlagSet) {
	for old, to := range renamed {
		f := fs.Lookup(to)
		if f == nil || fs.Lookup(old) != nil {
			continue
		}
		fs.Var(alias{Value: f.Value, to: to}, old, "deprecated: use --"+to)
	}
}

// isAlias reports whether f is a deprecated name added by addAliases.
func isAlias(f *flag.Flag) bool {
	_, ok := f.Value.(alias)
	return ok
}

// aliasesUsed lists the deprecated names set on fs's command line, sorted,
// once each however often given.
func aliasesUsed(fs *flag.FlagSet) []string {
	var used []string
	fs.Visit(func(f *flag.Flag) {
		if isAlias(f) {
			used = append(used, f.Name)
		}
	})
	slices.Sort(used)
	return used
}

// explicitFlags is the set of flags given on fs's command line, by their
// new names: a flag given by its deprecated name counts as its new one.
func explicitFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[canonical(f.Name)] = true })
	return set
}

// warnRenamed says once, at warn, each deprecated flag name used. log is
// the command's logger with the loss lines' warn floor (telemetry's WarnLogger), so
// that run's quiet default still says it and an explicit --log.level error
// silences it.
func warnRenamed(log *slog.Logger, used []string) {
	for _, old := range used {
		log.Warn("flag --"+old+" is deprecated and will be removed in the next release; use --"+renamed[old], "flag", old, "use", renamed[old])
	}
}
