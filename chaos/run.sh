#!/usr/bin/env bash
# make chaos: the fault and abuse suite of issue #10, in three parts.
#
#   1. Native fuzzing of the framer, the decoder and the Tracker:
#      CHAOS_FUZZ_TOTAL seconds (default 300) shared evenly by every streamjson, ingest, clitelemetry and otlpjson
#      fuzz target, one fuzzing worker, in the background while
#   2. the chaos tests that judge correctness, not time (passthrough,
#      process faults, bad input, secrets, endpoints, and the backend
#      faults met by a single run: recovery, closed port, black-holed
#      Pushgateway) run on the other core, inside the fuzzing's time;
#   3. then, alone on the machine, the backend-fault runs whose
#      throughput ratios need it quiet (TestBackendFaults), and the state
#      attack whose peak RSS does (TestInputStateBounded).
#
# Every figure lands in one table, printed at the end and written as
# Markdown to CHAOS_REPORT (default: in a temp dir; CHAOS_KEEP=FILE keeps a
# copy); any breach fails the run. Longer fuzzing locally: e.g.
# CHAOS_FUZZ_TOTAL=3600 make chaos.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
start=$(date +%s)
fuzz_total=${CHAOS_FUZZ_TOTAL:-300}
work=$(mktemp -d)
fuzz_pid=
cleanup() {
	if [ -n "$fuzz_pid" ]; then kill "$fuzz_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
export CHAOS_REPORT=${CHAOS_REPORT:-$work/chaos-report.md}

echo "== building the chaos tests"
$GO test -c -tags chaos -o "$work/chaos.test" ./chaos/
# The test binary finds the repository from its working directory.
chaos() { (cd chaos && "$work/chaos.test" -test.count=1 -test.timeout=20m -test.v "$@"); }

# 1. Fuzzing, in the background.
# shellcheck source=chaos/fuzzlib.sh
. chaos/fuzzlib.sh
# The packages whose fuzz targets share the fuzzing time.
FUZZ_PKGS="streamjson ingest clitelemetry internal/otlpjson safetext"
fuzz() {
	local targets n fuzztime total=0 tolerated=0 pkg
	# PACKAGE:TARGET pairs: the decoders' own targets and the pipeline's.
	targets=$(for pkg in $FUZZ_PKGS; do $GO test -list 'Fuzz.*' "./$pkg/" | grep ^Fuzz | sed "s|^|$pkg:|"; done)
	n=$(echo "$targets" | wc -l)
	fuzztime="$(( (fuzz_total + n - 1) / n ))s"
	for pt in $targets; do
		local t=${pt#*:} log="$work/$(echo "${pt%%:*}" | tr / _)-${pt#*:}.log" result s verdict
		pkg=${pt%%:*}
		s=$(date +%s)
		verdict=$(FUZZ_PKG=$pkg fuzz_target "$t" "$fuzztime" "$log")
		s=$(( $(date +%s) - s ))
		total=$(( total + s ))
		# The last progress line: "fuzz: elapsed: 1m0s, execs: 123456 (2057/sec), ..."
		local execs value
		execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | awk '{print $2}')
		case $verdict in
		ok) result=ok value="${execs:-0} execs in ${s}s, no crash, invariants held" ;;
		ok-deadline)
			result=ok tolerated=$((tolerated + 1))
			value="${execs:-0} execs in ${s}s, no crash, invariants held; Go's fuzzing coordinator then failed the run on its own -fuzztime deadline (bare 'context deadline exceeded', no input written, seeds replayed clean)"
			;;
		*) result=BREACH value="${execs:-0} execs in ${s}s, FAILED: see the log above" ;;
		esac
		printf '%s\t%s\t%s\t%s\t%s\n' "4 bad input" "fuzz $pkg $t ($fuzztime, 1 worker)" "$value" \
			"no crash, no invariant broken" "$result" >>"$work/fuzz.tsv"
		if [ $result != ok ]; then
			echo "== fuzz $t FAILED:"
			cat "$log"
		elif [ "$verdict" = ok-deadline ]; then
			echo "== fuzz $t: the coordinator's deadline race, tolerated:"
			tail -20 "$log"
		fi
	done
	printf '%s\t%s\t%s\t%s\t%s\n' "4 bad input" "fuzzing, all targets" "${total}s over $n targets (the coordinator's deadline race tolerated in $tolerated)" ">= 300s" \
		"$( [ "$total" -ge 300 ] && echo ok || echo BREACH)" >>"$work/fuzz.tsv"
}
echo "== fuzzing ($fuzz_total s over the streamjson, ingest, clitelemetry and internal/otlpjson targets) beside the correctness tests"
fuzz >"$work/fuzz.out" 2>&1 &
fuzz_pid=$!

