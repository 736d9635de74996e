"""The GPU workers fit now: the scheduler itself places a stand-in of each, before anything long runs.

Counting installed GPUs says nothing about free ones: with a node held by another release, a run used to
install, then sit with a worker Pending (`Insufficient nvidia.com/gpu`) until its deadline, days later.
Subtracting other pods' requests would need a cluster-wide read of every pod (their specs, env included),
and would still miss what only the scheduler weighs (affinity, spread, other schedulers' plugins). So
preflight asks the scheduler: one pod per worker the release will add, with the worker template's node
rules and its containers' requests and limits, and nothing that runs (`sleep`, as nobody). All placed:
the run fits now. One the scheduler calls Unschedulable: the run does not fit now, in the scheduler's own
words. The stand-ins carry no priority class, so they preempt nobody, and are deleted in every case.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from miles_hooks.core import kube, log, probe_pods
from miles_hooks.core.quantity import parse_count
from miles_hooks.core.runspec_types import RawSpec

LOG = log.get("preflight")

COMPONENT = "hook-capacity-check"
FINAL = ("scheduled", "unschedulable")
# what a stand-in keeps of the worker's pod spec: where it may go, and how the scheduler places it
_PLACEMENT = ("nodeSelector", "affinity", "tolerations", "topologySpreadConstraints", "schedulerName")
_TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Demand:
    """One worker group of the release that asks for GPUs."""

    subject: str  # where in the release's objects, as a user's message names it
    node_type: str  # KubeRay's ray.io/node-type of its pods: "head" (a GPU head) or "worker"
    replicas: int
    pod_spec: dict[str, Any]


@dataclass(frozen=True)
class Verdict:
    demands: list[Demand]
    held: int  # GPU pods of the release already placed (an upgrade): their nodes are theirs
    placed: dict[str, str]  # stand-in -> node
    unschedulable: dict[str, str]  # stand-in -> the scheduler's message
    undecided: list[str]  # stand-ins the scheduler had not judged by the deadline

    @property
    def wanted(self) -> int:
        return sum(d.replicas for d in self.demands)


def _requests_gpu(pod_spec: dict[str, Any], gpu_resource: str) -> bool:
    for container in pod_spec.get("containers") or []:
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            if parse_count((resources.get(section) or {}).get(gpu_resource)) > 0:
                return True
    return False


def gpu_demands(objects: list[dict[str, Any]], gpu_resource: str) -> list[Demand]:
    """The release's Ray pods (a RayCluster's, a RayJob's cluster's: workers, and a head with GPUs) that ask
    for GPUs."""
    out = []
    for obj in objects:
        spec = obj.get("spec") or {}
        name = (obj.get("metadata") or {}).get("name", "?")
        if obj.get("kind") == "RayCluster":
            cluster, where = spec, "spec."
        elif obj.get("kind") == "RayJob":
            cluster, where = spec.get("rayClusterSpec") or {}, "spec.rayClusterSpec."
        else:
            continue
        head = ((cluster.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}
        if _requests_gpu(head, gpu_resource):
            out.append(Demand(f"{obj['kind']}/{name} {where}headGroupSpec", "head", 1, head))
        for i, group in enumerate(cluster.get("workerGroupSpecs") or []):
            pod_spec = (group.get("template") or {}).get("spec") or {}
            replicas = int(group.get("replicas", group.get("minReplicas", 1)) or 0)
            if replicas > 0 and _requests_gpu(pod_spec, gpu_resource):
                subject = f"{obj['kind']}/{name} {where}workerGroupSpecs[{i}]"
                out.append(Demand(subject, "worker", replicas, pod_spec))
    return out


def standin_pod(raw: RawSpec, demand: Demand, index: int) -> dict[str, Any]:
    release = raw["release"]
    spec: dict[str, Any] = {k: copy.deepcopy(demand.pod_spec[k]) for k in _PLACEMENT if k in demand.pod_spec}
    containers = []
    for i, container in enumerate(demand.pod_spec.get("containers") or []):
        containers.append(
            {
                "name": f"c{i}",
                "image": raw["images"]["miles"],
                "imagePullPolicy": raw["checks"]["image"]["pullPolicy"],
                "command": ["sleep", "600"],
                "resources": copy.deepcopy(container.get("resources") or {}),
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        )
    spec.update(
        {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 0,
            "imagePullSecrets": [{"name": n} for n in raw["checks"]["image"]["pullSecrets"]],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65534,
                "runAsGroup": 65534,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": containers,
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{release['fullname']}-capacity-{index}-",
            "namespace": release["namespace"],
            "labels": {
                "app.kubernetes.io/instance": release["name"],
                "app.kubernetes.io/managed-by": "miles-hooks",
                "app.kubernetes.io/component": COMPONENT,
            },
        },
        "spec": spec,
    }


def judge(pod: dict[str, Any]) -> tuple[str, str]:
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        return "scheduled", str(node)
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return "unschedulable", str(
                condition.get("message") or condition.get("reason") or "not scheduled"
            )
    return "pending", "not judged by the scheduler yet"


def held_pods(api: kube.Api, raw: RawSpec) -> dict[str, int]:
    """Ray pods of the release a node already holds, by node type: an upgrade's, which keep their GPUs."""
    selector = f"app.kubernetes.io/instance={raw['release']['name']},ray.io/node-type"
    with kube.api_call("listing the release's Ray pods"):
        pods = api.core().list_namespaced_pod(raw["release"]["namespace"], label_selector=selector).items
    held: dict[str, int] = {}
    for pod in pods:
        if pod.spec.node_name and pod.status.phase not in _TERMINAL:
            node_type = str((pod.metadata.labels or {}).get("ray.io/node-type"))
            held[node_type] = held.get(node_type, 0) + 1
    return held


def check(api: kube.Api, raw: RawSpec, objects: list[dict[str, Any]]) -> Verdict:
    demands = gpu_demands(objects, raw["checks"]["nodes"]["gpuResource"])
    held = held_pods(api, raw)
    bodies: dict[str, dict[str, Any]] = {}
    for demand in demands:
        keep = held.get(demand.node_type, 0)
        for i in range(demand.replicas):
            if i < keep:
                continue
            bodies[f"{demand.node_type}-{i}"] = standin_pod(raw, demand, len(bodies))
        held[demand.node_type] = max(0, keep - demand.replicas)
    already = sum(d.replicas for d in demands) - len(bodies)
    if not bodies:
        return Verdict(demands, already, {}, {}, [])
    LOG.info(
        "asking the scheduler to place a stand-in of each GPU pod the run adds",
        extra={"fields": {"standins": len(bodies), "already_placed": already}},
    )
    answers = probe_pods.run(
        api,
        raw,
        COMPONENT,
        bodies,
        judge,
        FINAL,
        float(raw["checks"]["capacity"]["timeoutSeconds"]),
        "capacity check",
    )
    placed = {key: detail for key, (_, state, detail) in answers.items() if state == "scheduled"}
    refused = {key: detail for key, (_, state, detail) in answers.items() if state == "unschedulable"}
    undecided = [key for key, (_, state, _) in answers.items() if state not in FINAL]
    return Verdict(demands, already, placed, refused, undecided)
