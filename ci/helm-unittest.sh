#!/usr/bin/env bash
# ci/helm-unittest.sh HELM CHART: runs the chart's helm-unittest suites with the given Helm binary and
# fails when the plugin reports a failure or runs no test at all.
set -euo pipefail
helm_bin=${1:?usage: helm-unittest.sh HELM CHART}
chart=${2:?usage: helm-unittest.sh HELM CHART}
out=$(mktemp); trap 'rm -f "$out"' EXIT
echo "== helm-unittest under $("$helm_bin" version --short)"
set +e
NO_COLOR=1 "$helm_bin" unittest --file 'tests/**/*_test.yaml' "$chart" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
set -e
((rc == 0)) || exit "$rc"
passed=$(sed -nE 's/^Tests:[[:space:]]+([0-9]+) passed.*/\1/p' "$out" | tail -n 1)
if [[ -z $passed || $passed -eq 0 ]]; then
  echo "helm-unittest under $helm_bin ran no tests in $chart" >&2
  exit 1
fi
