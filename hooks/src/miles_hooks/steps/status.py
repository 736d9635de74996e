"""status: the run's Ray job state, its recent log lines and the cluster's health (for `helm test`).

Exit 0 when the GCS is healthy and the job exists and is PENDING, RUNNING or SUCCEEDED; exit 1 when the
job is missing, FAILED or STOPPED, or the cluster is unhealthy.
"""

from __future__ import annotations

import os
from typing import Any

from miles_hooks.core import log, rayjobs
from miles_hooks.core.errors import HookError
from miles_hooks.core.raycluster import gcs_health_settled, read_cluster_health
from miles_hooks.core.runspec import RunSpec

LOG = log.get("status")

DEFAULT_LOG_LINES = 20


def tail(text: str, lines: int) -> list[str]:
    if lines <= 0:
        return []
    return text.splitlines()[-lines:]


def collect(
    spec: RunSpec, log_lines: int = DEFAULT_LOG_LINES, kube: bool | None = False, settle: float = 20.0
) -> dict[str, Any]:
    """Gather the run's state. ``kube``: True reads the RayCluster (errors fail), None = auto: read it
    when running in a pod and the release has a RayCluster, noting (not failing) when that is denied."""
    sid = spec.submission_id()
    healthy, detail = gcs_health_settled(spec.dashboard_url, settle)
    result: dict[str, Any] = {
        "submissionId": sid,
        "gcsHealthy": healthy,
        "gcsDetail": detail,
        "job": None,
        "logTail": [],
        "rayCluster": None,
    }
    if healthy:
        cl = rayjobs.client(spec.dashboard_url, attempts=1)
        job = rayjobs.get_job(cl, sid)
        if job is not None:
            result["job"] = {
                "state": rayjobs.status_name(job.status),
                "message": job.message,
                "entrypoint": job.entrypoint,
                "startTime": job.start_time,
                "endTime": job.end_time,
            }
            try:
                result["logTail"] = tail(cl.get_job_logs(sid), log_lines)
            except RuntimeError as exc:
                result["logTail"] = [f"(logs unavailable: {exc})"]
    auto = kube is None
    if auto:
        kube = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and bool(spec.raw["rayCluster"]["enabled"])
    if kube:
        try:
            result["rayCluster"] = read_cluster_health(spec)
        except Exception as exc:
            if not auto:
                raise
            why = exc.message if isinstance(exc, HookError) else f"{type(exc).__name__}: {exc}"
            result["rayCluster"] = {"ready": None, "reasons": [f"not checked: {why}"[:300]]}
    return result


def problems(result: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if not result["gcsHealthy"]:
        out.append(f"Ray GCS not healthy: {result['gcsDetail']}")
    job = result["job"]
    if result["gcsHealthy"] and job is None:
        out.append(f"no Ray job {result['submissionId']} (expected the submit hook to have created it)")
    elif job is not None and job["state"] in ("FAILED", "STOPPED"):
        out.append(
            f"Ray job {result['submissionId']} is {job['state']}: {job.get('message') or ''}".rstrip(": ")
        )
    cluster = result.get("rayCluster")
    if isinstance(cluster, dict) and cluster.get("ready") is False:
        out.append("RayCluster not ready: " + "; ".join(cluster.get("reasons") or ["unknown"]))
    return out


def render(result: dict[str, Any]) -> str:
    job = result["job"] or {}
    lines = [
        f"submission id : {result['submissionId']}",
        f"ray gcs       : {'healthy' if result['gcsHealthy'] else 'UNHEALTHY'} ({result['gcsDetail']})",
        f"job state     : {job.get('state', 'absent')}",
    ]
    if job.get("message"):
        lines.append(f"job message   : {job['message']}")
    cluster = result.get("rayCluster")
    if isinstance(cluster, dict):
        ready = cluster.get("ready")
        word = "ready" if ready is True else ("NOT READY" if ready is False else "unknown")
        lines.append(f"raycluster    : {word} " + "; ".join(cluster.get("reasons") or []))
    if result["logTail"]:
        lines.append("recent job log:")
        lines.extend(f"  | {line}" for line in result["logTail"])
    return "\n".join(lines)
