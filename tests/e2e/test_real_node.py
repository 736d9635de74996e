"""The real node (testbed/node.sh, part of the testbed): kubelet + kube-proxy + containerd/runc, where
every release's Ray head runs. Here the chart's own hook pod spec -- securityContext, read-only root, volumes,
service account token -- runs there as a real container from the hooks image `make tools` built (the kubelet's
own checks are the ones that refuse a bad securityContext), and so do the chart's head and reward service,
checked closely.
"""

from __future__ import annotations

import base64
import json
import resource
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import harness as tb
import pytest
import yaml

pytestmark = pytest.mark.cluster

NODE = tb.REAL_NODE
HOOKS_IMAGE = "localhost/miles-hooks:testbed"
STANDIN_IMAGE = "localhost/miles-standin:testbed"  # the testbed's stand-in for the miles image


@pytest.fixture(scope="module")
def real_node(testbed: Path) -> str:
    node = tb.kget("node", name=NODE)
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"]), node
    return NODE


def rendered(namespace: str, *extra: str) -> list[dict[str, Any]]:
    values = [tb.REPO / "values" / "values-local-testbed.yaml", tb.REPO / "values" / "values-colocated.yaml"]
    files = [arg for path in values for arg in ("-f", str(path))]
    out = tb.helm("helm4", "template", "real", str(tb.CHART), "-n", namespace, *files, *extra).out
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


def place_on_the_real_node(pod_spec: dict[str, Any], memory: str) -> None:
    """A pod template of the chart, placed on the real node and sized for it (2 cores, shared with the
    rest of the testbed): its first container gets a small request and `memory` as its limit."""
    pod_spec["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    pod_spec["tolerations"] = [
        *pod_spec.get("tolerations", []),
        {"key": "miles-testbed/real-node", "operator": "Exists"},
    ]
    pod_spec["containers"][0]["resources"] = {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"cpu": "2", "memory": memory},
    }


def ready_pod(namespace: str, selector: str) -> dict[str, Any] | None:
    """The first pod the selector finds that is Ready, else None."""
    for pod in tb.kget("pods", namespace, selector=selector)["items"]:
        if any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])):
            return dict(pod)
    return None


def on_the_real_node(cluster: dict[str, Any]) -> dict[str, Any]:
    """The chart's RayCluster with its head placed on the real node and no workers: this looks at the head
    alone (the lifecycle tests at the whole cluster)."""
    place_on_the_real_node(cluster["spec"]["headGroupSpec"]["template"]["spec"], "4Gi")
    for group in cluster["spec"]["workerGroupSpecs"]:
        group["replicas"] = group["minReplicas"] = group["maxReplicas"] = 0
    return cluster


def dashboard(address: str, path: str, token: str | None) -> tuple[int, bytes] | None:
    """(status, body) of a request to the head's dashboard; None while it does not answer."""
    req = urllib.request.Request(f"http://{address}:8265{path}")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return None


