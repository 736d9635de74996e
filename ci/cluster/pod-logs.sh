#!/usr/bin/env bash
# Logs of a pod the testbed's pod runner executed, even after `kubectl logs` cannot reach it (pod deleted
# by a hook delete policy): reads the runner's local log files. Usage: pod-logs.sh POD [NAMESPACE]
#   kubectl logs POD -n NS            also works while the pod exists (served by kwok's kubelet endpoint)
#   kubectl get pod POD -n NS -o jsonpath='{.metadata.annotations.testbed\.miles\.dev/log-tail}'
set -euo pipefail
source "$(dirname "$0")/config.sh"
[[ $# -ge 1 ]] || { echo "usage: $0 POD [NAMESPACE]" >&2; exit 2; }
pod=$1 ns=${2:-default}
shopt -s nullglob
dirs=("$CLUSTER_DIR/runner/pods/$ns/$pod"-*)
((${#dirs[@]})) || { echo "no pod '$pod' in namespace '$ns' was run by the pod runner (see $CLUSTER_DIR/runner/journal.jsonl)" >&2; exit 1; }
for d in "${dirs[@]}"; do
  for f in "$d"/*.log; do echo "==> $ns/$pod [$(basename "$f" .log)] <=="; cat "$f"; done
done
