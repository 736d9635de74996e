"""The miles image is pullable where it will run: a pod per node pool pulls it, before anything starts.

KubeRay replaces a RayCluster's pods on an upgrade before it knows whether the new ones can start: an image
tag that does not exist used to take a healthy run down, and surfaced only at wait-ready's timeout. preflight
(pre-install/pre-upgrade, before any object of the release changes) runs a pod of the miles image on each
pool that runs it (the head's and the GPU workers'), doing nothing (`true`, as nobody, restricted Pod
Security). The pod's container starting proves the node has the image; a pull error (`ErrImagePull`,
`ImagePullBackOff`, `InvalidImageName`) fails preflight in seconds naming the values. A pull still going at
the deadline passes with a warning: a reference the registry cannot serve fails within seconds, and the
pull itself warms the node's cache for the Ray pods. A pool with no room for the pod is reported, not waited
for. The pods are deleted in every case.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from miles_hooks.core import kube, log, probe_pods
from miles_hooks.core.runspec_types import NodePoolSpec, RawSpec

LOG = log.get("preflight")

COMPONENT = "hook-image-check"
# "unscheduled" is final too: waiting on a full pool would hold every upgrade for the whole timeout (and a
# pending pod could make an autoscaler add a GPU node for it)
FINAL = ("pulled", "failed", "unscheduled")
PULL_ERRORS = (
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "RegistryUnavailable",
)


@dataclass(frozen=True)
class Outcome:
    pool: str
    pod: str
    state: str  # "pulled" | "failed" | "pulling" | "unscheduled"
    detail: str


def pools(raw: RawSpec) -> dict[str, NodePoolSpec]:
    """The node pools the miles image runs on, by name; one probe for pools that are the same."""
    found: dict[str, NodePoolSpec] = {}
    candidates = [("gpu-workers", raw["rayCluster"]["worker"])]
    if raw["rayCluster"]["enabled"]:
        candidates.insert(0, ("ray-head", raw["rayCluster"]["head"]))
    for name, pool in candidates:
        if pool not in found.values():
            found[name] = pool
    return found


def probe_pod(
    raw: RawSpec,
    pool_name: str,
    pool: NodePoolSpec,
    purpose: str = "image-check",
    component: str = COMPONENT,
) -> dict[str, Any]:
    """A pod of the miles image on ``pool`` that does nothing (``true``) as nobody, restricted."""
    release = raw["release"]
    image = raw["checks"]["image"]
    restricted = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{release['fullname']}-{purpose}-{pool_name}-",
            "namespace": release["namespace"],
            "labels": {
                "app.kubernetes.io/instance": release["name"],
                "app.kubernetes.io/managed-by": "miles-hooks",
                "app.kubernetes.io/component": component,
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": dict(pool["nodeSelector"]),
            "tolerations": [dict(t) for t in pool["tolerations"]],
            "imagePullSecrets": [{"name": n} for n in image["pullSecrets"]],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65534,
                "runAsGroup": 65534,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "image",
                    "image": raw["images"]["miles"],
                    "imagePullPolicy": image["pullPolicy"],
                    "command": ["true"],
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        # a python3 reading package metadata (image_facts) stays well below this
                        "limits": {"cpu": "200m", "memory": "128Mi"},
                    },
                    "securityContext": restricted,
                }
            ],
        },
    }


def judge(pod: dict[str, Any]) -> tuple[str, str]:
    """(state, detail) of a probe pod: pulled once its container started (or ended), failed on a pull error;
    else pulling, or unscheduled while no node takes it."""
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        if "running" in state or "terminated" in state:
            return "pulled", f"the container started on node {pod.get('spec', {}).get('nodeName')}"
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in PULL_ERRORS:
            return "failed", f"{waiting['reason']}: {waiting.get('message') or 'no message'}"
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return "unscheduled", str(condition.get("message") or condition.get("reason") or "not scheduled")
    node = (pod.get("spec") or {}).get("nodeName")
    return "pulling", f"pulling on node {node}" if node else "waiting for a node"


def check(api: kube.Api, raw: RawSpec) -> list[Outcome]:
    """Runs the probes, one per pool, and waits until each pulled or failed, or the deadline."""
    bodies = {name: probe_pod(raw, name, pool) for name, pool in pools(raw).items()}
    LOG.info(
        "checking that the miles image is pullable on each pool that runs it",
        extra={"fields": {"image": raw["images"]["miles"], "pools": sorted(bodies)}},
    )
    answers = probe_pods.run(
        api,
        raw,
        COMPONENT,
        bodies,
        judge,
        FINAL,
        float(raw["checks"]["image"]["timeoutSeconds"]),
        "image check",
    )
    outcomes = []
    for pool_name, (pod, state, detail) in answers.items():
        outcomes.append(Outcome(pool_name, pod, state or "pulling", detail))
    return sorted(outcomes, key=lambda o: o.pod)
