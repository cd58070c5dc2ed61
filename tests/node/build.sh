#!/usr/bin/env bash
# Builds the node's Kubernetes components the node tests run (kubelet,
# kube-proxy, kube-controller-manager, kube-scheduler, kubectl) and the pod
# sandbox image (pause/, written as an OCI tarball by oci-image.sh), once
# per go.sum: they land in target/node/<hash of go.mod, go.sum and the
# pause sources>/ and a second run costs nothing. Prints that directory.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# The node must run the release the control plane runs: one version skew
# less to reason about when a pod misbehaves.
release() { sed -n 's/^\tk8s.io\/kubernetes \(v[^ ]*\).*/\1/p' "$1"; }
node_release="$(release "$here/go.mod")"
cp_release="$(release "$here/../controlplane/go.mod")"
if [[ -z "$node_release" || "$node_release" != "$cp_release" ]]; then
  echo "tests/node/go.mod has k8s.io/kubernetes '$node_release'," \
    "tests/controlplane/go.mod '$cp_release': they must be the same release" >&2
  exit 1
fi
key="$(cat "$here/go.mod" "$here/go.sum" "$here/pause/main.go" "$here/oci-image.sh" |
  sha256sum | cut -c1-16)"
out="${CARGO_TARGET_DIR:-$root/target}/node/$key"
commands=(kubelet kube-proxy kube-controller-manager kube-scheduler kubectl)
built() {
  local c
  for c in "${commands[@]}" pause; do [[ -x "$out/$c" ]] || return 1; done
  [[ -f "$out/pause.oci.tar" ]]
}
if built; then
  echo "$out"
  exit 0
fi
# Two test binaries may ask at once: one builds, the other waits for it.
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9
if built; then
  echo "$out"
  exit 0
fi
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
cd "$here"
start=$SECONDS
# -pgo=off as for kube-apiserver: the shipped profiles slow the cold build.
pkgs=()
for c in "${commands[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
go build -pgo=off -trimpath -ldflags='-s -w' -o "$out.tmp/" "${pkgs[@]}" >&2
# pause runs as the pods' PID 1 in an otherwise empty image: static.
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out.tmp/pause" ./pause >&2
rootfs="$out.tmp/pause-rootfs"
mkdir -p "$rootfs"
cp "$out.tmp/pause" "$rootfs/pause"
# 65535: the user registry.k8s.io/pause runs as.
bash "$here/oci-image.sh" "$rootfs" kube-fanout.test/pause:1 /pause 65535:65535 "$out.tmp/pause.oci.tar"
rm -rf "$rootfs"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "node components built in $((SECONDS - start))s into $out" >&2
echo "$out"
