"""run-job: the submitter pod of the RayJob (mode rayJob): check the cluster, submit once, follow the job.

KubeRay starts this pod when an attempt's RayCluster is ready, with the job id it polls in
``RAY_JOB_SUBMISSION_ID`` (the RayJob's ``spec.jobId``, the run spec's ``submit.submissionId``) and that
attempt's dashboard
in ``RAY_DASHBOARD_ADDRESS``: the cluster's own head Service, whose name changes with each attempt. (The
Service KubeRay makes in the RayJob's name selects ``app.kubernetes.io/name=kuberay``, a label the chart's
Ray pods do not carry: it never has an endpoint.) The steps:

1. The job already on this cluster (a retried submitter pod): follow it; its GPUs are busy, so verify's
   GPU checks would only measure the run.
2. Otherwise ``verify`` (head, workers, Ray version, GPU and NCCL checks when ``checks.gpu.enabled``):
   a failure exits 1, so the pod is retried and, after ``rayJob.submitter.backoffLimit``, KubeRay counts a
   failed attempt and retries the run on a new cluster (``rayJob.backoffLimit``).
3. ``submit`` under the id; on a new attempt ``--load`` resumes from the latest checkpoint.
4. The job's log until it ends. Its outcome is KubeRay's to read from Ray: a job that failed ends this pod
   with 0, and KubeRay retries the run; only a submission that could not be made exits non-zero.

Steps never import each other: the command line strings this module's parts with verify's and submit's.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from typing import Any

from miles_hooks.core import log, rayjobs
from miles_hooks.core.errors import BadInput, CheckFailed
from miles_hooks.core.runspec import RunSpec

LOG = log.get("run-job")

KUBERAY_JOB_ID_ENV = "RAY_JOB_SUBMISSION_ID"
KUBERAY_DASHBOARD_ENV = "RAY_DASHBOARD_ADDRESS"


def on_attempt_cluster(spec: RunSpec, environ: dict[str, str]) -> RunSpec:
    """The spec with this attempt's dashboard (from KubeRay), which verify, submit and the provenance use."""
    address = environ.get(KUBERAY_DASHBOARD_ENV, "").strip()
    if not address:
        raise BadInput(
            f"run-job: {KUBERAY_DASHBOARD_ENV} is not set; expected KubeRay's submitter env (this step runs "
            "as the RayJob's submitter pod, mode rayJob)"
        )
    url = address if "://" in address else f"http://{address}"
    raw = copy.deepcopy(spec.raw)
    raw["rayCluster"]["dashboardUrl"] = url
    raw["rayCluster"]["headService"] = url.split("://", 1)[1].split(".", 1)[0].split(":", 1)[0]
    return dataclasses.replace(spec, raw=raw)


def job_id(spec: RunSpec, environ: dict[str, str]) -> str:
    """The run spec's job id, checked against the one KubeRay gave this pod."""
    raw = spec.raw
    if raw["mode"] != "rayJob":
        raise BadInput(
            f"run-job: expected a run spec of mode rayJob (the RayJob's submitter), found {raw['mode']}"
        )
    sid = spec.submission_id()
    given = environ.get(KUBERAY_JOB_ID_ENV, "")
    if given and given != sid:
        raise CheckFailed(
            f"run-job: KubeRay asks for job {given} ({KUBERAY_JOB_ID_ENV}) but the run spec names "
            f"{sid} (the run spec's submit.submissionId): this RayJob belongs to an earlier run of the "
            "release, whose run spec has been replaced; Helm deletes it, and the new RayJob runs the new spec"
        )
    return sid


def follow(cl: Any, sid: str) -> str:
    """Print the job's log as Ray streams it, then return the job's final state."""

    async def tail() -> None:
        async for chunk in cl.tail_job_logs(sid):
            print(chunk, end="", flush=True)

    try:
        asyncio.run(tail())
    except Exception as exc:  # the stream is a convenience; the state below is what counts
        LOG.warning(
            "the job's log stream ended early; waiting for the job to end",
            extra={"fields": {"submission_id": sid, "error": str(exc)[:200]}},
        )
    return rayjobs.wait_terminal(cl, sid, timeout=float("inf"))


@dataclasses.dataclass(frozen=True)
class Attempt:
    """This attempt's spec (its cluster's dashboard), the job id, and whether the job is already there."""

    spec: RunSpec
    submission_id: str
    submitted: bool


def attempt(spec: RunSpec, environ: dict[str, str]) -> Attempt:
    sid = job_id(spec, environ)
    spec = on_attempt_cluster(spec, environ)
    LOG.info(
        "this attempt's cluster", extra={"fields": {"dashboard": spec.dashboard_url, "submission_id": sid}}
    )
    existing = rayjobs.get_job(rayjobs.client(spec.dashboard_url), sid)
    if existing is None:
        LOG.info("checking the cluster before the run", extra={"fields": {"submission_id": sid}})
    else:
        LOG.info(
            "the job is already on this cluster (a retried submitter): following it",
            extra={"fields": {"submission_id": sid, "state": rayjobs.status_name(existing.status)}},
        )
    return Attempt(spec, sid, existing is not None)


def follow_to_end(run: Attempt) -> dict[str, Any]:
    """The job's log until it ends; its final state and Ray's message."""
    cl = rayjobs.client(run.spec.dashboard_url)
    LOG.info("following the job's log", extra={"fields": {"submission_id": run.submission_id}})
    state = follow(cl, run.submission_id)
    job = rayjobs.get_job(cl, run.submission_id)
    message = str(getattr(job, "message", "") or "")
    retried = (
        "; KubeRay retries a failed run on a new cluster (rayJob.backoffLimit), from the latest checkpoint"
    )
    LOG.info(
        "the job ended" + ("" if state == "SUCCEEDED" else retried),
        extra={"fields": {"submission_id": run.submission_id, "state": state, "message": message[:300]}},
    )
    return {"submissionId": run.submission_id, "state": state, "message": message}
