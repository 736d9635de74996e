#!/usr/bin/env python3
"""Print the testbed's simulated (kwok) nodes as a Kubernetes List (JSON) on stdout.

GPU nodes are shaped like SageMaker HyperPod / EKS p5en.48xlarge nodes (192 CPU, 2 TiB memory, 8 GPUs,
15 allocatable EFA interfaces) with the labels and taint such nodes carry; CPU nodes form one pool for the
Ray head and the hook Jobs. Shapes and counts come from the environment (see ci/cluster/config.sh):
NODES (GPU nodes), CPU_NODES, GPU_INSTANCE_TYPE, GPU_NODE_CPU, GPU_NODE_MEMORY, GPU_PER_NODE,
EFA_PER_NODE, CPU_INSTANCE_TYPE, CPU_NODE_CPU, CPU_NODE_MEMORY.

Usage: nodes.py [--gpu-nodes N] [--cpu-nodes N] [--start-index I]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def env(name: str, default: str) -> str:
    return os.environ.get(name, "") or default


def env_int(name: str, default: int, minimum: int = 0) -> int:
    raw = env(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        sys.exit(f"nodes.py: {name} must be an integer >= {minimum}, got {raw!r}")
    if value < minimum:
        sys.exit(f"nodes.py: {name} must be an integer >= {minimum}, got {value}")
    return value


def env_quantity(name: str, default: str) -> str:
    value = env(name, default)
    if not QUANTITY.match(value):
        sys.exit(f"nodes.py: {name} must be a Kubernetes quantity (e.g. 192, 2048Gi), got {value!r}")
    return value


def node(name: str, labels: dict[str, str], taints: list[dict[str, str]], resources: dict[str, str]) -> dict:
    base = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "topology.kubernetes.io/region": "us-west-2",
        "topology.kubernetes.io/zone": "us-west-2a",
        "type": "kwok",
    }
    base.update(labels)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": base,
            # kwok manages exactly the nodes carrying this annotation (see up.sh).
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"taints": taints},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu-nodes", type=int, default=None, help="GPU nodes (default: $NODES or 2)")
    ap.add_argument("--cpu-nodes", type=int, default=None, help="CPU nodes (default: $CPU_NODES or 2)")
    ap.add_argument("--start-index", type=int, default=0, help="first GPU node index (to add nodes later)")
    args = ap.parse_args(argv)
    gpu_nodes = args.gpu_nodes if args.gpu_nodes is not None else env_int("NODES", 2)
    cpu_nodes = args.cpu_nodes if args.cpu_nodes is not None else env_int("CPU_NODES", 2)
    if gpu_nodes < 0 or cpu_nodes < 0:
        sys.exit("nodes.py: node counts must be >= 0")
    if gpu_nodes > 5000:
        sys.exit(f"nodes.py: NODES={gpu_nodes} is more than this testbed is meant for (max 5000)")

    gpu_type = env("GPU_INSTANCE_TYPE", "ml.p5en.48xlarge")
    gpus = env_int("GPU_PER_NODE", 8)
    efa = env_int("EFA_PER_NODE", 15)
    gpu_res = {
        "cpu": env_quantity("GPU_NODE_CPU", "192"),
        "memory": env_quantity("GPU_NODE_MEMORY", "2048Gi"),
        "ephemeral-storage": "28Ti",
        "pods": "250",
        "nvidia.com/gpu": str(gpus),
        "vpc.amazonaws.com/efa": str(efa),
        "hugepages-2Mi": "0",
    }
    cpu_type = env("CPU_INSTANCE_TYPE", "ml.m7i.8xlarge")
    cpu_res = {
        "cpu": env_quantity("CPU_NODE_CPU", "32"),
        "memory": env_quantity("CPU_NODE_MEMORY", "128Gi"),
        "ephemeral-storage": "500Gi",
        "pods": "110",
    }
    items = []
    for i in range(cpu_nodes):
        items.append(
            node(
                f"cpu-{i:03d}",
                {
                    "node.kubernetes.io/instance-type": cpu_type,
                    "beta.kubernetes.io/instance-type": cpu_type,
                    "sagemaker.amazonaws.com/instance-group-name": env("CPU_INSTANCE_GROUP", "cpu-m7i"),
                    "sagemaker.amazonaws.com/node-health-status": "Schedulable",
                    "sagemaker.amazonaws.com/compute-type": "hyperpod",
                    "testbed.miles.dev/pool": "cpu",
                },
                [],
                cpu_res,
            )
        )
    for i in range(args.start_index, args.start_index + gpu_nodes):
        items.append(
            node(
                f"gpu-{i:04d}",
                {
                    "node.kubernetes.io/instance-type": gpu_type,
                    "beta.kubernetes.io/instance-type": gpu_type,
                    "sagemaker.amazonaws.com/instance-group-name": env("GPU_INSTANCE_GROUP", "gpu-p5en"),
                    "sagemaker.amazonaws.com/node-health-status": "Schedulable",
                    "sagemaker.amazonaws.com/deep-health-check-status": "Passed",
                    "sagemaker.amazonaws.com/compute-type": "hyperpod",
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": "NVIDIA-H200",
                    "nvidia.com/gpu.count": str(gpus),
                    "vpc.amazonaws.com/efa.present": "true",
                    "testbed.miles.dev/pool": "gpu",
                },
                [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                gpu_res,
            )
        )
    json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
