"""helm install → upgrade (no change, changed recipe) → rollback → upgrade (changed pods) → uninstall, on
the local testbed, with the real hooks, the real KubeRay operator and a real Ray head (a container on the
real node). Helm 4 and Helm 3; `helm test` runs the status and report pods for real."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable
from typing import Any

import harness as tb
import pytest

pytestmark = pytest.mark.cluster

COLOCATED = [tb.OVERLAY, tb.VALUES / "values-colocated.yaml"]
DISAGGREGATED = [tb.OVERLAY, tb.VALUES / "values-disaggregated.yaml"]
HOOK_ORDER = ["preflight", "prepare-data", "convert", "wait-ready", "verify", "submit"]
NAMESPACED_KINDS = (
    "pods,jobs,configmaps,secrets,services,serviceaccounts,roles,rolebindings,networkpolicies,"
    "deployments,poddisruptionbudgets,persistentvolumeclaims,rayclusters.ray.io,rayjobs.ray.io"
)


def active_jobs(release: str, ns: str) -> list[dict[str, Any]]:
    return [j for j in tb.release_jobs(release, ns) if j["status"] in ("PENDING", "RUNNING")]


def rayclusters(ns: str) -> list[dict[str, Any]]:
    return list(tb.kget("rayclusters.ray.io", ns)["items"])


POOL_LABEL = "testbed.miles.dev/pool"


def node_pool(node: str) -> str:
    return str(tb.kget("node", name=node)["metadata"]["labels"].get(POOL_LABEL))


def cluster_pods(ns: str, cluster: str) -> list[dict[str, Any]]:
    return list(tb.kget("pods", ns, selector=f"ray.io/cluster={cluster}")["items"])


def head_pod(ns: str, cluster: str) -> dict[str, Any]:
    (head,) = [
        p
        for p in cluster_pods(ns, cluster)
        if p["metadata"]["labels"].get("ray.io/node-type") == "head"
        and not p["metadata"].get("deletionTimestamp")
    ]
    return head


def check_cluster_shape(ns: str, spec: dict[str, Any]) -> str:
    """The RayCluster is reconciled by KubeRay into a head on the CPU pool (the real node, where it runs as a
    container) and the derived number of workers, one per GPU node; returns its name."""
    rcs = rayclusters(ns)
    assert len(rcs) == 1, f"expected one RayCluster, found {[r['metadata']['name'] for r in rcs]}"
    rc = rcs[0]
    name = rc["metadata"]["name"]
    assert name == spec["rayCluster"]["name"]
    conds = {c["type"]: c["status"] for c in rc["status"].get("conditions", [])}
    assert conds.get("HeadPodReady") == "True", conds
    assert rc["status"].get("readyWorkerReplicas") == spec["topology"]["workerReplicas"]
    pods = cluster_pods(ns, name)
    heads = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
    workers = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
    assert len(heads) == 1
    assert len(workers) == spec["topology"]["workerReplicas"]
    assert node_pool(heads[0]["spec"]["nodeName"]) == "cpu"
    assert heads[0]["spec"]["nodeName"] == tb.REAL_NODE
    worker_nodes = [w["spec"]["nodeName"] for w in workers]
    assert all(node_pool(n) == "gpu" for n in worker_nodes), worker_nodes
    assert len(set(worker_nodes)) == len(worker_nodes), "workers must be spread one per node"
    for w in workers:
        limits = w["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == str(spec["topology"]["gpusPerWorker"])
    return str(name)


def check_single_job(release: str, ns: str, spec: dict[str, Any]) -> dict[str, Any]:
    from miles_hooks.core import runspec as specmod
    from miles_hooks.steps import submit

    jobs = active_jobs(release, ns)
    assert len(jobs) == 1, f"expected exactly one active Ray job, found {[j['submission_id'] for j in jobs]}"
    job = jobs[0]
    assert job["submission_id"] == specmod.submission_id(spec)
    assert job["entrypoint"] == submit.build_entrypoint(spec)
    # Ray's job API does not return the entrypoint resources: check where they put the driver instead — on a
    # node with the custom resource (a GPU worker), never on the 0-CPU head.
    want = submit.entrypoint_resources(spec)
    assert want == {"gpu_node": 0.001}, want
    if job["status"] == "RUNNING" and job.get("driver_node_id"):
        nodes = {n["node_id"]: n.get("resources_total") or {} for n in tb.ray_nodes(ns)}
        assert "gpu_node" in nodes.get(job["driver_node_id"], {}), (job["driver_node_id"], nodes)
    assert job["runtime_env"]["env_vars"] == spec["runtimeEnv"]["envVars"]
    return job


def leftovers(release: str, ns: str) -> list[str]:
    sel = f"app.kubernetes.io/instance={release}"
    out = tb.kubectl("get", NAMESPACED_KINDS, "-n", ns, "-l", sel, "-o", "name").out.split()
    out += tb.kubectl("get", "clusterroles,clusterrolebindings", "-l", sel, "-o", "name").out.split()
    out += tb.kubectl("get", "pods", "-n", ns, "-o", "name").out.split()  # hook pods of any label
    return sorted(set(out))


def rfc3339(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def check_recreated(ns: str, cluster: str, before: set[str], wait_ready_end: float) -> None:
    """upgradeStrategy crd: KubeRay kept the cluster's name and replaced every pod, and wait-ready returned
    only once the new pods were all Ready (their Ready times are whole seconds, hence the floor)."""
    pods = [p for p in cluster_pods(ns, cluster) if not p["metadata"].get("deletionTimestamp")]
    assert pods and not {p["metadata"]["uid"] for p in pods} & before, "a pod of the old template survived"
    for p in pods:
        ready = next(c for c in p["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True", dump(p["status"])
        became_ready = rfc3339(ready["lastTransitionTime"])
        assert became_ready <= wait_ready_end, (
            f"wait-ready ended at {wait_ready_end:.1f}, before pod {p['metadata']['name']} was Ready "
            f"({ready['lastTransitionTime']})"
        )


HOLD = "testbed.miles.dev/hold"


def upgrade_holding_the_old_workers(helm_version: str, rel: str, ns: str, cluster: str, *extra: str) -> None:
    """`helm upgrade` while a finalizer keeps the old worker pods Terminating (and Ready, as on nodes that
    are slow to stop them) and the other GPU nodes are cordoned: the new workers cannot start until the
    old ones free their GPUs, as on a cluster whose GPU nodes are all in use. KubeRay's status counts the
    old Ready workers meanwhile, so the cluster looks ready once the new head is; the hold is released
    once wait-ready either says it waits for the cluster's pods or has finished, so a wait-ready that
    trusted the status alone finishes before the new workers exist, and check_recreated sees it."""
    workers = [
        p for p in cluster_pods(ns, cluster) if p["metadata"]["labels"]["ray.io/node-type"] == "worker"
    ]
    busy = {p["spec"]["nodeName"] for p in workers}
    nodes = tb.kget("nodes")["items"]
    gpu_nodes = {n["metadata"]["name"] for n in nodes if n["metadata"]["labels"].get(POOL_LABEL) == "gpu"}
    spare = sorted(gpu_nodes - busy)
    hold = json.dumps({"metadata": {"finalizers": [HOLD]}})
    unhold = json.dumps([{"op": "remove", "path": "/metadata/finalizers"}])
    for pod in workers:
        tb.kubectl("patch", "pod", pod["metadata"]["name"], "-n", ns, "--type=merge", "-p", hold)
    for node in spare:
        tb.kubectl("cordon", node)
    started = time.time()
    argv = tb.deploy_argv(helm_version, "upgrade", rel, ns, COLOCATED, *extra)
    helm = tb.Background(argv)

    def waiting_on_pods_or_done() -> bool:
        if any(tb.hook_steps([e]) == ["wait-ready"] for e in tb.journal(ns, since=started)):
            return True
        log = tb.kubectl("logs", "-n", ns, f"job/{rel}-wait-ready", check=False).out
        return "waiting for the pods of RayCluster" in log

    try:
        tb.wait_until("wait-ready to wait on the pods or finish", waiting_on_pods_or_done, timeout=420)
    finally:
        for pod in workers:
            tb.kubectl(
                "patch", "pod", pod["metadata"]["name"], "-n", ns, "--type=json", "-p", unhold, check=False
            )
        for node in spare:
            tb.kubectl("uncordon", node, check=False)
        finished = helm.finish(timeout=900)
    rc, out = tb.after_status_race(argv, *finished)
    assert rc == 0, out[-4000:]


@pytest.mark.parametrize(
    ("helm_version", "upgrade_method"),
    [("helm4", "crd"), ("helm3", "nameHash")],
    ids=["helm4-crd", "helm3-nameHash"],
)
def test_colocated_lifecycle(
    helm_version: str, upgrade_method: str, namespace: str, inputs_ready: Callable[..., Any]
) -> None:
    """Helm 4 with the default upgradeStrategy (method crd, rayCluster.operatorVersion 1.6.2); Helm 3 with
    the method the chart picks for a KubeRay 1.5 operator (nameHash), which the testbed's 1.6 runs too."""
    rel = "miles"
    ns = namespace
    operator = [] if upgrade_method == "crd" else ["--set-string", "rayCluster.operatorVersion=1.5.0"]
    inputs_ready(COLOCATED, rel, ns, operator)
    started = time.time()

    # install: hooks run in order, KubeRay reconciles the cluster, exactly one job with the derived entrypoint
    tb.deploy(helm_version, "install", rel, ns, COLOCATED, *operator)
    spec = tb.run_spec(ns, spec_fullname(ns, rel))
    steps = tb.hook_steps(tb.journal(ns, since=started))
    assert steps == HOOK_ORDER, steps
    assert all(e["exitCode"] == 0 for e in tb.journal(ns, since=started))
    cluster = check_cluster_shape(ns, spec)
    job = check_single_job(rel, ns, spec)

    # helm test: the status pod (job state, RayCluster health) and the report pod (run health) pass
    tb.helm(helm_version, "test", rel, "-n", ns, "--timeout", "5m")
    tb.check_hooks_api_use(
        ns, {"miles-preflight", "miles-prepare-data", "miles-wait-ready", "miles-test-status"}
    )

    assert ("upgradeStrategy" in rayclusters(ns)[0]["spec"]) == (upgrade_method == "crd")

    # upgrade with nothing changed: the same job, nothing new submitted, the same RayCluster and pods
    pods_before = {p["metadata"]["uid"] for p in cluster_pods(ns, cluster)}
    tb.deploy(helm_version, "upgrade", rel, ns, COLOCATED, *operator)
    jobs = tb.release_jobs(rel, ns)
    assert [j["submission_id"] for j in jobs] == [job["submission_id"]], jobs
    assert [r["metadata"]["name"] for r in rayclusters(ns)] == [cluster]
    assert {p["metadata"]["uid"] for p in cluster_pods(ns, cluster)} == pods_before

    # upgrade with a changed recipe: the RayCluster and its pods stay, so the head does: submit stops the old
    # job on it and submits one new. That job's reward is flat at 0.0 (the stand-in's testbed-flat-reward
    # marker): once it has logged checks.health.flatRewardRollouts of them, `helm test` fails on the report
    recipe = [*operator, "--set", "recipe.numRollout=150"]
    flat_marker = tb.host_path(spec["output"]["dir"]) / "testbed-flat-reward"
    flat_marker.write_text("")
    tb.deploy(helm_version, "upgrade", rel, ns, COLOCATED, *recipe)
    assert [r["metadata"]["name"] for r in rayclusters(ns)] == [cluster]
    assert {p["metadata"]["uid"] for p in cluster_pods(ns, cluster)} == pods_before
    job_recipe = check_single_job(rel, ns, tb.run_spec(ns, spec_fullname(ns, rel)))
    assert job_recipe["submission_id"] != job["submission_id"]
    old = {j["submission_id"]: j["status"] for j in tb.release_jobs(rel, ns)}
    assert old[job["submission_id"]] == "STOPPED", old
    check_degenerate_run_fails_helm_test(helm_version, rel, ns, spec)
    flat_marker.unlink()

    # rollback to the unchanged upgrade (revision 2): the post-rollback hooks make the job match the restored
    # run spec: the first job (STOPPED by the recipe's upgrade) runs again under its id on the same head, and
    # it is the release's only active job (the recipe's short one has stopped or finished)
    rolled_back = time.time()
    tb.rollback(helm_version, rel, ns, 2)
    assert tb.hook_steps(tb.journal(ns, since=rolled_back)) == ["wait-ready", "verify", "submit"]
    spec_back = tb.run_spec(ns, spec_fullname(ns, rel))
    assert spec_back["run"]["id"] == spec["run"]["id"]
    assert {p["metadata"]["uid"] for p in cluster_pods(ns, cluster)} == pods_before
    again = check_single_job(rel, ns, spec_back)
    assert again["submission_id"] == job["submission_id"]
    assert again["start_time"] / 1000 >= rolled_back, (again["start_time"], rolled_back)

    # upgrade with a changed worker template: new Ray pods (crd: the same RayCluster's, nameHash: a new
    # RayCluster's), a new head among them, whose fresh job table holds one job: the run's, submitted to the
    # new head under the same id (the run's identity covers the recipe, not the cluster's name or pods)
    head_before = head_pod(ns, cluster)["metadata"]["uid"]
    changed = [*recipe, "--set", "gpuPods.nccl.debug=INFO"]
    upgraded = time.time()
    if upgrade_method == "crd":
        upgrade_holding_the_old_workers(helm_version, rel, ns, cluster, *changed)
    else:
        tb.deploy(helm_version, "upgrade", rel, ns, COLOCATED, *changed)
    spec2 = tb.run_spec(ns, spec_fullname(ns, rel))
    if upgrade_method == "crd":
        assert spec2["rayCluster"]["name"] == cluster
        wait_ready = [e for e in tb.journal(ns, since=upgraded) if tb.hook_steps([e]) == ["wait-ready"]]
        assert len(wait_ready) == 1, wait_ready
        check_recreated(ns, cluster, pods_before, wait_ready[0]["end"])
        tb.wait_until(
            "the old pods to go",
            lambda: not {p["metadata"]["uid"] for p in cluster_pods(ns, cluster)} & pods_before,
            timeout=90,
        )
    else:
        assert spec2["rayCluster"]["name"] != cluster
    tb.wait_until(
        "the old RayCluster to go",
        lambda: [r["metadata"]["name"] for r in rayclusters(ns)] == [spec2["rayCluster"]["name"]],
        timeout=60,
    )
    check_cluster_shape(ns, spec2)
    assert head_pod(ns, spec2["rayCluster"]["name"])["metadata"]["uid"] != head_before
    job2 = check_single_job(rel, ns, spec2)
    assert job2["submission_id"] == job_recipe["submission_id"]
    assert [j["submission_id"] for j in tb.release_jobs(rel, ns)] == [job2["submission_id"]]

    # an upgrade to an image tag the nodes cannot pull: preflight's image check refuses it in seconds, before
    # any object changes, so the running job and its pods stay (the head pool is the real node, whose
    # containerd finds no such image)
    pods_now = {p["metadata"]["uid"] for p in cluster_pods(ns, spec2["rayCluster"]["name"])}
    bad = tb.deploy_argv(
        helm_version, "upgrade", rel, ns, COLOCATED, *changed, "--set", "image.tag=no-such-tag"
    )
    t0 = time.monotonic()
    refused = tb.run(bad, check=False)
    refused_s = time.monotonic() - t0
    said = refused.out + refused.err + tb.kubectl("logs", "-n", ns, f"job/{rel}-preflight", check=False).out
    assert refused.rc != 0 and "cannot be pulled on the ray-head pool" in said, said[-4000:]
    assert "image.tag" in said and "no-such-tag" in said, said[-4000:]
    assert refused_s < 120, f"the bad image took {refused_s:.0f}s to be refused"
    assert {p["metadata"]["uid"] for p in cluster_pods(ns, spec2["rayCluster"]["name"])} == pods_now
    # the same job, never stopped (it may have finished its 150 rollouts meanwhile)
    (same,) = [j for j in tb.release_jobs(rel, ns) if j["submission_id"] == job2["submission_id"]]
    assert same["start_time"] == job2["start_time"] and same["status"] in ("RUNNING", "SUCCEEDED"), same
    assert [j["submission_id"] for j in tb.release_jobs(rel, ns)] == [job2["submission_id"]]
    assert not tb.kget("pods", ns, selector="app.kubernetes.io/component=hook-image-check")["items"]

    # uninstall removes everything the release created, hook leftovers included
    tb.uninstall_cleanly(helm_version, rel, ns, leftovers)


