#!/usr/bin/env bash
# Brings the local testbed up: etcd, kube-apiserver, kube-controller-manager, kube-scheduler (real, pinned
# Kubernetes), kwok (simulated nodes/pods), the real KubeRay operator with its CRDs, the pod runner and the
# real node (testbed/node.sh: kubelet, containerd, kube-proxy, CoreDNS), where the Ray heads, hook Jobs, helm-test
# pods and the reward service run. The control plane
# listens on 127.0.0.1, the real node and its pods in network namespaces of their own; state lives under
# .tools/cluster/.
# Tools must be built first: `ci/install-tools.sh demo` (what `make cluster-up` and `make demo` run).
# Usage: testbed/up.sh            (NODES=128 CPU_NODES=2 ... see testbed/config.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/config.sh"
source "$here/lib.sh"

t0=$(date +%s.%N)
UP_T0=$t0
need_bins kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok kuberay-operator
[[ -x "$tools/ray-worker-venv/bin/ray" ]] || die "ray not found at .tools/ray-worker-venv/bin/ray: run \`ci/install-tools.sh rayworker\` (or make tools)"
[[ -x "$root/.venv/bin/python" ]] || die ".venv/bin/python missing: run \`ci/install-tools.sh python\`"
[[ -s "$tools/kuberay/crds/ray.io_rayclusters.yaml" ]] || die "KubeRay CRDs missing under .tools/kuberay/crds: run \`ci/install-tools.sh cluster\`"
validate_config

if any_running; then
  if "$bin/kubectl" --kubeconfig "$KUBECONFIG_TESTBED" get --raw /readyz >/dev/null 2>&1; then
    log "testbed already up (kubeconfig: $KUBECONFIG_TESTBED); \`make cluster-down\` first to recreate it"
    exit 0
  fi
  die "a previous testbed is partly running (pid files in $CLUSTER_DIR/run): run \`make cluster-down\` first"
fi
check_ports_free

# From here on, a failure stops whatever was started, so nothing is left running.
trap 'rc=$?; if ((rc != 0)); then log "up failed (exit $rc): stopping what was started"; "$here/down.sh" >&2 || true; fi' EXIT

