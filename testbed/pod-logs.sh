#!/usr/bin/env bash
# Logs of a hook pod, even after `kubectl logs` cannot reach it (pod deleted by a hook delete policy): reads the
# copies the pod runner's journal follows of the real node's hook containers (miles_testbed.journal).
# Usage: pod-logs.sh POD [NAMESPACE]
#   kubectl logs POD -n NS            also works while the pod exists (the real node's kubelet)
set -euo pipefail
source "$(dirname "$0")/config.sh"
[[ $# -ge 1 ]] || { echo "usage: $0 POD [NAMESPACE]" >&2; exit 2; }
pod=$1 ns=${2:-default}
shopt -s nullglob
dirs=("$CLUSTER_DIR/runner/node-logs/${ns}_${pod}_"*)
((${#dirs[@]})) || { echo "no hook pod '$pod' in namespace '$ns' is in the journal (see $CLUSTER_DIR/runner/journal.jsonl)" >&2; exit 1; }
for d in "${dirs[@]}"; do
  for f in "$d"/*.log; do echo "==> $ns/$pod [$(basename "$f" .log)] <=="; cat "$f"; done
done
