#!/usr/bin/env bash
# Builds the x509 oracle (the API server's certificate rules as a program,
# for tests/tests/x509_differential.rs) once per source: the binary lands
# in target/x509oracle/<hash of its sources>/ and a second run costs
# nothing. Prints that directory on stdout.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
key="$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-16)"
out="${CARGO_TARGET_DIR:-$root/target}/x509oracle/$key"
if [[ -x "$out/x509oracle" ]]; then
  echo "$out"
  exit 0
fi
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9
if [[ -x "$out/x509oracle" ]]; then
  echo "$out"
  exit 0
fi
mkdir -p "$out.tmp"
cd "$here"
go build -trimpath -ldflags='-s -w' -o "$out.tmp/x509oracle" . >&2
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out"
