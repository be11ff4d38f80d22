#!/bin/sh
# Runs the whole-process benchmark harness (bench/harness) from the repository
# root. Arguments go to the harness:
#
#   bench/run.sh                     # full run: ~10 min, prints the markdown table
#   bench/run.sh -quick              # smoke check of the harness (CI): < 2 min
#   CBC_OTEL_BIN=/other/tree/cbc-otel bench/run.sh -only passthrough,latency
#   CBC_OTELCOL_BIN=/tmp/bin/otelcol-bench bench/run.sh -only replay
#
# Without CBC_OTEL_BIN (or -bin) it builds ./cmd/cbc-otel of this tree.
set -eu
cd "$(dirname "$0")/.."
exec go run ./bench/harness "$@"
