package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"
)

// The flags stay on the standard flag package, in the Prometheus dialect
// (dotted namespaces, exporter-toolkit's --web.* names), rather than on
// kingpin, the exporters' own parser (issue 30): kingpin is not in go.mod
// and exporter-toolkit marks its kingpin glue contributions-only; its
// Interspersed is per application, where run must stop at the child's
// first word and replay take flags after its files; it reads -name as
// short flags, breaking the single-dash spellings users have (and no
// alias could catch them); simulate must accept the CLI's arbitrary flags
// on flag anyway (two parsers in one binary); its --[no-]bool, exit on
// error and help format would be new to every -h parser here; its .Envar
// would tempt serving OTEL_* through flags whose values differ (host:port,
// per-signal paths); and run's resident-set budget has no room to spare.
// What kingpin would bring is done here: grouped help, --version.

// flagGroup is one namespace of the flags, as -h groups them.
type flagGroup struct{ ns, what string }

// flagGroups orders -h: the command's own parts first, then the sinks,
// then logging. A namespace not listed comes after them, by name.
var flagGroups = []flagGroup{
	{"", "the command itself"}, // names without a namespace: demo's --live, --version
	{"child", "the wrapped CLI process"},
	{"tap", "the taps on the CLI's stdout and stdin"},
	{"follow", "the files followed"},
	{"state", "the checkpoint that survives a restart"},
	{"spool", "streams handed from run to serve as files"},
	{"simulate", "the simulated CLI"},
	{"summary", "what is printed or written when the command ends"},
	{"budget", "a cap on the session's spend"},
	{"cli-telemetry", "the CLI's own OpenTelemetry"},
	{"tracker", "the runs, tasks and lines held per stream"},
	{"metrics", "the Prometheus metrics"},
	{"web", "the HTTP endpoint: /metrics, /healthz, /readyz and the runs page"},
	{"push", "the Pushgateway"},
	{"traces", "the spans"},
	{"otlp", "the OTLP endpoint of the spans"},
	{"profile", "profiles of this process, for go tool pprof"},
	{"log", "cbc-otel's own messages on stderr"},
}

// namespace is the part of a flag's name before its first dot ("" for
// none).
func namespace(name string) string {
	ns, _, ok := strings.Cut(name, ".")
	if !ok {
		return ""
	}
	return ns
}

// printFlags prints fs's flags to its output grouped by namespace, each
// group under a line "NAMESPACE.*: what it configures", each flag in
// PrintDefaults' format line for line (docs/cli.md's flag test, chaos and
// the chart's tests parse it). The deprecated aliases are left out; a
// last line points at them when the command has any.
func printFlags(fs *flag.FlagSet) {
	var names []string // the namespaces present, in flagGroups' order
	aliases := false
	fs.VisitAll(func(f *flag.Flag) {
		if isAlias(f) {
			aliases = true
		} else if ns := namespace(f.Name); !slices.Contains(names, ns) {
			names = append(names, ns)
		}
	})
	rank := func(ns string) int {
		if i := slices.IndexFunc(flagGroups, func(g flagGroup) bool { return g.ns == ns }); i >= 0 {
			return i
		}
		return len(flagGroups)
	}
	slices.SortStableFunc(names, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	w := fs.Output()
	for i, ns := range names {
		if len(names) > 1 {
			if i > 0 {
				fmt.Fprintln(w)
			}
			if r := rank(ns); r < len(flagGroups) && ns != "" {
				fmt.Fprintf(w, "%s.*: %s\n", ns, flagGroups[r].what)
			} else if ns == "" {
				fmt.Fprintf(w, "%s\n", flagGroups[0].what+":")
			} else {
				fmt.Fprintf(w, "%s.*:\n", ns)
			}
		}
		printDefaults(fs, func(f *flag.Flag) bool { return !isAlias(f) && namespace(f.Name) == ns })
	}
	if aliases {
		fmt.Fprintln(w, "\nthe flag names of earlier releases (--grace, --spool-dir, ...) still work, each with a warning: see docs/cli.md, \"Deprecated flag names\"")
	}
}

// printDefaults is fs.PrintDefaults for the flags keep selects. It copies
// them into a fresh FlagSet with their original defaults (a flag already
// parsed before -h would otherwise print its new value as the default)
// and lets the flag package print them, so the format stays its own.
func printDefaults(fs *flag.FlagSet, keep func(*flag.Flag) bool) {
	sub := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	sub.SetOutput(fs.Output())
	fs.VisitAll(func(f *flag.Flag) {
		if keep(f) {
			sub.Var(f.Value, f.Name, f.Usage)
			sub.Lookup(f.Name).DefValue = f.DefValue
		}
	})
	sub.PrintDefaults()
}
