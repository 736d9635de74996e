#!/usr/bin/env bash
# The real Kueue controller (the pinned sigs.k8s.io/kueue module, built by `make tools`) on a running testbed,
# for the tests of queued admission. Started on demand and stopped again, because its webhooks sit in front of
# every RayCluster and RayJob the API server admits while it runs.
#   testbed/kueue.sh up     (after testbed/up.sh)
#   testbed/kueue.sh down   (testbed/down.sh calls it when Kueue was started)
# Integrations: ray.io/raycluster and ray.io/rayjob. Only objects labelled kueue.x-k8s.io/queue-name are managed
# (Kueue's default), so the other releases on the testbed are untouched. The queues themselves (ResourceFlavor,
# ClusterQueue, LocalQueue) are the test's to create.
# Loopback only: the webhook server listens on 127.0.0.1:$KUEUE_WEBHOOK_PORT with the API server's own serving
# certificate (its SANs hold 127.0.0.1, signed by the testbed CA), and the webhook configurations call it by URL.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/config.sh"
source "$here/lib.sh"

kueue_dir="$CLUSTER_DIR/kueue"
kc="$KUBECONFIG_TESTBED"
pki="$CLUSTER_DIR/pki"
webhook_names="kueue-testbed-mutating kueue-testbed-validating"

kueue_up() {
  need_bins kueue kubectl
  [[ -s "$tools/kueue/webhooks.yaml" ]] || die "Kueue's manifests missing under .tools/kueue: run \`ci/install-tools.sh cluster-test\` (or make tools)"
  "$bin/kubectl" --kubeconfig "$kc" get --raw /readyz >/dev/null 2>&1 || die "the testbed is not up: run testbed/up.sh first"
  pid_alive kueue && { log "Kueue already runs (log: $CLUSTER_DIR/logs/kueue.log)"; return; }
  mkdir -p "$kueue_dir"/{certs,etc-upper,etc-work} "$CLUSTER_DIR"/{run,logs}
  install -m 0600 "$pki/apiserver.crt" "$kueue_dir/certs/tls.crt"
  install -m 0600 "$pki/apiserver.key" "$kueue_dir/certs/tls.key"

  # CRDs too large for client-side apply's last-applied annotation: server-side.
  "$bin/kubectl" --kubeconfig "$kc" apply --server-side --force-conflicts -f "$tools/kueue/crds/" >/dev/null
  # (a CRD just created has no status yet, which `kubectl wait` reports as an error: retried)
  wait_for "Kueue CRDs established" 60 "$bin/kubectl" --kubeconfig "$kc" wait --for=condition=Established \
    --timeout=5s crd/clusterqueues.kueue.x-k8s.io crd/localqueues.kueue.x-k8s.io crd/workloads.kueue.x-k8s.io \
    crd/resourceflavors.kueue.x-k8s.io
  "$bin/kubectl" --kubeconfig "$kc" create namespace kueue-system --dry-run=client -o yaml \
    | "$bin/kubectl" --kubeconfig "$kc" apply -f - >/dev/null

  cat >"$kueue_dir/config.yaml" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:$KUEUE_HEALTH_PORT
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: $KUEUE_WEBHOOK_PORT
  certDir: $kueue_dir/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
integrations:
  frameworks: ["ray.io/raycluster", "ray.io/rayjob"]
EOF
  # Kueue reads its metrics serving certificate from the fixed path /etc/kueue/metrics/certs (even with metrics
  # off). It gets one in a private mount namespace, over an overlay of /etc: the host's /etc is not written.
  start_proc kueue unshare --mount --propagation private sh -ec "
    mount -t overlay overlay -o lowerdir=/etc,upperdir=$kueue_dir/etc-upper,workdir=$kueue_dir/etc-work /etc
    mkdir -p /etc/kueue/metrics/certs
    cp $kueue_dir/certs/tls.crt $kueue_dir/certs/tls.key /etc/kueue/metrics/certs/
    exec $bin/kueue --config $kueue_dir/config.yaml --kubeconfig $kc --feature-gates=VisibilityOnDemand=false"
  wait_for "Kueue /readyz" 90 curl -fsS "http://127.0.0.1:$KUEUE_HEALTH_PORT/readyz"
  wait_for "Kueue webhook server" 30 bash -c "exec 3<>/dev/tcp/127.0.0.1/$KUEUE_WEBHOOK_PORT"

  # Kueue's own webhook configurations, limited to what this Kueue serves (its Kueue objects and the Ray
  # integrations: the others would refuse every Deployment, Pod, ... with "no endpoint"), each pointed at the
  # local server by URL.
  "$root/.venv/bin/python" - "$tools/kueue/webhooks.yaml" "$pki/ca.crt" "$KUEUE_WEBHOOK_PORT" <<'PY' \
    | "$bin/kubectl" --kubeconfig "$kc" apply -f - >/dev/null
import base64, sys, yaml
manifests, ca, port = sys.argv[1], sys.argv[2], sys.argv[3]
served = ("kueue-x-k8s-io", "ray-io-v1-raycluster", "ray-io-v1-rayjob")
ca_bundle = base64.b64encode(open(ca, "rb").read()).decode()
out = []
for doc in yaml.safe_load_all(open(manifests)):
    if not doc:
        continue
    kind = doc["kind"]
    doc["metadata"] = {"name": "kueue-testbed-" + ("mutating" if kind.startswith("Mutating") else "validating")}
    hooks = []
    for hook in doc["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        if any(s in path for s in served):
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
            hooks.append(hook)
    doc["webhooks"] = hooks
    out.append(doc)
yaml.safe_dump_all(out, sys.stdout, sort_keys=False)
PY
  log "Kueue up (webhooks at https://127.0.0.1:$KUEUE_WEBHOOK_PORT, log: $CLUSTER_DIR/logs/kueue.log)"
}

kueue_down() {
  # the webhook configurations first: with the server gone, failurePolicy Fail would refuse every RayCluster
  local name
  for name in $webhook_names; do
    "$bin/kubectl" --kubeconfig "$kc" delete mutatingwebhookconfiguration,validatingwebhookconfiguration \
      "$name" --ignore-not-found >/dev/null 2>&1 || true
  done
  stop_proc kueue
  rm -rf "$kueue_dir"
}

case ${1:-} in
  up) kueue_up ;;
  down) kueue_down ;;
  *) echo "usage: testbed/kueue.sh up|down" >&2; exit 2 ;;
esac
