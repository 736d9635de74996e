"""core/capacity.py and preflight's capacity findings: which pods get a stand-in, what a stand-in keeps of the
template, and what the scheduler's verdict becomes (the run against the real scheduler, with a node held by
another pod, is tests/e2e/test_preflight_failures.py)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from hooks_testlib import base_spec
from miles_hooks.core import capacity
from miles_hooks.core.runspec_types import RawSpec
from miles_hooks.steps import preflight

GPU = "nvidia.com/gpu"


def pod_spec(gpus: int, **extra: Any) -> dict[str, Any]:
    limits = {
        "cpu": "8",
        "memory": "64Gi",
        **({GPU: str(gpus), "vpc.amazonaws.com/efa": "16"} if gpus else {}),
    }
    return {
        "containers": [
            {"name": "ray", "image": "miles:1", "resources": {"requests": dict(limits), "limits": limits}}
        ],
        **extra,
    }


def ray_cluster(head_gpus: int = 0, workers: int = 2, kind: str = "RayCluster") -> dict[str, Any]:
    cluster = {
        "headGroupSpec": {"template": {"spec": pod_spec(head_gpus)}},
        "workerGroupSpecs": [
            {"groupName": "gpu", "replicas": workers, "template": {"spec": pod_spec(8)}},
            {"groupName": "cpu", "replicas": 3, "template": {"spec": pod_spec(0)}},
        ],
    }
    spec = {"rayClusterSpec": cluster} if kind == "RayJob" else cluster
    return {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": "miles"}, "spec": spec}


def test_only_ray_pods_that_ask_for_gpus_get_stand_ins() -> None:
    (workers,) = capacity.gpu_demands([ray_cluster()], GPU)
    assert (workers.subject, workers.node_type, workers.replicas) == (
        "RayCluster/miles spec.workerGroupSpecs[0]",
        "worker",
        2,
    )
    head, workers = capacity.gpu_demands([ray_cluster(head_gpus=8, kind="RayJob")], GPU)
    assert head.subject == "RayJob/miles spec.rayClusterSpec.headGroupSpec" and head.replicas == 1
    assert workers.subject == "RayJob/miles spec.rayClusterSpec.workerGroupSpecs[0]"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": {"template": {}}}
    assert capacity.gpu_demands([job, ray_cluster(workers=0)], GPU) == []


def test_a_stand_in_keeps_where_the_pod_may_go_and_what_it_asks_and_nothing_that_runs() -> None:
    raw = base_spec()
    raw["checks"]["image"]["pullSecrets"] = ["regcred"]
    placement = {
        "nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}},
    }
    template = pod_spec(8, priorityClassName="training-high", serviceAccountName="miles", **placement)
    demand = capacity.Demand("RayCluster/miles", "worker", 1, template)
    body = capacity.standin_pod(cast(RawSpec, raw), demand, 0)
    spec = body["spec"]
    for key, value in placement.items():
        assert spec[key] == value
    # no priority class: a stand-in must not preempt anybody's pods to prove a point
    assert "priorityClassName" not in spec and "serviceAccountName" not in spec
    (container,) = spec["containers"]
    assert container["resources"] == template["containers"][0]["resources"]
    assert container["command"] == ["sleep", "600"] and container["image"] == raw["images"]["miles"]
    assert spec["securityContext"]["runAsUser"] == 65534 and spec["automountServiceAccountToken"] is False
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert body["metadata"]["labels"]["app.kubernetes.io/component"] == capacity.COMPONENT


@pytest.mark.parametrize(
    ("pod", "state"),
    [
        ({"spec": {"nodeName": "gpu-1"}, "status": {}}, ("scheduled", "gpu-1")),
        (
            {
                "spec": {},
                "status": {
                    "conditions": [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": "0/4 nodes are available: 1 Insufficient nvidia.com/gpu.",
                        }
                    ]
                },
            },
            ("unschedulable", "0/4 nodes are available: 1 Insufficient nvidia.com/gpu."),
        ),
        ({"spec": {}, "status": {}}, ("pending", "not judged by the scheduler yet")),
    ],
)
def test_judge(pod: dict[str, Any], state: tuple[str, str]) -> None:
    assert capacity.judge(pod) == state


def verdict(placed: int, refused: int, undecided: int = 0, held: int = 0) -> capacity.Verdict:
    demand = capacity.Demand("RayCluster/miles spec.workerGroupSpecs[0]", "worker", placed + refused, {})
    return capacity.Verdict(
        [demand],
        held,
        {f"worker-{i}": f"gpu-{i}" for i in range(placed)},
        {
            f"worker-{placed + i}": "0/4 nodes are available: 1 Insufficient nvidia.com/gpu."
            for i in range(refused)
        },
        [f"worker-{placed + refused + i}" for i in range(undecided)],
    )


def test_a_run_that_does_not_fit_now_fails_naming_the_scheduler_and_the_choice_to_wait() -> None:
    raw = cast(RawSpec, base_spec())
    (finding,) = preflight.capacity_findings(raw, verdict(placed=1, refused=1))
    assert finding.level == preflight.ERROR and finding.subject == "hooks.preflight.capacityCheck"
    text = str(finding)
    assert "1 of 2 GPU pod(s) (RayCluster/miles spec.workerGroupSpecs[0]) fit now (on gpu-0)" in text
    assert "the scheduler on the rest: 0/4 nodes are available: 1 Insufficient nvidia.com/gpu." in text
    assert "hooks.preflight.whenFull=wait" in text and "checks.waitReadyTimeoutSeconds" in text


def test_waiting_is_a_choice_with_its_bound_named_per_mode() -> None:
    raw = base_spec()
    raw["checks"]["capacity"]["whenFull"] = "wait"
    raw["mode"] = "rayJob"
    (finding,) = preflight.capacity_findings(cast(RawSpec, raw), verdict(placed=0, refused=2))
    assert finding.level == preflight.WARNING and finding.subject == "hooks.preflight.whenFull"
    assert "0 of 2 GPU pod(s)" in str(finding) and "rayJob.activeDeadlineSeconds" in str(finding)


def test_a_fitting_run_an_undecided_scheduler_and_an_upgrade_that_adds_nothing() -> None:
    raw = cast(RawSpec, base_spec())
    (fits,) = preflight.capacity_findings(raw, verdict(placed=2, refused=0))
    assert fits.level == preflight.INFO and "placed all 2 GPU pod stand-in(s) now, on gpu-0, gpu-1" in str(
        fits
    )
    (slow,) = preflight.capacity_findings(raw, verdict(placed=1, refused=0, undecided=1))
    assert slow.level == preflight.WARNING and "hooks.preflight.capacityCheckTimeoutSeconds" in str(slow)
    held = capacity.Verdict([capacity.Demand("RayCluster/miles", "worker", 2, {})], 2, {}, {}, [])
    (kept,) = preflight.capacity_findings(raw, held)
    assert kept.level == preflight.INFO and "2 GPU pod(s) already hold their nodes" in str(kept)
