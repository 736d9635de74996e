"""Pure wait-ready logic: RayCluster readiness and Pending reasons."""

from __future__ import annotations

from typing import Any

from miles_hooks.core import pod_diagnosis, raycluster
from miles_hooks.steps import wait_ready as wr


def cluster(
    gen: int = 2,
    observed: int = 2,
    head: str = "True",
    provisioned: str = "True",
    ready: int = 2,
    desired: int = 2,
    conditions: bool = True,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "observedGeneration": observed,
        "readyWorkerReplicas": ready,
        "desiredWorkerReplicas": desired,
    }
    if conditions:
        status["conditions"] = [
            {"type": "HeadPodReady", "status": head},
            {"type": "RayClusterProvisioned", "status": provisioned},
        ]
    else:
        status["state"] = "ready"
    return {"metadata": {"name": "miles", "generation": gen}, "status": status}


def test_ready_cluster() -> None:
    assert raycluster.cluster_readiness(cluster(), 2) == (True, [])
    assert raycluster.cluster_readiness(cluster(conditions=False), 2) == (True, [])


def test_not_ready_reasons() -> None:
    ok, reasons = raycluster.cluster_readiness(cluster(gen=3, observed=2, head="False", ready=1), 2)
    assert not ok
    assert reasons[0].startswith("operator has not reconciled generation 3")
    assert "condition HeadPodReady is not True" in reasons
    assert "1 of 2 worker(s) Ready" in reasons
    assert raycluster.cluster_readiness(None, 2) == (False, ["RayCluster not found"])
    ok, reasons = raycluster.cluster_readiness(cluster(desired=1, ready=1), 2)
    assert not ok and reasons == ["desiredWorkerReplicas is 1, the run spec expects 2"]


def test_provisioned_but_upgrade_pending_waits_on_replicas() -> None:
    ok, reasons = raycluster.cluster_readiness(cluster(ready=0, desired=2), 2)
    assert not ok and reasons == ["0 of 2 worker(s) Ready"]


def test_replica_failure_condition() -> None:
    obj = cluster()
    obj["status"]["conditions"].append(
        {
            "type": "RayClusterReplicaFailure",
            "status": "True",
            "reason": "FailedCreateWorkerPod",
            "message": "quota",
        }
    )
    ok, reasons = raycluster.cluster_readiness(obj, 2)
    assert not ok and reasons == ["RayClusterReplicaFailure: FailedCreateWorkerPod quota"]


