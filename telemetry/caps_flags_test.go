package telemetry

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// TestCapFlagsRegister: the cap flags map onto ingest.Caps field by field,
// 0 (unset) leaves the Tracker's defaults, a negative value is refused in
// one line naming the flag, and the help states each default.
func TestCapFlagsRegister(t *testing.T) {
	parse := func(args ...string) (*Flags, *flag.FlagSet) {
		t.Helper()
		var f Flags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.Register(fs, Batch)
		if err := fs.Parse(args); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		return &f, fs
	}

	f, fs := parse()
	if got := f.trackerOptions(nil, nil).Caps; got != (ingest.Caps{}) {
		t.Errorf("no cap flags: Caps = %+v, want zero (the Tracker's defaults)", got)
	}
	if err := f.Validate(); err != nil {
		t.Errorf("no cap flags: %v", err)
	}
	d := ingest.DefaultCaps()
	caps := map[string]int{"tracker.max-runs": d.Runs, "tracker.max-tasks": d.Tasks, "tracker.max-agents": d.Agents, "tracker.max-phases": d.Phases, "tracker.max-grace-runs": d.Grace}
	for name, def := range caps {
		fl := fs.Lookup(name)
		if fl == nil {
			t.Errorf("--%s is not registered", name)
			continue
		}
		if want := fmt.Sprintf("(0 = %d)", def); !strings.Contains(fl.Usage, want) || fl.DefValue != "0" {
			t.Errorf("--%s: default %q, usage %q; want default 0 and %q in the usage", name, fl.DefValue, fl.Usage, want)
		}
	}

	f, _ = parse("--tracker.max-runs", "2", "--tracker.max-tasks", "3", "--tracker.max-agents", "4", "--tracker.max-phases", "5", "--tracker.max-grace-runs", "6", "--tracker.grace", "7s")
	opts := f.trackerOptions(nil, nil)
	if want := (ingest.Caps{Runs: 2, Tasks: 3, Agents: 4, Phases: 5, Grace: 6}); opts.Caps != want {
		t.Errorf("Caps = %+v, want %+v", opts.Caps, want)
	}
	if opts.Grace.Seconds() != 7 {
		t.Errorf("Grace = %v, want 7s", opts.Grace)
	}

	for name := range caps {
		f, _ := parse("--"+name, "-1")
		err := f.Validate()
		if err == nil {
			t.Errorf("--%s -1 accepted", name)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "--"+name) || strings.Contains(msg, "\n") {
			t.Errorf("--%s -1: error %q, want one line naming the flag", name, msg)
		}
	}
}
