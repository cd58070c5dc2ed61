#!/usr/bin/env bash
# Checks the Helm chart with the real helm (pinned, installed by
# tests/tools/install.sh): `helm lint --strict` and `helm template` for every
# values file in kube-fanout/ci/ (default-values.yaml sets nothing), each
# rendered manifest holding every `# expect:` line of its file and no
# `# absent:` line; and every file in bad-values/ refused, with its
# `# error:` line in helm's message. Installing on a real API server is the
# end-to-end test tests/tests/helm.rs.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
helm="$(bash "$root/tests/tools/install.sh" helm)"
chart="$here/kube-fanout"
export HELM_CACHE_HOME HELM_CONFIG_HOME HELM_DATA_HOME
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
HELM_CACHE_HOME="$tmp/cache" HELM_CONFIG_HOME="$tmp/config" HELM_DATA_HOME="$tmp/data"

failures=0 checks=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# Lines of a values file that start with "# KEY: ", without that prefix.
directives() { sed -n "s/^# $1: //p" "$2"; }

for values in "$chart"/ci/*.yaml; do
  name="$(basename "$values")"
  checks=$((checks + 2))
  if ! "$helm" lint --strict "$chart" --values "$values" >"$tmp/lint" 2>&1; then
    fail "helm lint --strict with $name:"; cat "$tmp/lint" >&2; continue
  fi
  if ! "$helm" template kf "$chart" --namespace fanout --values "$values" >"$tmp/out" 2>"$tmp/err"; then
    fail "helm template with $name:"; cat "$tmp/err" >&2; continue
  fi
  while IFS= read -r want; do
    checks=$((checks + 1))
    grep -qF -- "$want" "$tmp/out" || fail "$name: rendered no line with: $want"
  done < <(directives expect "$values")
  while IFS= read -r unwanted; do
    checks=$((checks + 1))
    if grep -qF -- "$unwanted" "$tmp/out"; then fail "$name: rendered a line with: $unwanted"; fi
  done < <(directives absent "$values")
done

for values in "$here"/bad-values/*.yaml; do
  name="$(basename "$values")"
  want="$(directives error "$values")"
  [[ -n "$want" ]] || { fail "$name has no '# error:' line"; continue; }
  checks=$((checks + 1))
  if "$helm" template kf "$chart" --namespace fanout --values "$values" >/dev/null 2>"$tmp/err"; then
    fail "$name was accepted"
  elif ! grep -qF -- "$want" "$tmp/err"; then
    fail "$name refused without naming the fault ($want):"; cat "$tmp/err" >&2
  fi
done

# The PrometheusRule's groups and the dashboard ConfigMap's JSON are the
# files in files/ (deploy/monitoring/ links to them) line for line: helm
# neither templated nor re-indented them wrongly.
# The lines of template FILE's manifest below its line MARKER, less INDENT.
rendered() {
  sed -n "\|^# Source: kube-fanout/templates/$1\$|,/^---\$/p" "$tmp/monitoring" |
    sed -n "/^$2\$/,\$p" | sed '1d;/^---$/d' | sed "s/^$3//"
}
"$helm" template kf "$chart" --namespace fanout --values "$chart/ci/monitoring-values.yaml" >"$tmp/monitoring"
# Fails unless template $1's lines below $2, less indent $3, are files/$4.
same_as_file() {
  checks=$((checks + 1))
  if ! diff -u "$chart/files/$4" <(rendered "$1" "$2" "$3") >"$tmp/diff"; then
    fail "$1 does not render files/$4 as it is:"; cat "$tmp/diff" >&2
  fi
}
same_as_file prometheusrule.yaml 'spec:' '  ' kube-fanout.rules.yaml
same_as_file grafana-dashboard.yaml '  kube-fanout.json: |-' '    ' kube-fanout-dashboard.json

echo "chart: $((checks - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