def check_degenerate_run_fails_helm_test(helm_version: str, rel: str, ns: str, spec: dict[str, Any]) -> None:
    from miles_hooks.steps.report import events

    flat_n = int(spec["checks"]["health"]["flatRewardRollouts"])
    board = tb.host_path(spec["output"]["tensorboardDir"])

    def trailing_zeros() -> bool:
        rewards = [p.value for p in events.scan(board).points(events.REWARD)]
        return len(rewards) >= flat_n and all(r == 0.0 for r in rewards[-flat_n:])

    tb.wait_until(f"{flat_n} zero-reward rollouts in {board}", trailing_zeros, timeout=180, interval=2)
    res = tb.helm(helm_version, "test", rel, "-n", ns, "--timeout", "5m", check=False)
    said = res.out + res.err + tb.kubectl("logs", "-n", ns, f"pod/{rel}-test-report", check=False).out
    assert res.rc != 0, said[-3000:]
    assert "verdict        : DEGENERATE" in said, said[-3000:]
    assert f"rollout/raw_reward is 0.0 for the last {flat_n} rollouts" in said, said[-3000:]


def spec_fullname(ns: str, release: str) -> str:
    cms = tb.kget("configmaps", ns, selector=f"app.kubernetes.io/instance={release}")["items"]
    names = [c["metadata"]["name"] for c in cms if c["metadata"]["name"].endswith("-run")]
    assert len(names) == 1, names
    return str(names[0][: -len("-run")])


def test_disaggregated_install(namespace: str, inputs_ready: Callable[..., Any]) -> None:
    """Under Helm 3 only: it differs from the colocated lifecycle (run under both) in what is rendered, and
    both Helms render the same objects (tests/chart); Helm 4 installs two workers in the MoE scenario."""
    helm_version = "helm3"
    rel = "miles-dis"
    inputs_ready(DISAGGREGATED, rel, namespace)
    tb.deploy(helm_version, "install", rel, namespace, DISAGGREGATED)
    spec = tb.run_spec(namespace, spec_fullname(namespace, rel))
    assert spec["topology"]["workerReplicas"] == 2
    check_cluster_shape(namespace, spec)
    check_single_job(rel, namespace, spec)
    tb.uninstall_cleanly(helm_version, rel, namespace, leftovers)


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1)[:4000]