def pod(name: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": status}


def test_pod_reasons_unschedulable_and_events() -> None:
    p = pod(
        "w-0",
        phase="Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ],
    )
    events = [
        {
            "involvedObject": {"name": "w-0"},
            "type": "Warning",
            "reason": "FailedScheduling",
            "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            "lastTimestamp": "2",
        },
        {"involvedObject": {"name": "other"}, "type": "Warning", "reason": "X", "message": "y"},
        {"involvedObject": {"name": "w-0"}, "type": "Normal", "reason": "Scheduled", "message": "ok"},
    ]
    reasons = pod_diagnosis.pod_reasons(p, events)
    # the event repeating the PodScheduled message is not shown twice
    assert reasons == ["unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."]
    events.append(
        {
            "involvedObject": {"name": "w-0"},
            "type": "Warning",
            "reason": "FailedMount",
            "message": "MountVolume.SetUp failed for volume fsx",
            "lastTimestamp": "3",
        }
    )
    assert (
        pod_diagnosis.pod_reasons(p, events)[1]
        == "event FailedMount: MountVolume.SetUp failed for volume fsx"
    )


def test_pod_reasons_image_pull_and_crash() -> None:
    p = pod(
        "h",
        phase="Pending",
        containerStatuses=[
            {
                "name": "ray-head",
                "state": {
                    "waiting": {
                        "reason": "ImagePullBackOff",
                        "message": 'Back-off pulling image "radixark/miles:nope"',
                    }
                },
            }
        ],
    )
    assert pod_diagnosis.pod_reasons(p, []) == [
        'container ray-head: ImagePullBackOff: Back-off pulling image "radixark/miles:nope"'
    ]
    c = pod(
        "w",
        phase="Running",
        containerStatuses=[
            {"name": "ray-worker", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
        ],
    )
    assert pod_diagnosis.pod_reasons(c, []) == ["container ray-worker exited 137 (OOMKilled)"]
    r = pod("w2", phase="Running", conditions=[{"type": "Ready", "status": "False"}])
    assert pod_diagnosis.pod_reasons(r, []) == ["running but not Ready (readiness probe failing)"]


def test_diagnose_skips_ready_pods() -> None:
    ready = pod("a", phase="Running", conditions=[{"type": "Ready", "status": "True"}])
    pending = pod("b", phase="Pending")
    assert pod_diagnosis.diagnose([ready, pending], []) == ["pod b: Pending"]


def ray_pod(name: str, node_type: str, ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"ray.io/node-type": node_type}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T00:00:00Z"
    cond = {"type": "Ready", "status": "True" if ready else "False"}
    return {"metadata": meta, "status": {"phase": "Running", "conditions": [cond]}}


def test_current_pods_ready_ignores_the_terminating_ones() -> None:
    """After a Recreate upgrade (method crd) the old pods stay Ready while they terminate: they must not
    count, and the new ones must all be there and Ready."""
    old = [ray_pod("h-old", "head", deleting=True), ray_pod("w-old-1", "worker", deleting=True)]
    old.append(ray_pod("w-old-2", "worker", deleting=True))
    ok, reasons = wr.current_pods_readiness(old, 2)
    assert not ok
    assert reasons == [
        "no head pod yet",
        "0 of 2 worker pod(s) Ready (0 exist)",
        "3 pod(s) of an earlier template still terminating",
    ]
    new = [ray_pod("h", "head"), ray_pod("w1", "worker"), ray_pod("w2", "worker", ready=False)]
    ok, reasons = wr.current_pods_readiness(old + new, 2)
    assert not ok and reasons[0] == "1 of 2 worker pod(s) Ready (2 exist)"
    new[2] = ray_pod("w2", "worker")
    assert wr.current_pods_readiness(old + new, 2) == (True, [])
    assert wr.current_pods_readiness(new, 2) == (True, [])


def test_current_pods_readiness_wants_the_exact_shape() -> None:
    unready_head = [ray_pod("h", "head", ready=False), ray_pod("w1", "worker")]
    assert wr.current_pods_readiness(unready_head, 1) == (False, ["the head pod is not Ready"])
    extra = [ray_pod("h", "head"), ray_pod("w1", "worker"), ray_pod("w2", "worker")]
    assert wr.current_pods_readiness(extra, 1) == (False, ["2 of 1 worker pod(s) Ready (2 exist)"])
    assert wr.current_pods_readiness([], 0) == (False, ["no head pod yet"])


def test_a_queued_suspended_cluster_waits_for_admission() -> None:
    """Kueue holds a queued RayCluster with spec.suspend (KubeRay reports RayClusterSuspended): that is
    waiting for admission, not a broken cluster; without the queue label nobody will resume it."""
    queued = cluster(head="False", ready=0)
    queued["metadata"].update(namespace="ml", labels={"kueue.x-k8s.io/queue-name": "team-a"})
    queued["spec"] = {"suspend": True}
    wait = raycluster.admission_wait(queued)
    assert wait.startswith("waiting for admission: suspended until Kueue's LocalQueue 'team-a' admits it")
    assert "kubectl get workloads -n ml" in wait
    preempted = cluster()
    preempted["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a"}
    preempted["status"]["conditions"].append({"type": "RayClusterSuspending", "status": "True"})
    assert raycluster.admission_wait(preempted)
    admitted = dict(queued, spec={"suspend": False})
    assert raycluster.admission_wait(admitted) == "" and raycluster.admission_wait(None) == ""
    orphan = cluster(head="False", ready=0)
    orphan["spec"] = {"suspend": True}
    assert raycluster.admission_wait(orphan) == ""
    ok, reasons = raycluster.cluster_readiness(orphan, 2)
    orphaned = "spec.suspend is true and no kueue.x-k8s.io/queue-name"
    assert not ok and any(r.startswith(orphaned) for r in reasons)


class FakeTime:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_readiness_clock_stops_while_the_queue_holds_the_cluster() -> None:
    now = FakeTime()
    clock = wr.ReadinessClock(600, now=now)
    now.t += 100
    assert clock.remaining() == 500
    clock.hold(True)
    now.t += 7200  # two hours in the queue
    assert clock.remaining() == 500 and clock.held() == 7200
    clock.hold(True)  # still held: nothing changes
    now.t += 10
    clock.hold(False)  # admitted
    assert clock.held() == 7210 and clock.remaining() == 500
    now.t += 450
    assert clock.remaining() == 50
    clock.hold(True)  # preempted and queued again
    now.t += 30
    clock.hold(False)
    now.t += 50
    assert clock.remaining() == 0 and clock.held() == 7240
