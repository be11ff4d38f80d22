package main

import (
	"bytes"
	"context"
	"os/exec"
)

// flagNames says which spelling of the flags renamed by issue 30 a cbc-otel
// binary takes: the dotted one (--traces.file) or, for a baseline built
// from an earlier revision (-baseline-rev), the old one (--traces-file),
// which newer binaries still accept but warn about. The whole table was
// renamed in one commit, so one probe per binary decides for every flag.
type flagNames struct{ dotted bool }

// probeFlagNames asks bin's `run -h`, once, whether it lists the dotted
// names.
func probeFlagNames(ctx context.Context, bin string) flagNames {
	out, _ := exec.CommandContext(ctx, bin, "run", "-h").CombinedOutput() // -h: exit 0, help on stderr
	return flagNames{dotted: bytes.Contains(out, []byte("\n  -traces.file "))}
}

// of is "--" + the name the binary takes: dotted, else old.
func (n flagNames) of(dotted, old string) string {
	if n.dotted {
		return "--" + dotted
	}
	return "--" + old
}