def test_the_charts_ray_head_runs_as_a_real_container(real_node: str, namespace: str) -> None:
    """The chart's RayCluster, reconciled by the real KubeRay operator, its head on the real node from the
    stand-in miles image: KubeRay's command, env and HTTP probes around the chart's head template (the
    open-files wrapper, /dev/shm, the shared volume, token auth from the Secret) start a real Ray head,
    which KubeRay's readiness probe finds Ready; its Jobs API answers with the token and refuses without."""
    # The chart's head raises its open-files limit or exits naming the value: the node's containerd passes
    # on this machine's hard limit (20000 here, far above on EKS's AMIs), so ask for no more than that.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    limit = ["--set", f"rayCluster.workers.openFilesLimit={min(65536, hard)}"]
    # the testbed overlay names the stand-in image (never pulled) and places the head on the real node
    docs = rendered(namespace, *limit)
    apply(namespace, *(d for d in docs if d["kind"] in ("ConfigMap", "ServiceAccount")))
    # the testbed overlay names the token Secret storage.sh puts in every namespace
    secret = tb.kget("secret", namespace, "testbed-ray-auth")
    token = base64.b64decode(secret["data"]["token"]).decode().strip()
    cluster = next(d for d in docs if d["kind"] == "RayCluster")
    name = cluster["metadata"]["name"]
    apply(namespace, on_the_real_node(cluster))

    selector = f"ray.io/cluster={name},ray.io/node-type=head"
    started = time.monotonic()
    try:
        pod = tb.wait_until(
            "the Ray head on the real node to be Ready",
            lambda: ready_pod(namespace, selector),
            420,
            interval=2,
        )
    except AssertionError as exc:
        described = tb.kubectl("describe", "pods", "-n", namespace, "-l", selector, check=False).out
        logs = tb.kubectl("logs", "-n", namespace, "-l", selector, "--tail=40", check=False)
        previous = tb.kubectl("logs", "-n", namespace, "-l", selector, "--previous", "--tail=40", check=False)
        raise AssertionError(
            f"{exc}\n--- logs\n{logs.out}{logs.err}\n--- previous\n{previous.out}{previous.err}\n"
            f"--- described\n{described[-5000:]}"
        ) from exc
    sys.stderr.write(f"Ray head Ready on the real node in {time.monotonic() - started:.0f}s\n")
    assert pod["spec"]["nodeName"] == real_node
    container = pod["spec"]["containers"][0]
    assert container["image"] == STANDIN_IMAGE
    assert container["readinessProbe"].get("httpGet"), container["readinessProbe"]  # KubeRay's, Ray >= 2.53
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    address = pod["status"]["podIP"]
    assert address.startswith("10.251.")

    # Ready means the raylet's agent answers (KubeRay's probe); the dashboard process may come up later
    status, _ = tb.wait_until(
        "the head's dashboard to answer", lambda: dashboard(address, "/api/version", None), 120, interval=2
    )
    assert status in (401, 403), f"the head answered {status} without the token"
    status, body = dashboard(address, "/api/version", token) or (0, b"no answer")
    assert status == 200, body[:500]
    assert (
        json.loads(body)["ray_version"]
        == yaml.safe_load((tb.CHART / "values.yaml").read_text())["rayCluster"]["rayVersion"]
    )
    status, body = dashboard(address, "/api/v0/nodes?limit=10", token) or (0, b"no answer")
    assert status == 200, body[:500]
    (node,) = json.loads(body)["data"]["result"]["result"]
    # the chart's head takes no work: 0 CPUs, 0 GPUs
    assert (
        node["is_head_node"]
        and not node["resources_total"].get("CPU")
        and not node["resources_total"].get("GPU")
    )


def test_the_charts_reward_service_runs_as_a_real_container(real_node: str, namespace: str) -> None:
    """The chart's reward Deployment (values-reward.yaml) on the real node from the reward image built here:
    its securityContext, read-only root with the /tmp emptyDir, the shared volume and its readiness probe on
    /ready hold in a real container, and it scores a sample."""
    values = ["-f", str(tb.REPO / "values" / "values-reward.yaml")]
    image = ["--set", "reward.image.repository=localhost/miles-reward", "--set", "reward.image.tag=testbed"]
    docs = rendered(namespace, *values, *image, "--set", "reward.image.pullPolicy=Never")
    apply(namespace, *(d for d in docs if d["kind"] in ("ConfigMap", "ServiceAccount")))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    deployment["spec"]["replicas"] = 1
    place_on_the_real_node(deployment["spec"]["template"]["spec"], "1Gi")
    apply(namespace, deployment)
    selector = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items())
    pod = tb.wait_until(
        "the reward service on the real node to be Ready",
        lambda: ready_pod(namespace, selector),
        180,
        interval=2,
    )
    assert pod["spec"]["nodeName"] == real_node
    assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    sample = {
        "prompt": "What is 6 * 7?",
        "response": "6 * 7 = 42, so the answer is \\boxed{42}",
        "label": "42",
    }
    req = urllib.request.Request(
        f"http://{pod['status']['podIP']}:8080/score",
        data=json.dumps(sample).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        assert json.loads(r.read()) == 1.0
