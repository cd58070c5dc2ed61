#!/usr/bin/env bash
# Builds the real kube-apiserver and etcd the tests run, once per go.sum:
# binaries land in target/controlplane/<hash of go.sum>/ and a second run
# with the same go.sum costs nothing. Prints that directory on stdout.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
key="$(cat "$here/go.mod" "$here/go.sum" "$here/etcd/main.go" | sha256sum | cut -c1-16)"
# KUBE_FANOUT_CONTROLPLANE_SYMBOLS=1 keeps the binaries' symbol tables, so
# that perf can name the API server's functions (the bench's profiles); a
# directory of its own, so the tests' stripped build is untouched.
strip='-s -w'
if [[ "${KUBE_FANOUT_CONTROLPLANE_SYMBOLS:-}" == 1 ]]; then
  strip=''
  key="$key-symbols"
fi
out="${CARGO_TARGET_DIR:-$root/target}/controlplane/$key"
if [[ -x "$out/kube-apiserver" && -x "$out/etcd" ]]; then
  echo "$out"
  exit 0
fi
# Two test binaries may ask at once: one builds, the other waits for it
# instead of racing it on the same temporary directory.
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9
if [[ -x "$out/kube-apiserver" && -x "$out/etcd" ]]; then
  echo "$out"
  exit 0
fi
mkdir -p "$out.tmp"
cd "$here"
start=$SECONDS
# -pgo=off: kube-apiserver ships a default.pgo profile whose optimisation pass
# makes the cold build much slower and buys the tests nothing.
go build -pgo=off -trimpath -ldflags="$strip" -o "$out.tmp/etcd" ./etcd >&2
go build -pgo=off -trimpath -ldflags="$strip" -o "$out.tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2
rm -rf "$out"
mv "$out.tmp" "$out"
echo "control plane built in $((SECONDS - start))s into $out" >&2
echo "$out"
