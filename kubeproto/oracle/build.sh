#!/usr/bin/env bash
# Builds the oracle (kubeproto's Go counterpart) once per source: the binary
# lands in target/kubeproto-oracle/<hash of the module's files>/oracle, and a
# second run with the same sources costs nothing. Prints its path on stdout.
# -trimpath as tests/controlplane/build.sh builds, so that the two share the
# Go build cache's compiled k8s.io packages.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
key="$(cat "$here"/go.mod "$here"/go.sum "$here"/*.go | sha256sum | cut -c1-16)"
out="${CARGO_TARGET_DIR:-$root/target}/kubeproto-oracle/$key"
if [[ -x "$out/oracle" ]]; then
  echo "$out/oracle"
  exit 0
fi
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9
if [[ ! -x "$out/oracle" ]]; then
  mkdir -p "$out.tmp"
  (cd "$here" && go build -trimpath -o "$out.tmp/oracle" .) >&2
  rm -rf "$out"
  mv "$out.tmp" "$out"
fi
echo "$out/oracle"
