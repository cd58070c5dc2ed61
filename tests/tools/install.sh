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
  # Checks and unit-tests the alerting rules (deploy/monitoring/):
  # Prometheus v3.16.0, whose Go module is v0.316.0, built without its
  # service discovery providers (the remove_all_sd tag, Prometheus 3.10+):
  # with them a cold install fetches and compiles every cloud's SDK, over
  # 3 GB and more than 20 minutes here; rules need none of them.
  promtool) pkg=github.com/prometheus/prometheus/cmd/promtool; version=v0.316.0; tags=remove_all_sd ;;
  # The Go client's generated code (client/go/kubefanoutv1): the versions
  # here and in client/go/go.mod's google.golang.org/protobuf and grpc go
  # together.
  protoc-gen-go) pkg=google.golang.org/protobuf/cmd/protoc-gen-go; version=v1.36.11 ;;
  protoc-gen-go-grpc) pkg=google.golang.org/grpc/cmd/protoc-gen-go-grpc; version=v1.6.1 ;;
  *) echo "usage: $0 grpcurl|helm|crane|promtool|protoc-gen-go|protoc-gen-go-grpc" >&2; exit 2 ;;
esac
dir="${CARGO_TARGET_DIR:-$root/target}/tools/$1-$version"
if [[ ! -x "$dir/$1" ]]; then
  mkdir -p "$dir"
  GOBIN="$dir" GOFLAGS=-buildvcs=false go install -tags="${tags:-}" "$pkg@$version" >&2
fi
echo "$dir/$1"