status=0
# 2. Correctness tests.
set +e
# The state attack's peak RSS is measured alone (step 3): beside the fuzzing
# the collector, held to half the CPU by the Go runtime's limiter, let the
# heap pass the soft limit when the 4 MiB snapshot came (peaks 31.2-32.8 MiB
# there, 31.1-31.6 alone on the same tree, against the 32 MiB bound).
CHAOS_APPEND="$work/rows.tsv" CHAOS_QUIET=1 chaos -test.run '^Test(Passthrough|Process|Input|Secrets|Endpoints|BackendRecovery|BackendOneRun|BackendSlowerP)' \
	-test.skip '^TestInputStateBounded$' >"$work/tests.log" 2>&1
s=$?
set -e
grep -E '^(=== RUN|--- |\s+--- )' "$work/tests.log" | grep -v '=== RUN.*/' || true
[ "$s" -eq 0 ] || status=$s
wait "$fuzz_pid" || status=1
fuzz_pid=
cat "$work/fuzz.out"

# 3. The backend faults and the state attack's peak RSS, alone.
echo "== backend faults, throughput, and the state attack's peak RSS (alone on the machine)"
set +e
CHAOS_APPEND="$work/rows.tsv" CHAOS_QUIET=1 chaos -test.run '^(TestBackendFaults|TestInputStateBounded)$' >"$work/backend.log" 2>&1
s=$?
set -e
grep -E '^(=== RUN|--- |\s+--- )' "$work/backend.log" | grep -v '=== RUN.*/' || true
[ "$s" -eq 0 ] || status=$s

# The table of every figure.
elapsed=$(( $(date +%s) - start ))
# 900 s since issue 33: the slowest runs measured, 738 and 743 s, were
# fresh clones on a host busy with other work (passthrough streams 5m29s,
# fuzzing 425 s over 11 targets, backend faults 165 s), plus 20 %; a quiet
# CI host takes about 520 s (fuzzing 357 s beside the tests, then 105 s of
# backend faults and 53 s of the state attack). It was 720 s since issue
# 21, when the state attack began to run alone after the fuzzing.
chaos_bound=900
printf '%s\t%s\t%s\t%s\t%s\n' "0 suite" "make chaos wall time" "${elapsed}s (fuzzing ${fuzz_total}s beside the tests)" "<= ${chaos_bound}s" \
	"$( [ "$elapsed" -le "$chaos_bound" ] && echo ok || echo BREACH)" >>"$work/rows.tsv"
set +e
CHAOS_FIGURES="$work/fuzz.tsv:$work/rows.tsv" chaos -test.run '^$' >"$work/table.log" 2>&1
s=$?
set -e
sed -n '/^=== chaos figures/,$p' "$work/table.log"
[ "$s" -eq 0 ] || status=$s
if [ "$status" -ne 0 ]; then
	echo "chaos: FAILED (exit $status); failing tests and breaches:"
	grep -hE -- '--- FAIL|BREACH|panic' "$work/tests.log" "$work/backend.log" | head -50
fi
if [ -n "${CHAOS_KEEP:-}" ]; then cp "$CHAOS_REPORT" "$CHAOS_KEEP"; fi
exit "$status"
