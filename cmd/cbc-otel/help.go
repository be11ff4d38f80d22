package main

import (
	"flag"
)

// printFlags prints fs's flags to its output as PrintDefaults does, line
// for line (the README's flag test, chaos and the chart's tests parse it),
// leaving the deprecated aliases out.
func printFlags(fs *flag.FlagSet) {
	printDefaults(fs, func(f *flag.Flag) bool { return !isAlias(f) })
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
