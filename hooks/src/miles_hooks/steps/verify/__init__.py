"""verify: through Ray, is the cluster what the run spec says it is?

Checks (pure function ``node_problems`` on the dashboard's node list, then one Ray task per worker):
- exactly one alive head; it advertises 0 CPUs and 0 GPUs (``rayCluster.headGpus: 0``, keeps CUDA actors
  off it) or at least ``headGpus`` GPUs;
- ``topology.workerReplicas`` alive workers (waited for up to ``JOIN_WAIT_SECONDS``), each carrying the
  entrypoint custom resource (``gpu_node``) and ``topology.gpusPerWorker`` GPUs; no alive non-head node
  without it;
- the cluster's Ray version equals ``rayCluster.rayVersion``;
- a task pinned to each worker (a short Ray job shipping this package with ``py_modules``) gets the
  worker's GPUs, and runs ``miles_hooks.core.gpu.check_node`` when ``checks.gpu.enabled``.
When a job of this release is already running (an upgrade), its GPUs are busy: the per-worker task then
runs without GPUs and the GPU checks are skipped with a warning.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from pathlib import Path
from typing import Any

from miles_hooks.core import log, rayjobs
from miles_hooks.core.errors import CheckFailed
from miles_hooks.core.raycluster import gcs_health_settled
from miles_hooks.core.runspec import RunSpec
from miles_hooks.core.runspec_types import RawSpec

LOG = log.get("verify")

RESULT_PREFIX = "MILES_VERIFY_RESULT "  # the driver's one result line (driver.py)
# How long verify waits for the GPU workers to join the head before it counts them. Their pods are Ready and
# the GCS healthy when it starts, but after a head replacement the workers' raylets are still attached to
# the lost head: Ray ends a raylet that cannot reach its GCS after 60 s (gcs_rpc_server_reconnect_timeout_s),
# then the container restarts and joins the new head in seconds.
JOIN_WAIT_SECONDS = 150.0


def custom_resource(raw: RawSpec) -> str:
    names = [k for k in raw["submit"]["entrypointResources"] if k not in ("CPU", "GPU", "memory")]
    return names[0] if names else "gpu_node"


def node_problems(nodes: list[dict[str, Any]], raw: RawSpec) -> tuple[list[str], list[dict[str, Any]]]:
    """(problems, worker nodes) from dicts with node_id, state, is_head_node, resources_total, node_ip."""
    problems: list[str] = []
    alive = [n for n in nodes if n.get("state") == "ALIVE"]
    heads = [n for n in alive if n.get("is_head_node")]
    res_name = custom_resource(raw)
    topo = raw["topology"]
    head_gpus = int(raw["rayCluster"]["headGpus"])
    if len(heads) != 1:
        problems.append(f"expected exactly one alive Ray head, found {len(heads)}")
    for head in heads:
        total = head.get("resources_total") or {}
        cpus, gpus = float(total.get("CPU", 0)), float(total.get("GPU", 0))
        if head_gpus == 0 and (cpus != 0 or gpus != 0):
            problems.append(
                f"head {head.get('node_ip')} advertises CPU={cpus:g} GPU={gpus:g}; expected 0 and 0 "
                '(rayStartParams num-cpus/num-gpus "0") so that no CUDA-needing actor lands on it'
            )
        if head_gpus > 0 and gpus < head_gpus:
            problems.append(
                f"head {head.get('node_ip')} advertises GPU={gpus:g}; expected {head_gpus} "
                "(rayCluster.head.gpus)"
            )
    workers = [n for n in alive if (n.get("resources_total") or {}).get(res_name, 0) > 0]
    for n in alive:
        if not n.get("is_head_node") and n not in workers:
            problems.append(
                f"node {n.get('node_ip')} has no {res_name!r} resource; every GPU worker must start "
                f"with --resources '{{\"{res_name}\": 1}}' (the job driver needs it)"
            )
    if len(workers) != topo["workerReplicas"]:
        problems.append(
            f"expected {topo['workerReplicas']} alive worker(s) with {res_name!r} "
            f"(the run spec's topology.workerReplicas), found {len(workers)}"
        )
    for w in workers:
        gpus = float((w.get("resources_total") or {}).get("GPU", 0))
        if gpus != topo["gpusPerWorker"]:
            problems.append(
                f"worker {w.get('node_ip')} advertises GPU={gpus:g}; expected {topo['gpusPerWorker']} "
                "(topology.gpusPerWorker)"
            )
    return problems, workers


def version_problems(cluster_version: str | None, raw: RawSpec) -> list[str]:
    want = raw["rayCluster"]["rayVersion"]
    if cluster_version != want:
        return [
            f"the cluster runs Ray {cluster_version}, the chart declared rayVersion {want}; set "
            "rayCluster.rayVersion to the miles image's Ray (or pin an image with that Ray)"
        ]
    return []


def probe_problems(
    results: dict[str, Any],
    workers: list[dict[str, Any]],
    raw: RawSpec,
    used_gpus: bool,
    gpu_check: bool,
) -> list[str]:
    problems: list[str] = []
    want = int(raw["topology"]["gpusPerWorker"])
    for w in workers:
        where = f"worker {w.get('node_ip')} ({str(w.get('node_id'))[:12]})"
        r = results.get(str(w.get("node_id")))
        if not isinstance(r, dict):
            problems.append(f"{where}: no result from the probe task")
            continue
        if r.get("error"):
            problems.append(f"{where}: probe task failed: {r['error']}")
            continue
        if used_gpus and len(r.get("gpu_ids") or []) != want:
            problems.append(f"{where}: the task got GPUs {r.get('gpu_ids')}, expected {want}")
        if gpu_check:
            report = r.get("gpu_check") or {}
            if not report.get("ok"):
                problems.append(f"{where}: GPU checks failed: {report.get('verdict') or 'no report'}")
    return problems


def joined_nodes(dashboard: str, raw: RawSpec, wait: float) -> list[dict[str, Any]]:
    """The cluster's nodes once as many GPU workers as the run spec has are alive in Ray, or as they are
    after ``wait`` seconds (then ``node_problems`` names the shortfall)."""
    expected = int(raw["topology"]["workerReplicas"])
    res_name = custom_resource(raw)
    deadline = time.monotonic() + wait
    while True:
        nodes = list_nodes(dashboard)
        joined = sum(
            1
            for n in nodes
            if n.get("state") == "ALIVE" and (n.get("resources_total") or {}).get(res_name, 0) > 0
        )
        left = deadline - time.monotonic()
        if joined >= expected or left <= 0:
            return nodes
        LOG.info(
            "waiting for the GPU workers to join the Ray head",
            extra={"fields": {"joined": joined, "expected": expected, "seconds_left": round(left)}},
        )
        time.sleep(min(5.0, left))


def list_nodes(dashboard: str) -> list[dict[str, Any]]:
    # ray is imported on use: the CLI that imports this step also runs convert in the miles image
    from ray.util.state import list_nodes as ray_list_nodes  # noqa: PLC0415

    out = []
    for n in ray_list_nodes(address=dashboard, detail=True, limit=10000):
        d = n if isinstance(n, dict) else (dataclasses.asdict(n) if dataclasses.is_dataclass(n) else vars(n))
        out.append({k: d.get(k) for k in ("node_id", "node_ip", "state", "is_head_node", "resources_total")})
    return out


def run_probe(
    spec: RunSpec, cl: Any, workers: list[dict[str, Any]], use_gpus: bool, gpu_check: bool, timeout: float
) -> dict[str, Any]:
    raw = spec.raw
    params = {
        "workers": [{"node_id": w["node_id"], "ip": w.get("node_ip")} for w in workers],
        "gpusPerWorker": raw["topology"]["gpusPerWorker"],
        "useGpus": use_gpus,
        "gpuCheck": gpu_check,
        "numNodes": len(workers),
        "masterPort": 29500 + secrets.randbelow(20000),
        "timeout": timeout,
        "spec": raw,
    }
    package = str(Path(__file__).resolve().parents[2])  # the miles_hooks directory
    sid = f"{raw['release']['fullname'][:30]}-verify-{int(time.time())}-{secrets.token_hex(2)}"
    rayjobs.submit_job(
        cl,
        entrypoint="python3 -m miles_hooks.steps.verify.driver",
        submission_id=sid,
        runtime_env={"py_modules": [package], "env_vars": {"MILES_VERIFY_PARAMS": json.dumps(params)}},
        metadata={"miles.verifyFor": spec.release, "miles.namespace": spec.namespace},
    )
    LOG.info(
        "probe job submitted",
        extra={
            "fields": {
                "submission_id": sid,
                "workers": len(workers),
                "gpus": use_gpus,
                "gpu_check": gpu_check,
            }
        },
    )
    try:
        state = rayjobs.wait_terminal(cl, sid, timeout + 120)
        logs = cl.get_job_logs(sid)
    finally:
        try:
            if rayjobs.status_name(cl.get_job_status(sid)) not in rayjobs.TERMINAL:
                cl.stop_job(sid)
                rayjobs.wait_terminal(cl, sid, 60)
            rayjobs.delete_settled(cl, spec.dashboard_url, sid)
        except Exception as exc:
            LOG.warning(
                "could not delete the probe job",
                extra={"fields": {"submission_id": sid, "error": str(exc)[:200]}},
            )
    for line in reversed(logs.splitlines()):
        if line.startswith(RESULT_PREFIX):
            parsed: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            return parsed
    tail = "\n".join(logs.splitlines()[-15:])
    raise CheckFailed(
        f"the verify probe job {sid} ended {state} without a result; its log ends with:\n{tail}"
    )


def run(spec: RunSpec, timeout: float | None = None, join_wait: float = JOIN_WAIT_SECONDS) -> dict[str, Any]:
    raw = spec.raw
    limit = float(timeout if timeout is not None else min(900, raw["checks"]["waitReadyTimeoutSeconds"]))
    dashboard = spec.dashboard_url
    healthy, detail = gcs_health_settled(dashboard)
    if not healthy:
        raise CheckFailed(f"Ray GCS not healthy: {detail} (run wait-ready first)")
    cl = rayjobs.client(dashboard)  # first: a refused token is reported as such
    version = rayjobs.dashboard_json(dashboard + "/api/version").get("ray_version")
    problems = version_problems(version, raw)
    node_list = (
        list_nodes(dashboard) if raw["mode"] == "singleNode" else joined_nodes(dashboard, raw, join_wait)
    )
    if raw["mode"] == "singleNode":
        # the pod-local Ray of the single-node Job: one node with all the GPUs, no head/worker split
        workers = [n for n in node_list if n.get("state") == "ALIVE"]
    else:
        found, workers = node_problems(node_list, raw)
        problems += found
    busy = [
        j.submission_id
        for j in cl.list_jobs()
        if (j.metadata or {}).get("miles.release") == spec.release
        and rayjobs.status_name(j.status) not in rayjobs.TERMINAL
    ]
    gpu_check = bool(raw["checks"]["gpu"]["enabled"])
    use_gpus = not busy
    if busy:
        LOG.warning(
            "a job of this release holds the GPUs; probing without GPUs and skipping GPU checks",
            extra={"fields": {"jobs": busy}},
        )
        gpu_check = False
    results: dict[str, Any] = {}
    if workers:
        results = run_probe(spec, cl, workers, use_gpus, gpu_check, limit)
        problems += probe_problems(results, workers, raw, use_gpus, gpu_check)
    summary = {
        "rayVersion": version,
        "nodes": len(node_list),
        "workers": len(workers),
        "gpusProbed": use_gpus,
        "gpuCheck": gpu_check,
        "problems": problems,
        "probe": results,
    }
    if problems:
        raise CheckFailed("the Ray cluster does not match the run spec:", problems)
    LOG.info(
        "cluster verified",
        extra={
            "fields": {
                "ray": version,
                "workers": len(workers),
                "gpu_check": gpu_check,
                "gpus_probed": use_gpus,
            }
        },
    )
    return summary
