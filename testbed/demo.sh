#!/usr/bin/env bash
# make demo: the local testbed end to end. Builds the tools if needed, brings the cluster up, installs the
# colocated scenario with the real hooks, prints progress and the final state, and how to look around.
# Usage: testbed/demo.sh [RELEASE] [NAMESPACE]      (defaults: miles, miles-demo)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/config.sh"
source "$here/lib.sh"
release=${1:-miles}
ns=${2:-miles-demo}
export KUBECONFIG="$KUBECONFIG_TESTBED" PATH="$bin:$root/.venv/bin:$PATH"

# Measured: `ci/install-tools.sh demo` from a clean clone on a 2-core machine with empty Go, uv and image caches
# (15 min 26 s; a fresh machine adds its Debian packages); README "Measured" has the date and the breakdown.
DEMO_COLD_BUILD_MIN=16
demo_t0=$SECONDS
# step SECONDS_AT_START NAME: the step's duration as it finishes
step_done() { log "$2 done in $((SECONDS - $1)) s (demo so far $((SECONDS - demo_t0)) s)"; }
cat <<PLAN
make demo: three steps.
  1. build what the demo runs (never what only the tests or lint use), two lanes side by side:
$("$root/ci/install-tools.sh" --plan demo | sed "s/^/   /")
     cold on a fresh 2-core machine: about $DEMO_COLD_BUILD_MIN min; with every part built: seconds
  2. bring the local testbed up: about 2 min (most of it importing the images into the real node)
  3. install the colocated scenario with the real hooks, then helm test: about 1.5 min
PLAN
t=$SECONDS; "$root/ci/install-tools.sh" demo; step_done "$t" "1. build"
t=$SECONDS; "$here/up.sh"; step_done "$t" "2. testbed up"

log "preparing namespace $ns: shared-storage claim, hf-token Secret, local Hugging Face mirror"
"$here/storage.sh" "$ns"
kubectl -n "$ns" create secret generic hf-token --from-literal=token=hf_testbed_not_a_token \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null
python3 "$root/tests/e2e/seed.py" >/dev/null
values=(-f "$root/values/values-local-testbed.yaml" -f "$root/values/values-colocated.yaml")
# Each demo is a fresh install and a new run: an earlier demo's release goes, and its run directory with it
# (over a finished run the chart refuses to start a job that would train nothing: docs/day2.md).
if helm status "$release" -n "$ns" >/dev/null 2>&1; then
  log "removing the earlier demo release $release and its run directory"
  helm uninstall "$release" -n "$ns" --wait --timeout 5m >/dev/null
fi
rm -rf "${FSX_DIR:?}/runs/$ns/$release"
# Publish the converted checkpoint a previous run would have left, so the demo takes about a minute
# (tests/e2e/test_real_convert.py runs a real conversion through the convert hook).
"$root/.venv/bin/python" "$root/tests/e2e/seed.py" --publish-converted --release "$release" --namespace "$ns" \
  -- "${values[@]}"

log "helm install $release (colocated scenario) — hooks run for real; progress every 2 s"
t0=$SECONDS
# As on a real cluster (README, docs/runbook.md): no --wait, the wait-ready hook waits for the RayCluster
helm upgrade --install "$release" "$root/charts/miles" -n "$ns" "${values[@]}" --timeout 10m &
helm_pid=$!
last=""
while kill -0 "$helm_pid" 2>/dev/null; do
  now=$(kubectl -n "$ns" get pods --no-headers -o custom-columns='POD:.metadata.name,PHASE:.status.phase,NODE:.spec.nodeName' 2>/dev/null | sort)
  if [[ $now != "$last" ]]; then
    printf '\n[%3ds] pods in %s:\n%s\n' $((SECONDS - t0)) "$ns" "$now"
    last=$now
  fi
  sleep 2
done
if ! wait "$helm_pid"; then
  log "helm install failed; hook logs: testbed/pod-logs.sh <pod> $ns, runner: $CLUSTER_DIR/logs/pod-runner.log"
  exit 1
fi
step_done "$t0" "3. helm install"

echo; echo "=== hooks run (in order), from the testbed's journal: node real-cpu-0 = a real container ==="
python3 - "$CLUSTER_DIR/runner/journal.jsonl" "$ns" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["namespace"] == sys.argv[2]:
        print(f"  {e['pod']:<36} {e['container']:<18} exit {e['exitCode']}  {e['end'] - e['start']:5.1f}s  {e['node']}")
PY
echo; echo "=== pods ==="; kubectl -n "$ns" get pods -o wide
echo; echo "=== RayCluster ==="; kubectl -n "$ns" get raycluster
kubectl -n "$ns" get raycluster -o jsonpath='{range .items[*]}{.metadata.name}: {range .status.conditions[*]}{.type}={.status} {end}{"\n"}{end}'
head_ip=$(kubectl -n "$ns" get pods -l ray.io/node-type=head -o jsonpath='{.items[0].status.podIP}')
echo; echo "=== Ray job (the release's Ray head: a container on $REAL_NODE_NAME, at $head_ip) ==="
echo "unauthenticated job list (expected: refused, the head runs with token authentication):" \
  "HTTP $(curl -s -o /dev/null -w '%{http_code}' "http://$head_ip:8265/api/jobs/")"
python3 - "$ns" "http://$head_ip:8265/api/jobs/" "$RAY_AUTH_TOKEN_FILE" <<'PY' || true
import json, sys, urllib.request
ns, url, token_file = sys.argv[1:]
req = urllib.request.Request(url, headers={"Authorization": "Bearer " + open(token_file).read().strip()})
for j in json.load(urllib.request.urlopen(req, timeout=10)):
    md = j.get("metadata") or {}
    if md.get("miles.namespace") == ns:
        print("  %s  %s  release=%s" % (j["submission_id"], j["status"], md.get("miles.release")))
        print("  entrypoint: " + j["entrypoint"][:160] + " ...")
PY
echo; echo "=== helm test ==="
status=0
if ! helm test "$release" -n "$ns" --logs; then
  log "helm test failed: the test pods' logs above name the cause"
  status=1
fi
log "make demo took $((SECONDS - demo_t0)) s in all"
cat <<MSG

Look around:
  export KUBECONFIG=$KUBECONFIG_TESTBED PATH=$bin:\$PATH
  kubectl -n $ns get pods,jobs,raycluster,svc,cm
  kubectl get nodes -L node.kubernetes.io/instance-type,sagemaker.amazonaws.com/node-health-status
  testbed/pod-logs.sh <hook-pod> $ns           # logs of the hook pods (also after they are deleted)
  # the submitted job (the release's Ray head, token authentication; this machine routes to its pod address):
  RAY_ADDRESS=http://$head_ip:8265 RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$RAY_AUTH_TOKEN_FILE ray job list
  open http://$head_ip:8265                 # Ray dashboard (it asks for the token in the file above)
Tear down:
  helm uninstall $release -n $ns; make cluster-down
MSG
exit $status
