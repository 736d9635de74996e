"""core/image_pull.py: the probe pods preflight runs, and how their status is judged (the pod statuses are the
shapes the kubelet writes; the end-to-end run against a real kubelet is tests/e2e/test_lifecycle.py)."""

from __future__ import annotations

from typing import Any

import pytest

from hooks_testlib import base_spec
from miles_hooks.core import image_pull, pod_security
from miles_hooks.steps import preflight


def pod(
    state: dict[str, Any] | None = None, scheduled: bool = True, node: str | None = "n1"
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [{"type": "PodScheduled", "status": "True" if scheduled else "False"}]
    }
    if not scheduled:
        status["conditions"][0]["message"] = "0/3 nodes are available: 3 node(s) didn't match selector"
    if state is not None:
        status["containerStatuses"] = [{"name": "image", "state": state}]
    return {"spec": {"nodeName": "n1" if scheduled else None}, "status": status}


@pytest.mark.parametrize(
    ("status", "state"),
    [
        (pod({"running": {}}), "pulled"),
        (pod({"terminated": {"exitCode": 0}}), "pulled"),
        (pod({"waiting": {"reason": "ErrImagePull", "message": "not found"}}), "failed"),
        (pod({"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling"}}), "failed"),
        (pod({"waiting": {"reason": "InvalidImageName", "message": "bad"}}), "failed"),
        (pod({"waiting": {"reason": "ContainerCreating"}}), "pulling"),
        (pod(None), "pulling"),
        (pod(None, scheduled=False), "unscheduled"),
    ],
)
def test_judge(status: dict[str, Any], state: str) -> None:
    assert image_pull.judge(status)[0] == state


def test_one_probe_per_pool_that_runs_the_image_and_one_for_two_equal_pools() -> None:
    raw = base_spec()
    raw["rayCluster"]["head"] = {"nodeSelector": {"pool": "cpu"}, "tolerations": []}
    raw["rayCluster"]["worker"] = {"nodeSelector": {"pool": "gpu"}, "tolerations": []}
    assert list(image_pull.pools(raw)) == ["ray-head", "gpu-workers"]  # type: ignore[arg-type]
    raw["rayCluster"]["head"] = raw["rayCluster"]["worker"]
    assert list(image_pull.pools(raw)) == ["ray-head"]  # type: ignore[arg-type]
    raw["rayCluster"]["enabled"] = False  # singleNode: the GPU pool alone
    assert list(image_pull.pools(raw)) == ["gpu-workers"]  # type: ignore[arg-type]


def test_the_probe_runs_the_miles_image_as_nobody_under_the_restricted_standard() -> None:
    raw = base_spec()
    raw["checks"]["image"]["pullSecrets"] = ["regcred"]
    body = image_pull.probe_pod(raw, "gpu-workers", raw["rayCluster"]["worker"])  # type: ignore[arg-type]
    container = body["spec"]["containers"][0]
    assert container["image"] == raw["images"]["miles"] and container["command"] == ["true"]
    assert body["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert body["spec"]["nodeSelector"] == raw["rayCluster"]["worker"]["nodeSelector"]
    assert body["metadata"]["labels"]["app.kubernetes.io/component"] == image_pull.COMPONENT
    assert pod_security.restricted_user_violations(body["spec"]) == []


def test_a_failed_pull_is_an_error_naming_the_values() -> None:
    raw = base_spec()
    raw["images"]["miles"] = "radixark/miles:no-such-tag"
    outcome = image_pull.Outcome("ray-head", "p", "failed", "ErrImagePull: manifest unknown")
    (finding,) = preflight.pull_findings(raw, [outcome])  # type: ignore[arg-type]
    assert finding.level == preflight.ERROR and finding.subject == "image.tag"
    assert (
        "cannot be pulled on the ray-head pool" in finding.message and "manifest unknown" in finding.message
    )
    assert "imagePullSecrets" in finding.message
    pulling = image_pull.Outcome("gpu-workers", "q", "pulling", "pulling on node n1")
    assert preflight.pull_findings(raw, [pulling])[0].level == preflight.WARNING  # type: ignore[arg-type]


def test_a_check_pod_deleted_before_it_answered_is_a_warning_saying_so() -> None:
    raw = base_spec()
    gone = image_pull.Outcome("ray-head", "p", "deleted", "the pod was deleted before it answered (on n1)")
    (finding,) = preflight.pull_findings(raw, [gone])  # type: ignore[arg-type]
    assert finding.level == preflight.WARNING
    assert finding.message.endswith(
        "not checked on the ray-head pool (pod p): the pod was deleted before it answered (on n1)"
    )
