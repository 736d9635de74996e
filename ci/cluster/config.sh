# Local testbed configuration, sourced by the ci/cluster scripts. Every value can be overridden from the
# environment (e.g. `NODES=128 make cluster-up`). Loopback addresses only.
root=${root:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
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
RAY_GCS_PORT=${RAY_GCS_PORT:-$((26379 + off))}
RAY_DASHBOARD_PORT=${RAY_DASHBOARD_PORT:-$((28265 + off))}
RAY_CLIENT_PORT=${RAY_CLIENT_PORT:-$((26001 + off))}
RAY_NODE_MANAGER_PORT=${RAY_NODE_MANAGER_PORT:-$((26002 + off))}
RAY_OBJECT_MANAGER_PORT=${RAY_OBJECT_MANAGER_PORT:-$((26003 + off))}
RAY_METRICS_PORT=${RAY_METRICS_PORT:-$((26004 + off))}
# Kueue (ci/cluster/kueue.sh, only while a test needs admission): its webhook server and health endpoint.
KUEUE_WEBHOOK_PORT=${KUEUE_WEBHOOK_PORT:-$((26290 + off))}
KUEUE_HEALTH_PORT=${KUEUE_HEALTH_PORT:-$((26291 + off))}
RAY_AGENT_HTTP_PORT=${RAY_AGENT_HTTP_PORT:-$((26005 + off))}
RAY_AGENT_GRPC_PORT=${RAY_AGENT_GRPC_PORT:-$((26006 + off))}
RAY_RUNTIME_ENV_AGENT_PORT=${RAY_RUNTIME_ENV_AGENT_PORT:-$((26007 + off))}
RAY_MIN_WORKER_PORT=${RAY_MIN_WORKER_PORT:-$((26100 + off))}
RAY_MAX_WORKER_PORT=${RAY_MAX_WORKER_PORT:-$((26199 + off))}
# The local Ray head runs with token authentication (RAY_AUTH_MODE=token), its token in this file (0600, made by
# up.sh); storage.sh puts it in each namespace as Secret testbed-ray-auth, which values-local-testbed.yaml names.
RAY_AUTH_TOKEN_FILE="$CLUSTER_DIR/ray-auth-token"
TESTBED_RAY_AUTH_SECRET=testbed-ray-auth
# The local Ray head advertises 0 CPUs/GPUs like the chart's head; the pod runner starts one local Ray worker
# node per simulated KubeRay worker pod (its --num-gpus/--resources, CPUs capped), at most MAX_RAY_WORKERS,
# each with 100 ports from RAY_WORKER_PORT_BASE + 100 x slot.
MAX_RAY_WORKERS=${MAX_RAY_WORKERS:-8}
RAY_WORKER_CPUS=${RAY_WORKER_CPUS:-2}
RAY_WORKER_PORT_BASE=${RAY_WORKER_PORT_BASE:-$((12000 + off))}
# 1: run the Ray head with ci/cluster/fake-miles at /root/miles (needs mount namespaces), so jobs really run.
FAKE_MILES=${FAKE_MILES:-1}
# Ray's session dir holds Unix sockets (path limit ~107 bytes): keep it short.
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

# Pods whose containers (or init containers) use an image matching this regex are executed by the pod
# runner; kwok leaves their status alone. Everything else on a kwok node is only simulated.
RUNNER_IMAGE_REGEX=${RUNNER_IMAGE_REGEX:-miles-hooks}

KUBERNETES_VERSION_EXPECTED=v1.34.4

# Shared storage stand-in (FSx for Lustre is simulated): one local dir, exposed as a hostPath PV + an RWX PVC
# per namespace (ci/cluster/storage.sh). values/values-local-testbed.yaml mounts it at the same path, so the
# run spec's paths are valid both in hook processes and in the local Ray head.
FSX_DIR=${FSX_DIR:-/tmp/miles-testbed-fsx}
FSX_CLAIM=${FSX_CLAIM:-fsx-claim}
# The chart's storage.mountPath (scenarios: /fsx). The pod runner maps it to $FSX_DIR in every hook process.
STORAGE_MOUNT_PATH=${STORAGE_MOUNT_PATH:-/fsx}

# The real node (ci/cluster/node.sh): kubelet, kube-proxy and containerd in network namespace $node_netns, joined
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
REAL_NODE_LABELS=${REAL_NODE_LABELS:-node.kubernetes.io/instance-type=$CPU_INSTANCE_TYPE,miles-testbed/real-node=true}
# Until the chart's pods run there (the real-node work in progress), only pods that tolerate this taint land on it.
REAL_NODE_TAINTS=${REAL_NODE_TAINTS:-miles-testbed/real-node=true:NoSchedule}