mkdir -p "$CLUSTER_DIR"/{run,logs}
rm -rf "$CLUSTER_DIR/etcd-data" "$CLUSTER_DIR/runner" "$RAY_TMP"
rm -f "$CLUSTER_DIR"/logs/*.log
# pid files of a testbed killed before its `down` (nothing of them runs: any_running said so above); left, each
# would read as a component that exited while waiting
rm -f "$CLUSTER_DIR"/run/*.pid
"$here/certs.sh"
kc="$KUBECONFIG_TESTBED"
pki="$CLUSTER_DIR/pki"

# --- what the Ray processes need --------------------------------------------------------------------------
# Each release's Ray head runs on the real node (node.sh) from the miles stand-in image; the pod runner joins one
# local Ray worker node to it per simulated worker pod. The submitted job runs `cd /root/miles; python3 train.py
# ...` on such a worker: each runs in a mount namespace with $FSX_DIR at the storage mount path and
# testbed/fake-miles at /root/miles (empty mount points are created on the host if missing, and removed by
# cluster-down), as do the convert pod's containers, so jobs and conversions really run.
export RAY_USAGE_STATS_ENABLED=0
# The testbed's Ray token is its own: a caller's (e.g. pytest after tests/ray set its cluster's token in the
# environment) must not leak into the pod runner, which passes each worker only its pod's token.
unset RAY_AUTH_MODE RAY_AUTH_TOKEN RAY_AUTH_TOKEN_PATH
(umask 077 && "$root/.venv/bin/python" -c 'import secrets; import sys; sys.stdout.write(secrets.token_urlsafe(32))' >"$RAY_AUTH_TOKEN_FILE")
# The stand-in train.py hands its argv to miles' real parser: the contract venv `make tools` builds.
export MILES_CONTRACT_PYTHON="$root/.tools/miles-contract/bin/python" MILES_CONTRACT_DRIVER="$root/ci/miles-contract/parse_argv.py"
unshare -m --propagation private true 2>/dev/null ||
  die "no mount namespaces here (the pod runner binds the shared storage at $STORAGE_MOUNT_PATH in them): run as root"
mountpoints_acquire "$STORAGE_MOUNT_PATH"
fake_miles=""
if [[ $FAKE_MILES == 1 ]]; then
  fake_miles="$here/fake-miles"
  mountpoints_acquire /root/miles
else
  log "FAKE_MILES=0: submitted Ray jobs and the convert pod will fail (no /root/miles)"
fi

# --- etcd ------------------------------------------------------------------------------------------------
start_proc etcd "$bin/etcd" --name testbed --data-dir "$CLUSTER_DIR/etcd-data" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "testbed=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls "" \
  --unsafe-no-fsync --quota-backend-bytes=$((4*1024*1024*1024)) --log-level warn
wait_for "etcd" 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

# --- kube-apiserver -------------------------------------------------------------------------------------
start_proc kube-apiserver "$bin/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
  --endpoint-reconciler-type=none \
  --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" --client-ca-file="$pki/ca.crt" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
  --service-cluster-ip-range=10.96.0.0/16 --authorization-mode=RBAC --allow-privileged=true \
  --enable-admission-plugins=NamespaceLifecycle,ServiceAccount,DefaultTolerationSeconds,ResourceQuota,LimitRanger \
  --kubelet-preferred-address-types=InternalIP --kubelet-certificate-authority="$pki/ca.crt" \
  --kubelet-client-certificate="$pki/admin.crt" --kubelet-client-key="$pki/admin.key" \
  --audit-policy-file="$here/manifests/audit-policy.yaml" --audit-log-path="$CLUSTER_DIR/logs/audit.log" \
  --audit-log-maxsize=200 --audit-log-maxbackup=1 \
  --profiling=false --event-ttl=1h --v=1
wait_for "kube-apiserver /readyz" 60 "$bin/kubectl" --kubeconfig "$kc" get --raw /readyz

# --- the rest of the control plane, kwok, KubeRay and the pod runner, in parallel --------------------------
# (--validate=false: client-side validation would first download the whole OpenAPI document.)
"$bin/kubectl" --kubeconfig "$kc" create --validate=false -f "$tools/kwok/crds/" -f "$tools/kuberay/crds/" >/dev/null
start_proc pod-runner "$root/.venv/bin/python" -m miles_testbed.pod_runner --kubeconfig "$kc" \
  --work-dir "$CLUSTER_DIR/runner" --hooks-image-regex "$HOOKS_IMAGE_REGEX" \
  --ray-temp-dir "$RAY_TMP" --node-netns "$node_netns" --node-ip "$node_ip" --max-ray-workers "$MAX_RAY_WORKERS" --ray-worker-cpus "$RAY_WORKER_CPUS" \
  --ray-worker-port-base "$RAY_WORKER_PORT_BASE" --ray-worker-venv-bin "$tools/ray-worker-venv/bin" --fake-miles "$fake_miles" \
  --storage-map "$STORAGE_MOUNT_PATH=$FSX_DIR" --host-path "$root"
start_proc kube-controller-manager "$bin/kube-controller-manager" \
  --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
  --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false \
  --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
  --use-service-account-credentials=false --concurrent-job-syncs=20 --kube-api-qps=200 --kube-api-burst=400 \
  --pvclaimbinder-sync-period=2s --profiling=false --v=1
start_proc kube-scheduler "$bin/kube-scheduler" \
  --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
  --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --leader-elect=false --profiling=false --v=1
# kwok's kubelet server (127.0.0.1:$KWOK_PORT) is the simulated nodes' kubelet endpoint.
sed "s|@HOOKS_IMAGE_REGEX@|$HOOKS_IMAGE_REGEX|g" "$here/manifests/kwok-stages.yaml" >"$CLUSTER_DIR/kwok-stages.yaml"
start_proc kwok "$bin/kwok" --kubeconfig="$kc" --config="$CLUSTER_DIR/kwok-stages.yaml" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --server-address="127.0.0.1:$KWOK_PORT" --node-ip=127.0.0.1 --node-port="$KWOK_PORT" \
  --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
  --node-lease-duration-seconds=40 --cidr=10.244.0.1/16

"$root/.venv/bin/python" -m miles_testbed.nodes | "$bin/kubectl" --kubeconfig "$kc" create --validate=false -f - >/dev/null
log "created CRDs and $((NODES + CPU_NODES)) nodes"
"$bin/kubectl" --kubeconfig "$kc" wait --for=condition=Established --timeout=30s crd/rayclusters.ray.io >/dev/null
# The operator polls each RayJob's job at its head Service's cluster name (<cluster>-head-svc.<ns>.svc.cluster.local),
# as it does from its pod on a cluster: it gets the pod's resolver, the cluster DNS on the real node (node.sh starts
# it, before any RayJob exists), in a private mount namespace; the host's /etc/resolv.conf is not touched.
printf 'nameserver %s\nsearch cluster.local\noptions ndots:5\n' "$node_ip" >"$CLUSTER_DIR/kuberay-resolv.conf"
start_proc kuberay-operator unshare --mount --propagation private sh -ec "
  mount --bind $CLUSTER_DIR/kuberay-resolv.conf /etc/resolv.conf
  exec env KUBECONFIG=$kc $bin/kuberay-operator --metrics-addr=127.0.0.1:$KUBERAY_METRICS_PORT \
    --health-probe-bind-address=127.0.0.1:$KUBERAY_HEALTH_PORT --enable-leader-election=false --log-stdout-encoder=console"

# --- readiness -------------------------------------------------------------------------------------------
wait_for "kube-controller-manager /healthz" 30 curl -fsSk "https://127.0.0.1:$KCM_PORT/healthz"
wait_for "kube-scheduler /healthz" 30 curl -fsSk "https://127.0.0.1:$SCHEDULER_PORT/healthz"
wait_for "KubeRay operator /readyz" 60 curl -fsS "http://127.0.0.1:$KUBERAY_HEALTH_PORT/readyz"
total=$((NODES + CPU_NODES))
wait_for "$total kwok nodes Ready" 60 nodes_ready "$total"
wait_for "pod runner" 30 test -f "$CLUSTER_DIR/runner/ready"
# the real node: the Ray heads run there
"$here/node.sh" up
"$here/storage.sh" default

t1=$(date +%s.%N)
secs=$(python3 -c "print(f'{$t1-$t0:.1f}')")
echo "$secs" >"$CLUSTER_DIR/last-up-seconds"
log "testbed up in ${secs}s: $NODES GPU node(s) ($GPU_INSTANCE_TYPE, $GPU_PER_NODE GPU, $EFA_PER_NODE EFA), $CPU_NODES CPU node(s)"
cat <<MSG
  export KUBECONFIG=$KUBECONFIG_TESTBED
  kubectl get nodes                       # .tools/bin/kubectl ($KUBERNETES_VERSION_EXPECTED)
  a release's Ray head: kubectl get pods -l ray.io/node-type=head -o wide   (on node $REAL_NODE_NAME; this
    machine routes to its address: RAY_ADDRESS=http://<pod IP>:8265 for the ray CLI, token authentication:
    RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$RAY_AUTH_TOKEN_FILE)
  logs: $CLUSTER_DIR/logs/<component>.log   hook pod logs: testbed/pod-logs.sh <pod> [-n ns]
  tear down: make cluster-down
MSG
