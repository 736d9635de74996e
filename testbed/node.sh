#!/usr/bin/env bash
# A real node for the testbed: kubelet + kube-proxy (the pinned Kubernetes), containerd + runc + the CNI bridge
# (Debian) and the cluster's DNS (CoreDNS, the pinned module), in a network namespace of its own, joined to a running testbed as node $REAL_NODE_NAME. Pods on it
# run as real containers from the images `make tools` built (imported from .tools/images/manifest.json).
#   testbed/node.sh up     (after testbed/up.sh)
#   testbed/node.sh down
# Traffic stays on this machine: the node lives in netns $node_netns, joined to the host by a veth pair on a
# private /30 ($node_host_ip <-> $node_ip); pods get addresses on a bridge inside that namespace. The API server
# keeps listening on 127.0.0.1 only: socat forwards $node_host_ip:6443 (reachable from the namespace alone) to it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/config.sh"
source "$here/lib.sh"

node_dir="$CLUSTER_DIR/node"
pki="$CLUSTER_DIR/pki"
kc="$KUBECONFIG_TESTBED"
manifest="$tools/images/manifest.json"
ctr=(ctr --address "$node_dir/containerd/containerd.sock" --namespace k8s.io)
# nsenter, not `ip netns exec`: that also remounts /sys, hiding the cgroup mounts the kubelet needs
in_netns=(nsenter "--net=/var/run/netns/$node_netns")

# A testbed killed before its `down` (a stopped CI job, a closed session) leaves its namespace, veth and route behind,
# and `ip netns add` would fail on them. Nothing running in the namespace means nothing of a live testbed is there.
reclaim_leftover_netns() {
  [[ -e /var/run/netns/$node_netns ]] || return 0
  local pids
  pids=$(ip netns pids "$node_netns" 2>/dev/null | tr '\n' ' ')
  [[ -z $pids ]] || die "network namespace $node_netns is in use (pids $pids): another testbed with port offset $off is up; take it down (testbed/down.sh with its CLUSTER_DIR) or use another TESTBED_PORT_OFFSET"
  log "removing network namespace $node_netns, veth $node_veth_host and route $node_pod_cidr left by a testbed that was killed"
  ip route del "$node_pod_cidr" 2>/dev/null || true
  ip link del "$node_veth_host" 2>/dev/null || true
  ip netns del "$node_netns"
}

node_up() {
  need_bins kubelet kube-proxy kubectl coredns
  [[ -f $manifest ]] || die "$manifest missing: run \`ci/install-tools.sh images\` (or make tools)"
  command -v socat >/dev/null || die "socat not found: \`apt-get install socat\` (make tools installs it)"
  "$bin/kubectl" --kubeconfig "$kc" get --raw /readyz >/dev/null 2>&1 || die "the testbed is not up: run testbed/up.sh first"
  mkdir -p "$node_dir"/{containerd,cni,cni-ipam,kubelet,pki,pod-logs} "$CLUSTER_DIR"/{run,logs}

  # --- network namespace, veth pair, routes --------------------------------------------------------------
  reclaim_leftover_netns
  ip netns add "$node_netns"
  ip link add "$node_veth_host" type veth peer name "$node_veth_node"
  ip link set "$node_veth_node" netns "$node_netns"
  ip addr add "$node_host_ip/30" dev "$node_veth_host"
  ip link set "$node_veth_host" up
  "${in_netns[@]}" ip link set lo up
  "${in_netns[@]}" ip addr add "$node_ip/30" dev "$node_veth_node"
  "${in_netns[@]}" ip link set "$node_veth_node" up
  "${in_netns[@]}" ip route add default via "$node_host_ip"
  "${in_netns[@]}" sysctl -qw net.ipv4.ip_forward=1
  # the host reaches pod addresses (the Ray head's, later) through the node
  ip route add "$node_pod_cidr" via "$node_ip"

  # --- API server address the node and its pods can reach ---------------------------------------------------
  start_proc apiserver-forward socat "TCP-LISTEN:6443,bind=$node_host_ip,fork,reuseaddr" "TCP:127.0.0.1:$APISERVER_PORT"
  node_certs
  sed "s|server: https://127.0.0.1:$APISERVER_PORT|server: https://$node_host_ip:6443|" "$kc" >"$node_dir/kubeconfig"
  chmod 600 "$node_dir/kubeconfig"
  # in-cluster clients use the `kubernetes` Service (10.96.0.1): kube-proxy sends it to the forwarder
  "$bin/kubectl" --kubeconfig "$kc" apply -f - >/dev/null <<EOF
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes
  namespace: default
  labels: {kubernetes.io/service-name: kubernetes, endpointslice.kubernetes.io/managed-by: miles-testbed}
addressType: IPv4
endpoints: [{addresses: ["$node_host_ip"]}]
ports: [{name: https, port: 6443, protocol: TCP}]
EOF

  # --- cluster DNS: CoreDNS on the node's address, behind the kube-dns Service the kubelet hands pods ----------
  # (it answers for cluster.local from the API server and forwards nothing: no name outside resolves)
  mkdir -p "$node_dir/coredns"
  cat >"$node_dir/coredns/Corefile" <<EOF
.:53 {
    bind $node_ip
    errors
    health $node_ip:8080
    ready $node_ip:8181
    cache 5
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $node_dir/kubeconfig
        pods insecure
    }
}
EOF
  start_proc coredns "${in_netns[@]}" "$bin/coredns" -conf "$node_dir/coredns/Corefile"
  wait_for "CoreDNS ready" 60 "${in_netns[@]}" curl -fsS "http://$node_ip:8181/ready"
  "$bin/kubectl" --kubeconfig "$kc" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  clusterIP: $CLUSTER_DNS_IP
  ports:
    - {name: dns, port: 53, protocol: UDP}
    - {name: dns-tcp, port: 53, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: miles-testbed}
addressType: IPv4
endpoints: [{addresses: ["$node_ip"]}]
ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
EOF

  # --- containerd + CNI ------------------------------------------------------------------------------------
  cat >"$node_dir/containerd/config.toml" <<EOF
version = 2
root = "$node_dir/containerd/root"
state = "$node_dir/containerd/state"
[grpc]
  address = "$node_dir/containerd/containerd.sock"
[ttrpc]
  address = "$node_dir/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pause"]["image"])' "$manifest")"
  # these machines lack CAP_SYS_RESOURCE: runc must not raise a container's oom_score_adj
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  # runc keeps each container's state under /run/containerd/runc/<namespace> unless told otherwise: every
  # testbed's containerd uses namespace k8s.io, so each gets a runc root of its own
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      Root = "$node_dir/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$node_dir/cni"
EOF
  cat >"$node_dir/cni/10-testbed.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "$cni_network", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$node_dir/cni-ipam", "ranges": [[{"subnet": "$node_pod_cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
  start_proc containerd "${in_netns[@]}" containerd --config "$node_dir/containerd/config.toml"
  wait_for "containerd" 30 "${ctr[@]}" version
  local archive
  for archive in $(python3 -c 'import json,sys; keep=sys.argv[2].split(); print(" ".join(e["archive"] for k, e in json.load(open(sys.argv[1])).items() if "archive" in e and (not keep or k in keep)))' "$manifest" "$NODE_IMAGES"); do
    "${ctr[@]}" images import "$archive" >/dev/null
  done
  log "imported $(("$("${ctr[@]}" images ls -q | wc -l)")) image references into the node's containerd"

  # --- kubelet and kube-proxy ------------------------------------------------------------------------------
  cat >"$node_dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: $node_ip
healthzPort: 10248
# A kubelet deletes every directory under its pod-log directory that belongs to no pod of its own: on the host's
# default (/var/log/pods) a second testbed's kubelet would delete this one's container logs within a minute.
podLogsDir: $node_dir/pod-logs
tlsCertFile: $node_dir/pki/kubelet.crt
tlsPrivateKeyFile: $node_dir/pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$node_dir/containerd/containerd.sock
cgroupDriver: cgroupfs
# this machine: cgroup v1, swap, no CAP_SYS_RESOURCE; no QoS cgroup tree or allocatable enforcement
failCgroupV1: false
failSwapOn: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
# Without pod cgroups (cgroupsPerQOS: false) the kubelet's in-place resize path dereferences a pod cgroup
# config its no-op pod container manager never has: v1.34.4 panicked there (kuberuntime_manager.go:839,
# doPodResizeAction) on a pod it judged resized, and the node was gone for the rest of the e2e run.
featureGates:
  InPlacePodVerticalScaling: false
clusterDNS: [$CLUSTER_DNS_IP]
clusterDomain: cluster.local
registerNode: true
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard: {}
EOF
  start_proc kubelet "${in_netns[@]}" "$bin/kubelet" --config "$node_dir/kubelet/config.yaml" \
    --kubeconfig "$node_dir/kubeconfig" --root-dir "$node_dir/kubelet/root" --hostname-override "$REAL_NODE_NAME" \
    --node-ip "$node_ip" --node-labels "$REAL_NODE_LABELS" --register-with-taints "$REAL_NODE_TAINTS" --v=1
  start_proc kube-proxy "${in_netns[@]}" "$bin/kube-proxy" --kubeconfig "$node_dir/kubeconfig" \
    --hostname-override "$REAL_NODE_NAME" --proxy-mode iptables --cluster-cidr "$node_pod_cidr" \
    --bind-address "$node_ip" --healthz-bind-address "$node_ip:10256" --metrics-bind-address "$node_ip:10249" \
    --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 --v=1
  # (conntrack sysctls are left as they are: this machine refuses writes to them)
  wait_for "real node $REAL_NODE_NAME Ready" 120 node_ready "$REAL_NODE_NAME"
  # an extended resource is advertised on the node's status; the kubelet keeps it in capacity and allocatable and
  # admits a pod asking for it (no device plugin: nothing is allocated)
  "$bin/kubectl" --kubeconfig "$kc" patch node "$REAL_NODE_NAME" --subresource=status --type=json \
    -p "[{\"op\": \"add\", \"path\": \"/status/capacity/nvidia.com~1gpu\", \"value\": \"$REAL_NODE_GPUS\"}]" >/dev/null
  wait_for "$REAL_NODE_NAME to advertise $REAL_NODE_GPUS nvidia.com/gpu" 60 node_allocatable_gpus "$REAL_NODE_NAME"
  wait_for "kube-proxy on $REAL_NODE_NAME" 60 "${in_netns[@]}" curl -fsS "http://$node_ip:10256/healthz"
  # what a pod's resolver does: a Service's name, asked of the kube-dns Service through kube-proxy's rules
  wait_for "cluster DNS through the kube-dns Service" 60 \
    dns_answers "kubernetes.default.svc.cluster.local"
}

dns_answers() {
  [[ -n $("${in_netns[@]}" dig +short +time=2 +tries=1 "@$CLUSTER_DNS_IP" "$1" 2>/dev/null) ]]
}

node_allocatable_gpus() {
  [[ $("$bin/kubectl" --kubeconfig "$kc" get node "$1" -o 'jsonpath={.status.allocatable.nvidia\.com/gpu}' 2>/dev/null) == "$REAL_NODE_GPUS" ]]
}

node_ready() {
  [[ $("$bin/kubectl" --kubeconfig "$kc" get node "$1" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

# the kubelet's serving certificate (the API server checks it against the testbed CA for logs and exec)
node_certs() {
  [[ -s $node_dir/pki/kubelet.crt ]] && return
  openssl ecparam -name prime256v1 -genkey -noout -out "$node_dir/pki/kubelet.key" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:%s,DNS:%s\n' \
    "$node_ip" "$REAL_NODE_NAME" >"$node_dir/pki/kubelet.ext"
  openssl req -new -key "$node_dir/pki/kubelet.key" -subj "/CN=system:node:$REAL_NODE_NAME" -out "$node_dir/pki/kubelet.csr" 2>/dev/null
  openssl x509 -req -in "$node_dir/pki/kubelet.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 3650 \
    -sha256 -extfile "$node_dir/pki/kubelet.ext" -out "$node_dir/pki/kubelet.crt" 2>/dev/null
  chmod 600 "$node_dir/pki/kubelet.key"
}

node_down() {
  local name
  for name in kube-proxy kubelet; do stop_proc "$name"; done
  local sandboxes=()
  if [[ -S $node_dir/containerd/containerd.sock ]]; then
    local task
    for task in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true; done
    # the sandboxes' ids name their entries in containerd's CNI result cache (below)
    mapfile -t sandboxes < <("${ctr[@]}" containers ls -q 2>/dev/null)
  fi
  for name in containerd coredns apiserver-forward; do stop_proc "$name"; done
  # the runtime shims outlive containerd by design: stop those of this node's containerd
  pkill -KILL -f "containerd-shim-runc-v2 .*-address $node_dir/containerd/containerd.sock" 2>/dev/null || true
  # mounts the kubelet and containerd leave (volumes, snapshots, sandbox namespaces), deepest first
  awk -v d="$node_dir" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l
  # containerd names each pod sandbox's network namespace cni-<uuid>; killed, it leaves them behind. Ours are those
  # whose eth0 has an address of this node's pod range; one holding nothing but lo belongs to no running pod of
  # any testbed (interface indexes cannot tell: each namespace counts its own).
  local ns
  for ns in $(ip netns list | awk '$1 ~ /^cni-/ {print $1}'); do
    if ip -n "$ns" -o -4 addr show 2>/dev/null | grep -q " inet ${node_pod_cidr%.0/24}\." ||
      [[ $(ip -n "$ns" -o link show 2>/dev/null | grep -vc ': lo:') == 0 ]]; then
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
  ip route del "$node_pod_cidr" 2>/dev/null || true
  ip link del "$node_veth_host" 2>/dev/null || true
  ip netns del "$node_netns" 2>/dev/null || true
  "$bin/kubectl" --kubeconfig "$kc" delete node "$REAL_NODE_NAME" --ignore-not-found >/dev/null 2>&1 || true
  # what is left on the host's own paths: the kubelet's links in /var/log/containers (that directory is fixed in the
  # kubelet; each link is named by its container's id and points into this node's pod-log directory, and a kubelet
  # removes only links whose target is gone) and containerd's CNI result cache (/var/lib/cni/results, one file per
  # sandbox and network: ours, and the loopback network's for this node's sandboxes)
  find /var/log/containers -maxdepth 1 -type l -lname "$node_dir/pod-logs/*" -delete 2>/dev/null || true
  rm -f /var/lib/cni/results/"$cni_network"-* 2>/dev/null || true
  local id
  for id in "${sandboxes[@]}"; do rm -f /var/lib/cni/results/cni-loopback-"$id"-lo; done
  rm -rf "$node_dir/containerd/root" "$node_dir/containerd/state" "$node_dir/containerd/runc" "$node_dir/kubelet/root" \
    "$node_dir/pod-logs" "$node_dir/cni-ipam"
}

case ${1:-} in
  up) node_up ;;
  down) node_down ;;
  *) echo "usage: testbed/node.sh up|down" >&2; exit 2 ;;
esac
