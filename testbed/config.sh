# Local testbed configuration, sourced by the testbed scripts. Every value can be overridden from the
# environment (e.g. `NODES=128 make cluster-up`). Loopback addresses only.
root=${root:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
tools="$root/.tools"
bin="$tools/bin"
CLUSTER_DIR=${CLUSTER_DIR:-$tools/cluster}
export KUBECONFIG_TESTBED="$CLUSTER_DIR/kubeconfig"

# Ports (127.0.0.1 only), below the ephemeral range (32768+) so outgoing connections never take them. TESTBED_PORT_OFFSET shifts every default (a second, private testbed: the e2e tests
# run their own with CLUSTER_DIR=.tools/cluster-e2e and an offset).
off=${TESTBED_PORT_OFFSET:-0}
[[ $off =~ ^[0-9]+$ ]] || { echo "TESTBED_PORT_OFFSET must be a number, got '$off'" >&2; exit 2; }
# Chosen away from the usual defaults so a colleague's local Ray or cluster on the
# same machine does not collide with the testbed.
ETCD_PORT=${ETCD_PORT:-$((22379 + off))}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-$((22380 + off))}
APISERVER_PORT=${APISERVER_PORT:-$((26443 + off))}
KCM_PORT=${KCM_PORT:-$((26257 + off))}
SCHEDULER_PORT=${SCHEDULER_PORT:-$((26259 + off))}
KWOK_PORT=${KWOK_PORT:-$((26247 + off))}
KUBERAY_METRICS_PORT=${KUBERAY_METRICS_PORT:-$((26280 + off))}
KUBERAY_HEALTH_PORT=${KUBERAY_HEALTH_PORT:-$((26282 + off))}
# Kueue (testbed/kueue.sh, only while a test needs admission): its webhook server and health endpoint.
KUEUE_WEBHOOK_PORT=${KUEUE_WEBHOOK_PORT:-$((26290 + off))}
KUEUE_HEALTH_PORT=${KUEUE_HEALTH_PORT:-$((26291 + off))}
# Each release's Ray head runs as a container on the real node, with token authentication; up.sh makes one token
# for the testbed (this file, 0600) and storage.sh puts it in each namespace it prepares as Secret
# testbed-ray-auth, which values-local-testbed.yaml names (without that value, preflight makes one per release).
RAY_AUTH_TOKEN_FILE="$CLUSTER_DIR/ray-auth-token"
TESTBED_RAY_AUTH_SECRET=testbed-ray-auth
# The pod runner starts one Ray worker node per simulated KubeRay worker pod (its --num-gpus/--resources, CPUs
# capped), at most MAX_RAY_WORKERS, each in the real node's network namespace with 100 ports from
# RAY_WORKER_PORT_BASE + 100 x slot there, from .tools/ray-worker-venv (the Ray and Python of the head's image).
MAX_RAY_WORKERS=${MAX_RAY_WORKERS:-8}
RAY_WORKER_CPUS=${RAY_WORKER_CPUS:-2}
RAY_WORKER_PORT_BASE=${RAY_WORKER_PORT_BASE:-12000}
# 1: run those workers, and the convert pod's miles-image container, with testbed/fake-miles at /root/miles
# (needs mount namespaces), so submitted jobs and conversions really run.
FAKE_MILES=${FAKE_MILES:-1}
# The workers' temp dirs (Ray's session dirs hold Unix sockets, path limit ~107 bytes: keep it short).
RAY_TMP=${RAY_TMP:-/tmp/miles-tb-ray-$(printf %s "$CLUSTER_DIR" | sha256sum | cut -c1-8)}

# Simulated nodes (kwok). NODES = number of GPU nodes.
NODES=${NODES:-2}
CPU_NODES=${CPU_NODES:-2}
GPU_INSTANCE_TYPE=${GPU_INSTANCE_TYPE:-ml.p5en.48xlarge}
GPU_NODE_CPU=${GPU_NODE_CPU:-192}
GPU_NODE_MEMORY=${GPU_NODE_MEMORY:-2048Gi}
GPU_PER_NODE=${GPU_PER_NODE:-8}
EFA_PER_NODE=${EFA_PER_NODE:-15}
CPU_INSTANCE_TYPE=${CPU_INSTANCE_TYPE:-ml.m7i.8xlarge}
GPU_INSTANCE_GROUP=${GPU_INSTANCE_GROUP:-gpu-p5en}
CPU_INSTANCE_GROUP=${CPU_INSTANCE_GROUP:-cpu-m7i}
export NODES CPU_NODES GPU_INSTANCE_TYPE GPU_NODE_CPU GPU_NODE_MEMORY GPU_PER_NODE EFA_PER_NODE CPU_INSTANCE_TYPE CPU_NODE_CPU CPU_NODE_MEMORY GPU_INSTANCE_GROUP CPU_INSTANCE_GROUP
CPU_NODE_CPU=${CPU_NODE_CPU:-32}
CPU_NODE_MEMORY=${CPU_NODE_MEMORY:-128Gi}

