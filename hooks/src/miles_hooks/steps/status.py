"""status: the run's Ray job state, its recent log lines and the cluster's health (for `helm test`).

Exit 0 when the GCS is healthy and the job exists and is PENDING, RUNNING or SUCCEEDED; exit 1 when the
job is missing, FAILED or STOPPED, or the cluster is unhealthy.

A job that submit recorded (the provenance file) but the head does not know was lost with an earlier head:
Ray keeps its job table in the head's GCS, so a replaced head pod starts with none, and the run's driver died
with the old cluster. In mode rayCluster nothing resubmits it by itself; status says so, with the latest
checkpoint it resumes from and the one command that resubmits it (a rollback to the current revision runs
the post-rollback submit, which finds the job absent and submits it again under the same id). When the
lost job's driver saved the run's last checkpoint before it ended, the run is finished, not lost: status
says so and passes, and the same submit submits nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from miles_hooks.core import fsutil, log, rayjobs, resume
from miles_hooks.core import kube as kube_api
from miles_hooks.core.entrypoint import driver_log_glob
from miles_hooks.core.errors import HookError
from miles_hooks.core.pod_diagnosis import diagnose_cluster_pods
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
        "lostJob": None,
        "driverLogs": driver_log_glob(spec.raw),
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
        else:
            result["lostJob"] = lost_job(spec)
    auto = kube is None
    if auto:
        kube = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and bool(spec.raw["rayCluster"]["enabled"])
    if kube:
        try:
            result["rayCluster"] = read_cluster_health(spec)
            if result["rayCluster"]["ready"] is False:
                # a run waiting for capacity: the scheduler's own reason, per pod
                result["rayCluster"]["pods"] = diagnose_cluster_pods(kube_api.connect(), spec)
        except Exception as exc:
            if not auto:
                raise
            why = exc.message if isinstance(exc, HookError) else f"{type(exc).__name__}: {exc}"
            result["rayCluster"] = {"ready": None, "reasons": [f"not checked: {why}"[:300]]}
    return result


def lost_job(spec: RunSpec) -> dict[str, Any] | None:
    """What submit recorded of this run's job (None when it recorded none, or the volume is not mounted):
    when, the checkpoint a new submission resumes from, and the command that makes it."""
    raw = spec.raw
    record = fsutil.read_json(raw["output"]["provenanceFile"])
    if not isinstance(record, dict) or record.get("submissionId") != spec.submission_id():
        return None
    release = raw["release"]
    if raw["mode"] == "rayJob":
        command = f"kubectl get rayjob -n {release['namespace']} (KubeRay retries the run on a new cluster)"
    else:
        command = f"helm rollback {release['name']} {release['revision']} -n {release['namespace']}"
    finished = resume.finished_here(raw)
    return {
        "submittedAt": record.get("submittedAt"),
        "latestCheckpoint": resume.latest_iteration(Path(raw["output"]["checkpointDir"])),
        "resumeCommand": command,
        "finished": None if finished is None else resume.describe_finished(raw, finished),
    }


def problems(result: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if not result["gcsHealthy"]:
        out.append(f"Ray GCS not healthy: {result['gcsDetail']}")
    job = result["job"]
    lost = result.get("lostJob")
    if result["gcsHealthy"] and job is None and lost and not lost.get("finished"):
        latest = lost["latestCheckpoint"]
        start = "from the start (no complete checkpoint)" if latest is None else f"from checkpoint {latest}"
        out.append(
            f"Ray job {result['submissionId']} is not on the Ray head, though submit created it at "
            f"{lost['submittedAt']}: the head was replaced since (a new head starts with an empty job table) "
            f"and the run stopped with the old one. Resubmit it under the same id, {start}: "
            f"{lost['resumeCommand']}. Its driver logs: {result['driverLogs']}"
        )
    elif result["gcsHealthy"] and job is None and not lost:
        out.append(f"no Ray job {result['submissionId']} (expected the submit hook to have created it)")
    elif job is not None and job["state"] in ("FAILED", "STOPPED"):
        out.append(
            f"Ray job {result['submissionId']} is {job['state']}: {job.get('message') or ''}".rstrip(": ")
        )
    cluster = result.get("rayCluster")
    if isinstance(cluster, dict) and cluster.get("ready") is False:
        out.append(
            "RayCluster not ready: "
            + "; ".join([*(cluster.get("reasons") or ["unknown"]), *cluster.get("pods", [])])
        )
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
    lost = result.get("lostJob")
    if lost:
        lines.append(f"submitted     : {lost['submittedAt']} (provenance); lost with an earlier Ray head")
        if lost.get("finished"):
            lines.append(f"finished      : {lost['finished']}")
        else:
            lines.append(f"resume with   : {lost['resumeCommand']}")
    if result.get("driverLogs"):
        lines.append(f"driver logs   : {result['driverLogs']}")
    cluster = result.get("rayCluster")
    if isinstance(cluster, dict):
        ready = cluster.get("ready")
        word = "ready" if ready is True else ("NOT READY" if ready is False else "unknown")
        lines.append(f"raycluster    : {word} " + "; ".join(cluster.get("reasons") or []))
        lines.extend(f"  {line}" for line in cluster.get("pods", []))
    if result["logTail"]:
        lines.append("recent job log:")
        lines.extend(f"  | {line}" for line in result["logTail"])
    return "\n".join(lines)
