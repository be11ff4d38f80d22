#!/bin/sh
# Builds the Jaeger v2 all-in-one binary pinned in this module's go.mod
# (tool github.com/jaegertracing/jaeger/cmd/jaeger) into the directory given
# as the first argument, as DIR/jaeger. A module of its own because Jaeger's
# ~300 requirements must not enter the project's go.mod, and because
# `go install ...@version` is refused (Jaeger's go.mod has replace directives).
#
#   tools/jaeger/build.sh /tmp/bin && JAEGER_BIN=/tmp/bin/jaeger go test ./e2e -run Jaeger
set -eu
if [ $# -ne 1 ]; then
	echo "usage: $0 OUTPUT_DIR" >&2
	exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
cd "$(dirname "$0")"
exec go build -trimpath -o "$out/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger
