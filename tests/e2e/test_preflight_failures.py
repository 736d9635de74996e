"""Failure paths: each makes `helm install` fail at preflight with a message naming the cause, and leaves no
RayCluster behind (the real preflight code against the real API server and KubeRay CRD)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import testbed as tb

pytestmark = pytest.mark.cluster

COLOCATED = [tb.OVERLAY, tb.VALUES / "values-colocated.yaml"]


def install_fails(ns: str, extra: list[str]) -> str:
    args = ["install", "miles", str(tb.CHART), "-n", ns]
    for v in COLOCATED:
        args += ["-f", str(v)]
    res = tb.helm("helm4", *args, *extra, "--wait", "--timeout", "3m", check=False)
    assert res.rc != 0, f"helm install unexpectedly succeeded:\n{res.out[-2000:]}"
    assert "preflight" in res.err + res.out, res.err[-3000:]
    logs = tb.kubectl("logs", "-n", ns, "job/miles-preflight", check=False).out
    assert tb.kget("rayclusters.ray.io", ns)["items"] == [], "a RayCluster was left behind"
    return logs + res.err + res.out


def test_not_enough_gpu_nodes(namespace: str, inputs_ready: Callable[..., Any]) -> None:
    extra = ["--set", "topology.actorNodes=4", "--set", "topology.rolloutGpus=32"]
    inputs_ready(COLOCATED, "miles", namespace, extra)
    out = install_fails(namespace, extra)
    assert "4" in out and "node" in out.lower(), out[-3000:]


def test_checkpoints_beyond_the_claim(namespace: str, inputs_ready: Callable[..., Any]) -> None:
    """The run's checkpoint budget (chart) against the real claim's capacity (1200Gi on the testbed)."""
    extra = ["--set", "model.parameterCount=300000000000"]
    inputs_ready(COLOCATED, "miles", namespace, extra)
    out = install_fails(namespace, extra)
    assert "persistentvolumeclaim/fsx-claim" in out, out[-3000:]
    assert "capacity 1.2 TiB, expected at least" in out, out[-3000:]
    assert "5 checkpoint(s) on disk at once" in out and "recipe.checkpoint.retainInterval" in out, out[-3000:]


def test_efa_below_node_allocatable(namespace: str, inputs_ready: Callable[..., Any]) -> None:
    extra = ["--set", "gpuPods.efa.count=8"]
    inputs_ready(COLOCATED, "miles", namespace, extra)
    out = install_fails(namespace, extra)
    assert "efa" in out.lower() and "15" in out, out[-3000:]


def test_what_the_api_server_refuses_fails_before_any_download(
    namespace: str, inputs_ready: Callable[..., Any]
) -> None:
    """Values the chart renders but Kubernetes refuses, one per kind of rule; preflight's server-side dry
    run names each object and field, and the install stops before prepare-data and convert exist. (A value
    that breaks the preflight Job itself is refused by the API server when Helm creates that Job.)"""
    extra = [
        # the Priority admission plugin: the class must exist (a RayCluster template, sent as a Pod)
        "--set", "scheduling.priorityClassName=no-such-priority",
        # Pod validation: requests above limits
        "--set", "rayCluster.workers.resources.requests.cpu=32",
        "--set", "rayCluster.workers.resources.limits.cpu=16",
        # Pod validation: an Exists toleration carries no value
        "--set", "gpuPods.tolerations[0].key=nvidia.com/gpu",
        "--set", "gpuPods.tolerations[0].operator=Exists",
        "--set", "gpuPods.tolerations[0].value=present",
    ]  # fmt: skip
    inputs_ready(COLOCATED, "miles", namespace, extra)
    out = install_fails(namespace, extra)
    worker_pod = "RayCluster/miles-"
    assert worker_pod in out and "spec.workerGroupSpecs[0].template (as a Pod)" in out, out[-4000:]
    assert 'no PriorityClass with name no-such-priority was found' in out, out[-4000:]
    assert "must be less than or equal to cpu limit" in out, out[-4000:]
    assert "spec.tolerations[0].operator" in out and "value must be empty when `operator` is 'Exists'" in out, out[-4000:]
    assert "Job/miles-convert" in out, "the convert Job carries the GPU tolerations: " + out[-4000:]
    for step in ("prepare-data", "convert"):
        found = tb.kubectl("get", "job", f"miles-{step}", "-n", namespace, check=False)
        assert found.rc != 0, f"job/miles-{step} exists: preflight let the install go on"


def test_missing_secret(namespace: str, inputs_ready: Callable[..., Any]) -> None:
    inputs_ready(COLOCATED, "miles", namespace)
    tb.kubectl("-n", namespace, "delete", "secret", "hf-token")
    out = install_fails(namespace, [])
    assert "hf-token" in out, out[-3000:]


def test_missing_kuberay_crd(namespace: str, inputs_ready: Callable[..., Any]) -> None:
    inputs_ready(COLOCATED, "miles", namespace)
    crd = tb.REPO / ".tools" / "kuberay" / "crds" / "ray.io_rayclusters.yaml"
    tb.kubectl("delete", "crd", "rayclusters.ray.io", "--wait=true", timeout=120)
    try:
        args = ["install", "miles", str(tb.CHART), "-n", namespace]
        for v in COLOCATED:
            args += ["-f", str(v)]
        res = tb.helm("helm4", *args, "--wait", "--timeout", "3m", check=False)
        assert res.rc != 0
        out = res.err + res.out + tb.kubectl("logs", "-n", namespace, "job/miles-preflight", check=False).out
        assert "rayclusters.ray.io" in out or "RayCluster" in out, out[-3000:]
    finally:
        tb.kubectl("create", "--validate=false", "-f", str(crd))
        jsonpath = '{.status.conditions[?(@.type=="Established")].status}'
        tb.wait_until(
            "the RayCluster CRD to be served again",
            lambda: (
                tb.kubectl("get", "crd/rayclusters.ray.io", "-o", f"jsonpath={jsonpath}", check=False).out
                == "True"
            ),
            timeout=300,
            interval=1,
        )
