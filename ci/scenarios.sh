#!/usr/bin/env bash
# make scenarios: renders every user scenario in values/ with the real Helm 3 and Helm 4, validates the
# manifests (kubeconform, strict) and the run spec (miles-hooks plan), and prints what each scenario
# would create and the topology it derives.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
exec python3 ci/render_scenarios.py "$@"
