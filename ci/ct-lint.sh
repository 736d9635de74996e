#!/usr/bin/env bash
# ci/ct-lint.sh [ct lint args...]: chart-testing's lint (Chart.yaml schema, yamllint, helm lint once per
# scenario) on the chart with its scenarios taken from values/, the one copy of them.
#
# ct reads a chart's scenarios from <chart>/ci/*-values.yaml. Rather than keep copies there, the chart
# is staged in a scratch folder with ci/<name>-values.yaml written from each values/values-<name>.yaml.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/charts"
cp -r "$root/charts/miles" "$scratch/charts/miles"
if [[ -e $root/charts/miles/ci ]]; then
  echo "ct-lint: charts/miles/ci exists; scenarios live in values/ only (remove charts/miles/ci)" >&2
  exit 1
fi
mkdir "$scratch/charts/miles/ci"
for file in "$root"/values/values-*.yaml; do
  name=$(basename "$file" .yaml)
  cp "$file" "$scratch/charts/miles/ci/${name#values-}-values.yaml"
done
cd "$root"
ct lint --config ci/ct.yaml --chart-dirs "$scratch/charts" --charts "$scratch/charts/miles" "$@"
