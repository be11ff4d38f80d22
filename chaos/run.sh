#!/usr/bin/env bash
# make chaos: the fault and abuse suite of issue #10. First a native fuzzing
# pass over the framer, the decoder and the Tracker: CHAOS_FUZZ_TOTAL
# seconds (default 300) shared evenly by every ingest fuzz target, longer
# locally with e.g. CHAOS_FUZZ_TOTAL=3600; then the chaos tests against the
# built binaries.
# Every figure lands in one table, printed at the end and written as
# Markdown to CHAOS_REPORT (default: chaos-report.md in a temp dir); any
# breach fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
fuzz_total=${CHAOS_FUZZ_TOTAL:-300}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
figures="$work/figures.tsv"
: >"$figures"
export CHAOS_FIGURES="$figures"
export CHAOS_REPORT=${CHAOS_REPORT:-$work/chaos-report.md}

targets=$($GO test -list 'Fuzz.*' ./ingest/ | grep ^Fuzz)
n=$(echo "$targets" | wc -l)
fuzztime="$(( (fuzz_total + n - 1) / n ))s"
total=0
for t in $targets; do
	echo "== fuzz $t ($fuzztime)"
	log="$work/$t.log"
	start=$(date +%s)
	if $GO test -run '^$' -fuzz "^$t\$" -fuzztime "$fuzztime" ./ingest/ >"$log" 2>&1; then
		result=ok
	else
		result=BREACH
	fi
	secs=$(( $(date +%s) - start ))
	total=$(( total + secs ))
	tail -n 3 "$log"
	# The last progress line: "fuzz: elapsed: 1m20s, execs: 123456 (1543/sec), ..."
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | awk '{print $2}')
	printf '%s\t%s\t%s\t%s\t%s\n' "4 bad input" "fuzz $t" \
		"${execs:-0} execs in ${secs}s, $( [ $result = ok ] && echo 'no crash, invariants held' || echo 'FAILED (see log)')" \
		"no crash, no invariant broken" "$result" >>"$figures"
	if [ $result != ok ]; then cat "$log"; fi
done
printf '%s\t%s\t%s\t%s\t%s\n' "4 bad input" "fuzzing, all targets" "${total}s over $n targets" ">= 300s in CI" \
	"$( [ $total -ge 300 ] || [ "${CI:-}" != true ] && echo ok || echo BREACH)" >>"$figures"

echo "== chaos tests"
set +e
$GO test -tags chaos -count=1 -timeout 20m -v ./chaos/ 2>&1 | tee "$work/chaos.log" | grep -E '^(=== RUN|--- )'
status=${PIPESTATUS[0]}
set -e
# The table is printed by the test binary after its tests; show it whole.
sed -n '/^=== chaos figures/,$p' "$work/chaos.log"
if [ "$status" -ne 0 ]; then
	echo "chaos: FAILED (exit $status); failing tests:"
	grep -E -- '--- FAIL|BREACH|panic' "$work/chaos.log" | head -50
fi
if [ -n "${CHAOS_KEEP:-}" ]; then cp "$CHAOS_REPORT" "$CHAOS_KEEP"; fi
exit "$status"
