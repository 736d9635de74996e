"""Queued admission with the real Kueue controller (testbed/kueue.sh: the pinned sigs.k8s.io/kueue, its own
CRDs and webhooks): a ClusterQueue with GPU quota for one run admits the first release and holds the second
suspended until the first is gone. wait-ready says the second waits for admission and does not spend its
readiness timeout meanwhile; Helm 4 installs the first release, Helm 3 the second. Then a third, in mode
rayJob, queues behind the second: its RayJob is held suspended (its install returns at once: nothing in mode
rayJob waits for the cluster) until the second is gone, then admitted, and its job runs."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import harness as tb
import pytest

pytestmark = pytest.mark.cluster

COLOCATED = [tb.OVERLAY, tb.VALUES / "values-colocated.yaml"]
QUEUE = "team-a"
CLUSTER_QUEUE = "e2e-gpus"
GPU_QUOTA = 8  # one colocated run (one worker x 8 GPUs)
# The second release's readiness timeout, shorter than the time it is made to wait in the queue.
READINESS_TIMEOUT = 60
QUEUED_FOR = READINESS_TIMEOUT + 20

QUEUE_OBJECTS = f"""
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: e2e-default}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {CLUSTER_QUEUE}}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
    - coveredResources: [cpu, memory, nvidia.com/gpu, vpc.amazonaws.com/efa]
      flavors:
        - name: e2e-default
          resources:
            - {{name: cpu, nominalQuota: "1000"}}
            - {{name: memory, nominalQuota: 10Ti}}
            - {{name: nvidia.com/gpu, nominalQuota: "{GPU_QUOTA}"}}
            - {{name: vpc.amazonaws.com/efa, nominalQuota: "64"}}
