#!/usr/bin/env bash
# Writes kubernetes.schema from the Go types of the module versions pinned
# in kubeproto/oracle/go.mod (the oracle's `schema` command). With --check,
# writes nothing and fails when the vendored file differs from what those
# types give, or when the oracle's k8s.io versions differ from the control
# plane's (tests/controlplane/go.mod), so that the schema is always the
# types of the API server the tests run.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
oracle="$(bash "$root/kubeproto/oracle/build.sh")"
version() { # module go.mod: the version a go.mod resolves the module to
  awk -v m="$1" '($1 == m && $2 ~ /^v/) { v = $2 } ($1 == "replace" || $0 ~ /=>/) && $0 ~ "=> "m" " { v = $NF } END { print v }' "$2"
}
if [[ "${1:-}" == --check ]]; then
  failed=0
  for m in k8s.io/api k8s.io/apimachinery k8s.io/apiextensions-apiserver k8s.io/kube-aggregator; do
    ours="$(version "$m" "$root/kubeproto/oracle/go.mod")"
    theirs="$(version "$m" "$root/tests/controlplane/go.mod")"
    if [[ "$ours" != "$theirs" ]]; then
      echo "kubeproto/oracle/go.mod has $m $ours, the control plane $theirs" >&2
      failed=1
    fi
  done
  if ! "$oracle" schema | diff -q - "$here/kubernetes.schema" >/dev/null; then
    echo "kubeproto/schema/kubernetes.schema is stale: run bash kubeproto/schema/generate.sh" >&2
    failed=1
  fi
  exit "$failed"
fi
"$oracle" schema >"$here/kubernetes.schema.tmp"
mv "$here/kubernetes.schema.tmp" "$here/kubernetes.schema"
