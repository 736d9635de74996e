"""The real node (ci/cluster/node.sh): kubelet + kube-proxy + containerd/runc join the e2e testbed, and the
chart's own hook pod spec -- securityContext, read-only root, volumes, service account token -- runs there as
a real container from the hooks image `make tools` built. The kubelet's own checks are the ones that refuse
a bad securityContext.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import testbed as tb
import yaml

pytestmark = pytest.mark.cluster

NODE = "real-cpu-0"
HOOKS_IMAGE = "localhost/miles-hooks:testbed"
NODE_SH = str(tb.REPO / "ci" / "cluster" / "node.sh")


@pytest.fixture(scope="module")
def real_node(testbed: Path) -> Iterator[str]:
    tb.run([NODE_SH, "up"], timeout=300)
    try:
        yield NODE
    finally:
        tb.run([NODE_SH, "down"], check=False, timeout=300)


def rendered(namespace: str) -> list[dict[str, Any]]:
    values = [tb.REPO / "values" / "values-local-testbed.yaml", tb.REPO / "values" / "values-colocated.yaml"]
    files = [arg for path in values for arg in ("-f", str(path))]
    out = tb.helm("helm4", "template", "real", str(tb.CHART), "-n", namespace, *files).out
    return [doc for doc in yaml.safe_load_all(out) if doc]


def hook_pod(docs: list[dict[str, Any]], component: str, name: str) -> dict[str, Any]:
    """The chart's pod of hook Job ``component``, placed on the real node, from the image built here."""
    job = next(
        d
        for d in docs
        if d["kind"] == "Job" and d["metadata"]["labels"].get("app.kubernetes.io/component") == component
    )
    spec = job["spec"]["template"]["spec"]
    spec["nodeName"] = NODE
    spec["tolerations"] = [
        *spec.get("tolerations", []),
        {"key": "miles-testbed/real-node", "operator": "Exists"},
    ]
    for container in spec["containers"]:
        container["image"], container["imagePullPolicy"] = HOOKS_IMAGE, "Never"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def apply(namespace: str, *objects: dict[str, Any]) -> None:
    for obj in objects:
        path = tb.CLUSTER_DIR / f"apply-{obj['kind']}-{obj['metadata']['name']}.json"
        path.write_text(json.dumps(obj))
        try:
            tb.kubectl("apply", "-n", namespace, "-f", str(path))
        finally:
            path.unlink()


def pod_phase(namespace: str, name: str) -> str:
    phase: str = tb.kget("pod", namespace, name)["status"].get("phase", "")
    return phase


def test_the_charts_hook_pod_runs_as_a_real_container(real_node: str, namespace: str) -> None:
    docs = rendered(namespace)
    # what the hook pod mounts and runs as: the run-spec ConfigMaps and the hooks service account
    apply(namespace, *(d for d in docs if d["kind"] in ("ConfigMap", "ServiceAccount")))
    pod = hook_pod(docs, "hook-wait-ready", "real-wait-ready")
    container = pod["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # the chart's command with `plan` for `wait-ready`: reads the mounted run spec, needs no RayCluster
    container["command"] = [
        "sh",
        "-c",
        "miles-hooks plan --spec /etc/miles/run.json && id -u && touch /x || echo ro",
    ]
    apply(namespace, pod)
    tb.wait_until(
        "the hook pod to finish",
        lambda: pod_phase(namespace, "real-wait-ready") in ("Succeeded", "Failed"),
        120,
    )
    assert pod_phase(namespace, "real-wait-ready") == "Succeeded"
    log = tb.kubectl("logs", "-n", namespace, "real-wait-ready").out
    assert "10001" in log.split()
    assert "Read-only file system" in log
    running = tb.kget("pod", namespace, "real-wait-ready")
    assert running["spec"]["nodeName"] == real_node
    assert running["status"]["podIP"].startswith("10.251.")


def test_the_kubelet_refuses_a_security_context_that_breaks_non_root(real_node: str, namespace: str) -> None:
    docs = rendered(namespace)
    apply(namespace, *(d for d in docs if d["kind"] in ("ConfigMap", "ServiceAccount")))
    pod = hook_pod(docs, "hook-wait-ready", "real-root")
    pod["spec"]["securityContext"]["runAsUser"] = 0
    apply(namespace, pod)

    def refused() -> str:
        statuses = tb.kget("pod", namespace, "real-root")["status"].get("containerStatuses", [])
        waiting = statuses[0]["state"].get("waiting", {}) if statuses else {}
        return (
            str(waiting.get("message", "")) if waiting.get("reason") == "CreateContainerConfigError" else ""
        )

    message = tb.wait_until("the kubelet to refuse the container", refused, 120)
    assert "non-root" in message
