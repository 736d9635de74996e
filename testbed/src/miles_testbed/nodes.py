"""The testbed's simulated (kwok) nodes, as a Kubernetes List (JSON) on stdout.

GPU nodes are shaped like SageMaker HyperPod / EKS p5en.48xlarge nodes (192 CPU, 2 TiB memory, 8 GPUs,
15 allocatable EFA interfaces) with the labels and taint such nodes carry; CPU nodes form one pool for the
Ray head and the hook Jobs. Shapes and counts come from the environment (testbed/config.sh sets them):
NODES (GPU nodes), CPU_NODES, GPU_INSTANCE_TYPE, GPU_INSTANCE_GROUP, GPU_NODE_CPU, GPU_NODE_MEMORY,
GPU_PER_NODE, EFA_PER_NODE, CPU_INSTANCE_TYPE, CPU_INSTANCE_GROUP, CPU_NODE_CPU, CPU_NODE_MEMORY.

Usage: python -m miles_testbed.nodes [--gpu-nodes N] [--cpu-nodes N] [--start-index I]
Exit: 0, or 2 naming the setting that is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
MAX_GPU_NODES = 5000


class SettingError(Exception):
    """A node setting the testbed cannot use; the message names it, what it expects and what it got."""


class Settings:
    """The node settings of an environment, each checked when read (empty counts as unset)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def text(self, name: str, default: str) -> str:
        return self.env.get(name, "") or default

    def count(self, name: str, default: int) -> int:
        raw = self.text(name, str(default))
        if not raw.isdigit():
            raise SettingError(f"{name}: expected an integer >= 0, got {raw!r}")
        return int(raw)

    def quantity(self, name: str, default: str) -> str:
        value = self.text(name, default)
        if not QUANTITY.match(value):
            raise SettingError(f"{name}: expected a Kubernetes quantity (e.g. 192, 2048Gi), got {value!r}")
        return value


def node(
    name: str, labels: dict[str, str], taints: list[dict[str, str]], resources: dict[str, str]
) -> dict[str, Any]:
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


def node_list(
    env: Mapping[str, str], gpu_nodes: int | None = None, cpu_nodes: int | None = None, start_index: int = 0
) -> dict[str, Any]:
    """The List of nodes; counts not given come from NODES and CPU_NODES (default 2 each)."""
    s = Settings(env)
    gpu_count = s.count("NODES", 2) if gpu_nodes is None else gpu_nodes
    cpu_count = s.count("CPU_NODES", 2) if cpu_nodes is None else cpu_nodes
    if gpu_count < 0 or cpu_count < 0 or start_index < 0:
        raise SettingError(
            f"node counts and the start index: expected >= 0, got {gpu_count} GPU, {cpu_count} CPU, "
            f"start {start_index}"
        )
    if gpu_count > MAX_GPU_NODES:
        raise SettingError(f"NODES: expected at most {MAX_GPU_NODES} (this testbed's reach), got {gpu_count}")

    gpu_type = s.text("GPU_INSTANCE_TYPE", "ml.p5en.48xlarge")
    gpus = s.count("GPU_PER_NODE", 8)
    gpu_resources = {
        "cpu": s.quantity("GPU_NODE_CPU", "192"),
        "memory": s.quantity("GPU_NODE_MEMORY", "2048Gi"),
        "ephemeral-storage": "28Ti",
        "pods": "250",
        "nvidia.com/gpu": str(gpus),
        "vpc.amazonaws.com/efa": str(s.count("EFA_PER_NODE", 15)),
        "hugepages-2Mi": "0",
    }
    cpu_type = s.text("CPU_INSTANCE_TYPE", "ml.m7i.8xlarge")
    cpu_resources = {
        "cpu": s.quantity("CPU_NODE_CPU", "32"),
        "memory": s.quantity("CPU_NODE_MEMORY", "128Gi"),
        "ephemeral-storage": "500Gi",
        "pods": "110",
    }
    cpu_labels = {
        "node.kubernetes.io/instance-type": cpu_type,
        "beta.kubernetes.io/instance-type": cpu_type,
        "sagemaker.amazonaws.com/instance-group-name": s.text("CPU_INSTANCE_GROUP", "cpu-m7i"),
        "sagemaker.amazonaws.com/node-health-status": "Schedulable",
        "sagemaker.amazonaws.com/compute-type": "hyperpod",
        "testbed.miles.dev/pool": "cpu",
    }
    gpu_labels = {
        "node.kubernetes.io/instance-type": gpu_type,
        "beta.kubernetes.io/instance-type": gpu_type,
        "sagemaker.amazonaws.com/instance-group-name": s.text("GPU_INSTANCE_GROUP", "gpu-p5en"),
        "sagemaker.amazonaws.com/node-health-status": "Schedulable",
        "sagemaker.amazonaws.com/deep-health-check-status": "Passed",
        "sagemaker.amazonaws.com/compute-type": "hyperpod",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H200",
        "nvidia.com/gpu.count": str(gpus),
        "vpc.amazonaws.com/efa.present": "true",
        "testbed.miles.dev/pool": "gpu",
    }
    gpu_taints = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    items = [node(f"cpu-{i:03d}", cpu_labels, [], cpu_resources) for i in range(cpu_count)]
    items += [
        node(f"gpu-{i:04d}", gpu_labels, gpu_taints, gpu_resources)
        for i in range(start_index, start_index + gpu_count)
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m miles_testbed.nodes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--gpu-nodes", type=int, default=None, help="GPU nodes (default: $NODES or 2)")
    ap.add_argument("--cpu-nodes", type=int, default=None, help="CPU nodes (default: $CPU_NODES or 2)")
    ap.add_argument("--start-index", type=int, default=0, help="first GPU node index (to add nodes later)")
    args = ap.parse_args(argv)
    try:
        nodes = node_list(os.environ, args.gpu_nodes, args.cpu_nodes, args.start_index)
    except SettingError as e:
        print(f"nodes: {e}", file=sys.stderr)
        return 2
    json.dump(nodes, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
