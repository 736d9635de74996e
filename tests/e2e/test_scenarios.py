"""The other scenario files of values/ on the testbed: MoE (2 workers), HyperPod preset (node-health
selection, instance groups), remote reward service, single node. Each: install with the real hooks, the
derived cluster shape, exactly one job, uninstall leaves nothing.

Helm 3 and Helm 4 render the same objects for every scenario (tests/chart, test_helm3_and_helm4_render_the_
same_objects); what differs between them at install time is how they run hooks and wait, which test_lifecycle
exercises under both. So a scenario whose difference from those lies only in what is rendered (MoE, HyperPod)
is installed under one Helm, the two taking turns; one that brings objects of a kind the others lack, which
the two Helms wait for differently (the reward service's Deployment, single node's training Job), under both.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness as tb
import pytest

sys.path.insert(0, str(tb.REPO / "ci"))
import scenario_files  # ci/: the scenarios of values/
from test_lifecycle import check_cluster_shape, check_single_job, leftovers, spec_fullname

pytestmark = pytest.mark.cluster

# The scenarios no other e2e file installs: release suffix -> scenario name in ci/scenario_files.py (whose
# values files come from each values/ file's `helm install` line), each installed behind the testbed overlay,
# under the Helm majors given (see the module docstring).
INSTALLED = {
    "moe": ("moe", ["helm4"]),
    "hyperpod": ("colocated + hyperpod", ["helm3"]),
    "reward": ("colocated + reward", ["helm4", "helm3"]),
}
SCENARIOS = {
    short: [tb.OVERLAY, *(tb.VALUES / f for f in scenario_files.scenarios()[name])]
    for short, (name, _) in INSTALLED.items()
}


@pytest.mark.parametrize(
    ("scenario", "helm_version"),
    [(short, helm) for short, (_, helms) in sorted(INSTALLED.items()) for helm in helms],
)
def test_scenario_install(
    scenario: str, helm_version: str, namespace: str, inputs_ready: Callable[..., Any]
) -> None:
    values = SCENARIOS[scenario]
    rel = f"miles-{scenario}"
    inputs_ready(values, rel, namespace)
    tb.deploy(helm_version, "install", rel, namespace, values)
    spec = tb.run_spec(namespace, spec_fullname(namespace, rel))
    check_cluster_shape(namespace, spec)
    job = check_single_job(rel, namespace, spec)
    if scenario == "reward":
        assert spec["reward"]["url"].endswith("-reward." + namespace + ".svc:8080/score"), spec["reward"]
        assert "--rm-url" in job["entrypoint"]
        deploy = tb.kget("deployments", namespace, selector=f"app.kubernetes.io/instance={rel}")["items"]
        assert deploy and deploy[0]["status"].get("readyReplicas") == deploy[0]["spec"]["replicas"]
    if scenario == "hyperpod":
        pods = tb.kget("pods", namespace, selector=f"ray.io/cluster={spec['rayCluster']['name']}")["items"]
        for p in pods:
            node = tb.kget("node", name=p["spec"]["nodeName"])["metadata"]["labels"]
            assert node["sagemaker.amazonaws.com/node-health-status"] == "Schedulable"
    tb.uninstall_cleanly(helm_version, rel, namespace, leftovers)


def report_deleted_under_prepare_data(rel: str, ns: str, values: list[Path]) -> None:
    """Each prepare-data attempt ends within seconds of its report pod's deletion, saying so, and the Job's
    next attempt (hooks.prepareData.backoffLimit, 2) reads the image again with a new pod; the third deleted
    pod fails the install. Before, an attempt waited out the report's timeout (here 900 s)."""
    timeout, started = 900, time.time()
    argv = tb.deploy_argv("helm4", "install", rel, ns, values)
    argv += ["--set", f"hooks.prepareData.imageFactsTimeoutSeconds={timeout}"]
    install = tb.Background(argv)
    selector = f"app.kubernetes.io/instance={rel},app.kubernetes.io/component=hook-image-facts"
    deleted: list[str] = []
    waits: list[float] = []
    try:
        for _attempt in range(3):

            def new_report_pod() -> str | None:
                pods = tb.kget("pods", ns, selector=selector)["items"]
                running = [
                    p["metadata"]["name"]
                    for p in pods
                    if (p.get("status") or {}).get("phase") == "Running"
                    and p["metadata"]["name"] not in deleted
                ]
                return str(running[0]) if running else None

            pod = tb.wait_until("a version report pod to run", new_report_pod, timeout=300, interval=1)
            gone = time.monotonic()
            tb.kubectl("delete", "pod", "-n", ns, pod, "--wait=false")
            deleted.append(pod)

            def attempt_ended() -> bool:
                ended = [e for e in tb.journal(ns, since=started) if e["container"] == "prepare-data"]
                return len(ended) >= len(deleted)

            tb.wait_until("the prepare-data attempt to end", attempt_ended, timeout=120, interval=1)
            waits.append(time.monotonic() - gone)
        rc, out = install.finish(timeout=300)
    finally:
        install.stop()
    assert rc != 0, out[-3000:]
    attempts = [e for e in tb.journal(ns, since=started) if e["container"] == "prepare-data"]
    assert len(attempts) == 3 and all(e["exitCode"] == 1 for e in attempts), attempts
    for attempt in attempts:
        said = Path(attempt["log"]).read_text(errors="replace")
        assert "ended early: the pod was deleted before it answered" in said, said[-3000:]
    print(f"\nreport pod deleted -> prepare-data attempt ended: {', '.join(f'{w:.0f}s' for w in waits)}")


@pytest.mark.parametrize("helm_version", ["helm4", "helm3"])
def test_single_node_install(helm_version: str, namespace: str, inputs_ready: Callable[..., Any]) -> None:
    """mode singleNode: no KubeRay; the pre-install hooks run for real, then one training Job whose pod (the
    miles image, only simulated here) takes a whole GPU node."""
    values = [tb.OVERLAY, tb.VALUES / "values-single-node.yaml"]
    rel = "miles-single"
    started = time.time()
    # the image's version report runs on the GPU pool in mode singleNode, which kwok simulates here: no
    # container of it would ever run (docs/testbed.md)
    no_report = ["--set", "hooks.prepareData.imageFacts=false"]
    inputs_ready(values, rel, namespace, no_report)
    if helm_version == "helm4":
        # which makes it a pod that never answers: deleted under prepare-data, it ends the install in
        # seconds naming the pod, not at the report's timeout; the install retried as a user would
        report_deleted_under_prepare_data(rel, namespace, values)
        tb.uninstall_cleanly(helm_version, rel, namespace, leftovers)
        started = time.time()
    tb.deploy(helm_version, "install", rel, namespace, values, *no_report)
    assert tb.hook_steps(tb.journal(namespace, since=started)) == ["preflight", "prepare-data", "convert"]
    assert tb.kget("rayclusters.ray.io", namespace)["items"] == []
    jobs = list(tb.kget("jobs", namespace, selector=f"app.kubernetes.io/instance={rel}")["items"])
    assert len(jobs) == 1, [j["metadata"]["name"] for j in jobs]
    pods = tb.kget("pods", namespace, selector=f"job-name={jobs[0]['metadata']['name']}")["items"]
    assert len(pods) == 1
    node = tb.kget("node", name=pods[0]["spec"]["nodeName"])["metadata"]["labels"]
    assert node["testbed.miles.dev/pool"] == "gpu"
    assert pods[0]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    tb.uninstall_cleanly(helm_version, rel, namespace, leftovers)
