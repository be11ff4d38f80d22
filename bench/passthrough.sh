#!/usr/bin/env bash
# Passthrough benchmark: how much does `cbc-otel run` cost compared with a
# plain pipe? Generates a synthetic stream-json file (fixed seed), then times
#   cat:  cat F > /dev/null                    (the floor)
#   pipe: cat F | cat > /dev/null              (one extra pipe hop: the baseline)
#   run:  cbc-otel run -- cat F > /dev/null    (the wrapper, taps and all)
# RUNS times each, interleaved, and prints medians and run/pipe throughput
# (target >= 0.95). Not a test: timing on shared machines is noisy.
#
# Env: SIZE_MB (default 1024), RUNS (default 5), WORKDIR (default a temp dir,
# removed at exit), KEEP=1 keeps it.
set -euo pipefail

SIZE_MB=${SIZE_MB:-1024}
RUNS=${RUNS:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ -n ${WORKDIR:-} ]]; then
	work=$WORKDIR
	mkdir -p "$work"
else
	work=$(mktemp -d)
	[[ ${KEEP:-0} == 1 ]] || trap 'rm -rf "$work"' EXIT
fi
bin=$work/cbc-otel
data=$work/stream-${SIZE_MB}m.ndjson

echo "building cbc-otel..." >&2
(cd "$root" && go build -o "$bin" ./cmd/cbc-otel)
if [[ ! -s $data ]]; then
	echo "generating ${SIZE_MB} MiB stream..." >&2
	(cd "$root" && go run ./bench/genstream -size-mb "$SIZE_MB" -seed 1 -o "$data")
fi
bytes=$(stat -c %s "$data")
cat "$data" >/dev/null # warm the page cache

# time_one NAME: runs the named case once, prints "wall cpu" in seconds
# (cpu = user + sys of every process of the case; far less sensitive than
# wall time to what else runs on the machine).
time_one() {
	local TIMEFORMAT='%R %U %S' t
	t=$( { time case $1 in
		cat) cat "$data" >/dev/null ;;
		pipe) cat "$data" | cat >/dev/null ;;
		run) "$bin" run -- cat "$data" >/dev/null ;;
		esac; } 2>&1)
	awk '{ printf "%.3f %.3f\n", $1, $2 + $3 }' <<<"$t"
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

declare -A wall cpu
for ((i = 1; i <= RUNS; i++)); do
	for c in cat pipe run; do
		read -r w u <<<"$(time_one $c)"
		wall[$c]+="$w "
		cpu[$c]+="$u "
	done
done

printf '%s: %d bytes, %d runs each (median; all wall times in brackets)\n' "$(basename "$data")" "$bytes" "$RUNS"
declare -A mw mc
for c in cat pipe run; do
	mw[$c]=$(tr ' ' '\n' <<<"${wall[$c]}" | grep . | median)
	mc[$c]=$(tr ' ' '\n' <<<"${cpu[$c]}" | grep . | median)
	printf '  %-5s wall %7.3f s %8.1f MiB/s   cpu %7.3f s   [%s]\n' "$c" "${mw[$c]}" \
		"$(awk -v n="$bytes" -v t="${mw[$c]}" 'BEGIN { print n / 1048576 / t }')" "${mc[$c]}" "${wall[$c]% }"
done
printf 'throughput run/pipe = %.3f (target >= 0.95)\n' "$(awk -v p="${mw[pipe]}" -v r="${mw[run]}" 'BEGIN { print p / r }')"
printf 'cpu        run/pipe = %.3f\n' "$(awk -v p="${mc[pipe]}" -v r="${mc[run]}" 'BEGIN { print r / p }')"