"""


@pytest.fixture(scope="module")
def kueue(testbed: Path) -> Iterator[None]:
    script = str(tb.REPO / "testbed" / "kueue.sh")
    tb.run([script, "up"], timeout=240)
    try:
        tb.kubectl_apply(QUEUE_OBJECTS)
        yield
    finally:
        tb.kubectl("delete", "clusterqueue", CLUSTER_QUEUE, "--ignore-not-found", check=False)
        tb.kubectl("delete", "resourceflavor", "e2e-default", "--ignore-not-found", check=False)
        tb.run([script, "down"], timeout=120)


def local_queue(ns: str) -> str:
    return f"""
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: {QUEUE}, namespace: {ns}}}
spec: {{clusterQueue: {CLUSTER_QUEUE}}}
"""


def workload(ns: str) -> dict[str, Any]:
    """The one Kueue Workload of the namespace (Kueue makes one per queued RayCluster)."""
    items = tb.kget("workloads.kueue.x-k8s.io", ns)["items"]
    assert len(items) == 1, [w["metadata"]["name"] for w in items]
    return dict(items[0])


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == ctype), {})


def rayjob(ns: str) -> dict[str, Any]:
    items = tb.kget("rayjobs.ray.io", ns)["items"]
    assert len(items) == 1, [r["metadata"]["name"] for r in items]
    return dict(items[0])


def raycluster(ns: str) -> dict[str, Any]:
    items = tb.kget("rayclusters.ray.io", ns)["items"]
    assert len(items) == 1, [r["metadata"]["name"] for r in items]
    return dict(items[0])


def wait_ready_log(ns: str, release: str) -> str:
    """The wait-ready hook's output so far: from the running Job, else from the pod runner's journal."""
    res = tb.kubectl("logs", "-n", ns, f"job/{release}-wait-ready", check=False)
    if res.rc == 0 and res.out:
        return res.out
    ran = [e for e in tb.journal(ns) if tb.hook_steps([e]) == ["wait-ready"]]
    return "\n".join(Path(e["log"]).read_text(errors="replace") for e in ran)


def test_queue_too_small_for_two_runs_admits_one_and_holds_the_other(
    kueue: None,
    namespace: str,
    second_namespace: str,
    third_namespace: str,
    inputs_ready: Callable[..., Any],
) -> None:
    first, second = "miles-a", "miles-b"  # names holding the chart's: the full name is the release name
    queued = ["--set", f"scheduling.kueueQueue={QUEUE}"]
    patient = [
        "--set", f"checks.waitReadyTimeoutSeconds={READINESS_TIMEOUT}",
        "--set", "hooks.waitReady.activeDeadlineSeconds=900",
    ]  # fmt: skip
    for ns in (namespace, second_namespace):
        tb.kubectl_apply(local_queue(ns))
    inputs_ready(COLOCATED, first, namespace, queued)
    inputs_ready(COLOCATED, second, second_namespace, queued + patient)

    tb.deploy("helm4", "install", first, namespace, COLOCATED, *queued)
    admitted = workload(namespace)
    assert condition(admitted, "Admitted").get("status") == "True", admitted.get("status")
    assert raycluster(namespace)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == QUEUE

    argv = tb.deploy_argv("helm3", "install", second, second_namespace, COLOCATED, *queued, *patient)
    helm = tb.Background(argv)
    try:
        try:
            tb.wait_until(
                "the second release's wait-ready to wait for admission",
                lambda: "waiting for admission" in wait_ready_log(second_namespace, second),
                timeout=300,
            )
        except AssertionError as exc:
            out = helm.stop()
            raise AssertionError(f"{exc}\n--- helm install {second}:\n{out[-4000:]}") from exc
        waiting_since = time.monotonic()
        held = workload(second_namespace)
        reserved = condition(held, "QuotaReserved")
        assert reserved.get("status") == "False", held.get("status")
        assert "nvidia.com/gpu" in reserved.get("message", ""), reserved
        assert raycluster(second_namespace)["spec"].get("suspend") is True
        assert not tb.kget("pods", second_namespace, selector="ray.io/is-ray-node=yes")["items"]
        # Queued for longer than its readiness timeout: the timeout must not run while it waits.
        time.sleep(max(0.0, waiting_since + QUEUED_FOR - time.monotonic()))
        if not helm.running():
            out = helm.output()
            raise AssertionError(f"the queued install ended while the first run queued it:\n{out[-4000:]}")

        tb.helm("helm4", "uninstall", first, "-n", namespace, "--wait", "--timeout", "3m")
        rc, out = helm.finish(timeout=600)
    finally:
        helm.stop()
    assert rc == 0, out[-4000:]

    assert condition(workload(second_namespace), "Admitted").get("status") == "True"
    log = wait_ready_log(second_namespace, second)
    ready = re.search(r"RayCluster ready.*", log)
    assert ready, log[-3000:]
    waited = re.search(r'"?admission_wait_seconds"?[=:] ?([0-9.]+)', ready.group(0))
    assert waited and float(waited.group(1)) >= QUEUED_FOR, ready.group(0)
    jobs = [j for j in tb.release_jobs(second, second_namespace) if j["status"] in ("PENDING", "RUNNING")]
    assert len(jobs) == 1, json.dumps(jobs)[:2000]

    # mode rayJob in the same queue, while the second run holds its quota: the RayJob is held suspended and
    # makes no pod; once the second is gone Kueue admits it and KubeRay runs the job
    third, rayjob_mode = "miles-c", ["--set", "mode=rayJob"]
    tb.kubectl_apply(local_queue(third_namespace))
    inputs_ready(COLOCATED, third, third_namespace, queued + rayjob_mode)
    tb.deploy("helm4", "install", third, third_namespace, COLOCATED, *queued, *rayjob_mode)
    held = workload(third_namespace)
    assert condition(held, "QuotaReserved").get("status") == "False", held.get("status")
    assert rayjob(third_namespace)["spec"].get("suspend") is True
    assert rayjob(third_namespace)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == QUEUE
    assert not tb.kget("pods", third_namespace, selector="ray.io/is-ray-node=yes")["items"]

    tb.helm("helm3", "uninstall", second, "-n", second_namespace, "--wait", "--timeout", "3m")
    tb.wait_until(
        "the queued RayJob to be admitted",
        lambda: condition(workload(third_namespace), "Admitted").get("status") == "True",
        timeout=180,
        interval=2,
    )
    tb.wait_until(
        "the admitted RayJob's job to run",
        lambda: (rayjob(third_namespace).get("status") or {}).get("jobStatus") in ("RUNNING", "SUCCEEDED"),
        timeout=300,
        interval=2,
    )
    assert rayjob(third_namespace)["spec"].get("suspend") is not True
