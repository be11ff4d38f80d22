#!/bin/sh
# Builds the Helm v3 CLI pinned in this module's go.mod (tool
# helm.sh/helm/v3/cmd/helm) into the directory given as the first argument,
# as DIR/helm. A module of its own so that Helm's ~150 requirements (the
# Kubernetes client libraries among them) stay out of the project's go.mod.
#
#   tools/helm/build.sh /tmp/bin && HELM_BIN=/tmp/bin/helm go test ./deploy/...
set -eu
if [ $# -ne 1 ]; then
	echo "usage: $0 OUTPUT_DIR" >&2
	exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
cd "$(dirname "$0")"
# The link flags of Helm's own Makefile: its version, and the Kubernetes
# version `helm template` and `helm lint` assume without --kube-version (the
# minor of the client-go it is built with; without them Helm assumes 1.20).
helm_version=$(go list -m -f '{{.Version}}' helm.sh/helm/v3)
k8s_minor=$(go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
for p in pkg/chartutil pkg/lint/rules; do
	ldflags="$ldflags -X helm.sh/helm/v3/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/$p.k8sVersionMinor=$k8s_minor"
done
exec go build -trimpath -ldflags "$ldflags" -o "$out/helm" helm.sh/helm/v3/cmd/helm
