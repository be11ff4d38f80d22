// Package count writes a number with its noun: "1 agent", "2 agents",
// "0 tool uses". Every count that report and the runs page print goes
// through it, so none says "1 agents".
package count

import "fmt"

// Of is n and the noun, plural (noun + "s") unless n is 1. The nouns the
// callers use are regular.
func Of[N ~int | ~int64 | ~uint64](n N, noun string) string {
	s := fmt.Sprintf("%d %s", n, noun)
	if n != 1 {
		s += "s"
	}
	return s
}
