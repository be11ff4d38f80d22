# shellcheck shell=bash
# Sourced by chaos/run.sh (and by chaos/fuzzlib_test.go, which checks it
# against real `go test -fuzz` output): how the fuzzing pass runs a target
# and judges a failed run.

# The fuzzing flags. Why -fuzzminimizetime: Go minimises every new
# interesting input for up to 60 s by default, and inputs grown from the
# larger seeds take all of it; a target's share of the pass is 50 s, so one
# new input ended its fuzzing (CI: FuzzDecoderReuse did 1724 execs, then
# none for 24 s). At 2 s it did 139,702 in 50 s from a cold cache. A
# crasher is still written when found, only less minimised.
FUZZ_FLAGS=(-parallel 1 -fuzzminimizetime 2s)

# fuzz_failure_kind LOG prints why a failed `go test -fuzz` run failed:
#   deadline  its one failure is a bare "context deadline exceeded" (or
#             "context canceled") and no input was written: the fuzzing
#             coordinator's own shutdown race (internal/fuzz compares the
#             -fuzztime context's error with its child's before the
#             cancellation has reached the child), not a finding;
#   finding   anything else: a failing input, a panic, a hung worker, a
#             failing seed, a build error.
fuzz_failure_kind() {
	awk '
		/^--- FAIL: / { fails++; inside = 1; next }
		/Failing input written to|fuzzing process hung|panic:|failure while testing seed corpus/ { finding = 1 }
		inside && /^FAIL$/ { inside = 0; next }
		inside {
			line = $0; sub(/^[ \t]+/, "", line)
			if (line == "") next
			if (line == "context deadline exceeded" || line == "context canceled") bare++
			else other++
		}
		END {
			if (fails == 1 && bare == 1 && other == 0 && !finding) print "deadline"
			else print "finding"
		}
	' "$1"
}

# FUZZ_PKG is the package fuzzed, as a directory relative to the working
# directory (the tests point it elsewhere).
FUZZ_PKG=${FUZZ_PKG:-ingest}
GO=${GO:-go}

# fuzz_inputs TARGET lists the failing inputs go test -fuzz has written for
# TARGET, so a run can be checked for a new one.
fuzz_inputs() {
	if [ -d "$FUZZ_PKG/testdata/fuzz/$1" ]; then find "$FUZZ_PKG/testdata/fuzz/$1" -type f | sort; fi
}

# fuzz_target TARGET FUZZTIME LOG fuzzes one target with $GO and prints its
# verdict: "ok", "ok-deadline" (a failure that fuzz_failure_kind calls
# "deadline", with no new input written and the target's seeds and written
# inputs replayed clean, appended to LOG) or "BREACH".
fuzz_target() {
	local t=$1 fuzztime=$2 log=$3 before
	before=$(fuzz_inputs "$t")
	if $GO test -run '^$' -fuzz "^$t\$" -fuzztime "$fuzztime" "${FUZZ_FLAGS[@]}" "./$FUZZ_PKG/" >"$log" 2>&1; then
		echo ok
		return
	fi
	if [ "$(fuzz_failure_kind "$log")" = deadline ] && [ "$(fuzz_inputs "$t")" = "$before" ] &&
		$GO test -count=1 -run "^$t\$" "./$FUZZ_PKG/" >>"$log" 2>&1; then
		echo ok-deadline
		return
	fi
	echo BREACH
}
