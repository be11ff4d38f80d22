#!/bin/sh
# Builds kube-apiserver and etcd, pinned in this module's go.mod (tool
# k8s.io/kubernetes/cmd/kube-apiserver, tool go.etcd.io/etcd/server/v3),
# into the directory given as the first argument, as DIR/kube-apiserver and
# DIR/etcd: the real API server deploy/helm's TestAPIServer applies the
# chart to. A module of its own because Kubernetes' ~200 requirements must
# not enter the project's go.mod, and because `go install ...@version` is
# refused (k8s.io/kubernetes replaces its staging modules, which go.mod
# here replaces with their published v0.37.x tags).
#
#   tools/kube/build.sh /tmp/bin && KUBE_APISERVER_BIN=/tmp/bin/kube-apiserver \
#     ETCD_BIN=/tmp/bin/etcd go test ./deploy/helm -run TestAPIServer
set -eu
if [ $# -ne 1 ]; then
	echo "usage: $0 OUTPUT_DIR" >&2
	exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
cd "$(dirname "$0")"
# The version stamp of Kubernetes' own build (hack/lib/version.sh): without
# it /version says v0.0.0-master.
kube_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=$(echo "$kube_version" | cut -d. -f2)
v=k8s.io/component-base/version
go build -trimpath -ldflags "-s -w -X $v.gitVersion=$kube_version -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean" \
	-o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
exec go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3
