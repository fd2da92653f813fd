#!/usr/bin/env bash
# Builds the control plane's commands once into a cache folder outside the repository, keyed by
# the pins (go.mod, go.sum, the Go sources here), and prints that folder. A folder that is complete
# is reused as it is; a changed pin gives a new key and so a new build.
# With --path it only prints the folder, and fails if that build is not there.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${AIRFLOW_K8S_RETRY_CACHE:-$HOME/.cache/airflow-k8s-retry}/controlplane"
# Bump when the way of building changes (flags below), so the key changes with it.
build_format=1
key="$(cd "$here" && { cat go.mod go.sum tools.go cmd/etcd/main.go; echo "$build_format"; } | sha256sum | cut -c1-16)"
out="$cache_root/$key/bin"
if [ -f "$out/.complete" ]; then
  echo "$out"
  exit 0
fi
if [ "${1:-}" = "--path" ]; then
  echo "controlplane: not built for these pins yet ($out); run 'make controlplane'" >&2
  exit 1
fi
command -v go >/dev/null 2>&1 || { echo "controlplane: 'go' not found; install Go 1.26 (go.mod says which)" >&2; exit 1; }
kube_version="$(awk '$1 == "k8s.io/kubernetes" { print $2 }' "$here/go.mod")"
minor="$(echo "$kube_version" | cut -d. -f2)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
tmp="$cache_root/$key/bin.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
echo "controlplane: building kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kwok ($kube_version) into $out; the first build takes a while" >&2
start=$(date +%s)
(cd "$here" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false -trimpath" \
  nice -n 10 go build -ldflags "$ldflags" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    sigs.k8s.io/kwok/cmd/kwok \
    ./cmd/etcd)
echo "$kube_version" > "$tmp/.complete"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "controlplane: built in $(( $(date +%s) - start ))s" >&2
echo "$out"