# The hooks image: every pod with a container (or init container) of it runs on the real node, where the pod runner
# journals it; kwok never fakes such a pod's status, so one scheduled on a simulated node stays Pending instead
# of passing untested.
HOOKS_IMAGE_REGEX=${HOOKS_IMAGE_REGEX:-miles-hooks}

KUBERNETES_VERSION_EXPECTED=v1.34.4

# Shared storage stand-in (FSx for Lustre is simulated): one local dir, exposed as a hostPath PV + an RWX PVC
# per namespace (testbed/storage.sh), which the real node's pods mount.
FSX_DIR=${FSX_DIR:-/tmp/miles-testbed-fsx}
FSX_CLAIM=${FSX_CLAIM:-fsx-claim}
# The chart's storage.mountPath (scenarios: /fsx): the pod runner binds $FSX_DIR there for the Ray worker nodes (as
# the worker pods mount the claim), and the tests for their seeding, so the run spec's paths hold for them too.
STORAGE_MOUNT_PATH=${STORAGE_MOUNT_PATH:-/fsx}
# the UID the chart's hook pods run as (hooks.podSecurityContext.runAsUser): storage.sh lets it write to $FSX_DIR
HOOKS_UID=10001

# The real node (testbed/node.sh): kubelet, kube-proxy and containerd in network namespace $node_netns, joined
# to the host by a veth pair on a private /30 derived from the port offset (so testbeds side by side differ);
# its pods get addresses from $node_pod_cidr on a bridge inside that namespace.
REAL_NODE_NAME=${REAL_NODE_NAME:-real-cpu-0}
node_slot=$(((off / 100) % 250))
node_netns="miles-tb-$node_slot"
node_veth_host="mtb$node_slot-h"
node_veth_node="mtb$node_slot-n"
node_host_ip="10.250.$node_slot.1"
node_ip="10.250.$node_slot.2"
node_pod_cidr="10.251.$node_slot.0/24"
# the CNI network's name: containerd files its per-sandbox results under the host's /var/lib/cni/results by it
cni_network="miles-testbed-$node_slot"
# the kube-dns Service's address (the kubelet's clusterDNS), in the API server's service range 10.96.0.0/16
CLUSTER_DNS_IP=10.96.0.10
# One of the CPU pool (the labels miles_testbed.nodes gives its CPU nodes), so the Ray head's placement rules hold there too.
REAL_NODE_LABELS=${REAL_NODE_LABELS:-node.kubernetes.io/instance-type=$CPU_INSTANCE_TYPE,beta.kubernetes.io/instance-type=$CPU_INSTANCE_TYPE,sagemaker.amazonaws.com/instance-group-name=$CPU_INSTANCE_GROUP,sagemaker.amazonaws.com/node-health-status=Schedulable,sagemaker.amazonaws.com/compute-type=hyperpod,testbed.miles.dev/pool=cpu,miles-testbed/real-node=true}
# Only pods that tolerate this taint land on it (values-local-testbed.yaml puts the Ray head, the hook Jobs and the
# helm-test pods there); the GPU pods stay on the kwok nodes.
REAL_NODE_TAINTS=${REAL_NODE_TAINTS:-miles-testbed/real-node=true:NoSchedule}
# What the node advertises of the chart's gpuPods.gpuResource (nvidia.com/gpu), an extended resource with no device
# behind it, so the convert pod, which asks for GPUs and the GPU pool's toleration, can run here as a container
# (values-local-testbed.yaml adds the node's label and taint to its pool). As many as a GPU node has: the moe
# scenario's converter asks for all 8. A GPU pod that does not tolerate the taint (every Ray worker) still never
# lands here.
REAL_NODE_GPUS=${REAL_NODE_GPUS:-$GPU_PER_NODE}
# The images (keys of .tools/images/manifest.json) the real node's containerd imports; empty = all. A testbed that
# runs only hook pods needs "pause miles-hooks" (the miles stand-in alone is ~3 GB and most of the import time).
NODE_IMAGES=${NODE_IMAGES:-}
