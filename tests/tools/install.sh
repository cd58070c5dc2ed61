#!/usr/bin/env bash
# Installs the real tools the tests, the demo and scripts/image drive, with
# `go install` at pinned versions, into target/tools/<name>-<version>/ (so a
# second run costs nothing). Usage: install.sh NAME; prints the binary's path
# on stdout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
case "${1:-}" in
  grpcurl) pkg=github.com/fullstorydev/grpcurl/cmd/grpcurl; version=v1.9.3 ;;
  helm) pkg=helm.sh/helm/v3/cmd/helm; version=v3.22.0 ;;
  crane) pkg=github.com/google/go-containerregistry/cmd/crane; version=v0.22.1 ;;
  # The Go client's generated code (client/go/kubefanoutv1): the versions
  # here and in client/go/go.mod's google.golang.org/protobuf and grpc go
  # together.
  protoc-gen-go) pkg=google.golang.org/protobuf/cmd/protoc-gen-go; version=v1.36.11 ;;
  protoc-gen-go-grpc) pkg=google.golang.org/grpc/cmd/protoc-gen-go-grpc; version=v1.6.1 ;;
  *) echo "usage: $0 grpcurl|helm|crane|protoc-gen-go|protoc-gen-go-grpc" >&2; exit 2 ;;
esac
dir="${CARGO_TARGET_DIR:-$root/target}/tools/$1-$version"
if [[ ! -x "$dir/$1" ]]; then
  mkdir -p "$dir"
  GOBIN="$dir" GOFLAGS=-buildvcs=false go install "$pkg@$version" >&2
fi
echo "$dir/$1"
