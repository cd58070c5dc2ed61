#!/usr/bin/env bash
# Generates the Go code for proto/proto/kubefanout/v1/fanout.proto into
# kubefanoutv1/ (or into the directory given as $1, which scripts/test uses
# to check that the committed files match the proto). Run by `go generate`.
#
# protoc is the one the Rust build uses: the protoc-bin-vendored crate's
# binary for this platform, already in cargo's registry after any cargo
# build; the plugins are `go install`ed at pinned versions by
# tests/tools/install.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$(mkdir -p "${1:-$here/kubefanoutv1}" && cd "${1:-$here/kubefanoutv1}" && pwd)"
# The crate ships one binary per platform: take the one that runs here.
protoc=""
for manifest in $(cd "$root" && cargo metadata --format-version 1 --filter-platform "$(rustc -vV | sed -n 's/^host: //p')" |
  grep -o '"manifest_path":"[^"]*/protoc-bin-vendored-[a-z0-9_]*-[a-z0-9_]*-[0-9.]*/Cargo.toml"' |
  cut -d'"' -f4); do
  if "$(dirname "$manifest")/bin/protoc" --version >/dev/null 2>&1; then
    protoc="$(dirname "$manifest")/bin/protoc"
    break
  fi
done
[[ -n "$protoc" ]] || { echo "no runnable protoc from protoc-bin-vendored (run cargo fetch)" >&2; exit 1; }
gen_go="$(bash "$root/tests/tools/install.sh" protoc-gen-go)"
gen_grpc="$(bash "$root/tests/tools/install.sh" protoc-gen-go-grpc)"
proto=kubefanout/v1/fanout.proto
pkg=github.com/kube-fanout/kube-fanout/client/go/kubefanoutv1
"$protoc" -I "$root/proto/proto" \
  --plugin=protoc-gen-go="$gen_go" --plugin=protoc-gen-go-grpc="$gen_grpc" \
  --go_out="$out" --go_opt=paths=source_relative,M$proto=$pkg \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative,M$proto=$pkg \
  "$proto"
# paths=source_relative keeps the proto's directories; flatten them.
mv "$out/kubefanout/v1/"*.go "$out/"
rm -rf "$out/kubefanout"
