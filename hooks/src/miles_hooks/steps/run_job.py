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

The job's driver log is kept on the shared volume by its entrypoint; this pod's own lines too
(``keep_log``), since KubeRay deletes a failed attempt's submitter pod with its cluster.

A lost Ray head (its pod deleted, its node gone) takes Ray's job table with it. While KubeRay starts a new
head this pod waits for it to answer (``HEAD_WAIT_SECONDS``); the new head does not know the job, and the
run's driver goes with the old cluster's workers, so the job is LOST: this pod ends with 0 and KubeRay
counts a failed attempt ("Submitter completed but Ray job not found in RayCluster") and starts the next on
a new cluster, which resumes from the latest checkpoint.

A driver may outlive its head long enough to save the run's last checkpoint (a worker's raylet waits 60 s
for a new GCS). The next attempt then finds the run finished by this run's own job (``resume.finished_here``):
it trains nothing, and submits under the id a job that only says so, so that Ray and KubeRay report the
RayJob Complete instead of failing every attempt on a run that is done.

Steps never import each other: the command line strings this module's parts with verify's and submit's.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from miles_hooks.core import export_jobs, kube, log, rayjobs, resume
from miles_hooks.core.errors import BadInput, CheckFailed, HookError
from miles_hooks.core.runspec import RunSpec

LOG = log.get("run-job")

KUBERAY_JOB_ID_ENV = "RAY_JOB_SUBMISSION_ID"
KUBERAY_DASHBOARD_ENV = "RAY_DASHBOARD_ADDRESS"
# how long a head that stopped answering may take to come back (KubeRay replaces a deleted head pod in well
# under a minute; an image pull on a new node takes longer)
HEAD_WAIT_SECONDS = 600.0


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


def keep_log(spec: RunSpec, environ: dict[str, str], now: float | None = None) -> str | None:
    """This attempt's own lines (the checks, the submission, a lost or finished job) also go to
    ``<submit.logDir>/submitter-<id>-<UTC start>.log`` on the shared volume: KubeRay deletes a failed
    attempt's submitter pod with its cluster, and with it the pod's log. None when the directory cannot be
    written (submit then says why)."""
    raw = spec.raw
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    sid = environ.get(KUBERAY_JOB_ID_ENV) or spec.submission_id()
    path = Path(raw["submit"]["logDir"]) / f"submitter-{sid}-{stamp}.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        log.also_to_file(str(path))
    except OSError as exc:
        LOG.warning(
            "this attempt's submitter log is not kept on the shared volume",
            extra={"fields": {"path": str(path), "error": exc.strerror}},
        )
        return None
    LOG.info(
        "this attempt's submitter log is also kept on the shared volume",
        extra={"fields": {"path": str(path)}},
    )
    return str(path)


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
    return await_end(cl, sid)


def await_end(
    cl: Any,
    sid: str,
    head_wait: float = HEAD_WAIT_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """The job's final state, or LOST when the head, answering again, no longer knows the job. A head that
    does not answer is waited for up to ``head_wait`` seconds (KubeRay replacing a lost head pod)."""
    silent_since: float | None = None
    delay = 0.5
    while True:
        try:
            job = rayjobs.get_job(cl, sid)
        except (OSError, CheckFailed) as exc:  # requests' ConnectionError is an OSError
            now = clock()
            if silent_since is None:
                silent_since = now
                LOG.warning(
                    "the Ray head does not answer; waiting for it (KubeRay replaces a lost head pod)",
                    extra={"fields": {"submission_id": sid, "error": str(exc)[:200]}},
                )
            elif now - silent_since >= head_wait:
                raise CheckFailed(
                    f"run-job: the Ray head has not answered for {head_wait:.0f}s while following job {sid} "
                    f"({str(exc)[:200]}); expected KubeRay to replace a lost head within that time. This pod "
                    "exits 1: KubeRay retries it (rayJob.submitter.backoffLimit), then the run on a new "
                    "cluster (rayJob.backoffLimit)"
                ) from exc
            sleep(2.0)
            continue
        if silent_since is not None:
            LOG.info("the Ray head answers again", extra={"fields": {"submission_id": sid}})
            silent_since = None
        if job is None:
            return "LOST"
        state = rayjobs.status_name(job.status)
        if state in rayjobs.TERMINAL:
            return state
        sleep(delay)
        delay = min(delay * 1.5, 5.0)


@dataclasses.dataclass(frozen=True)
class Attempt:
    """This attempt's spec (its cluster's dashboard), the job id, and whether the job is already there."""

    spec: RunSpec
    submission_id: str
    submitted: bool
    finished: int | None = None  # the last checkpoint, when an earlier attempt's job finished the run


def attempt(spec: RunSpec, environ: dict[str, str]) -> Attempt:
    sid = job_id(spec, environ)
    spec = on_attempt_cluster(spec, environ)
    LOG.info(
        "this attempt's cluster", extra={"fields": {"dashboard": spec.dashboard_url, "submission_id": sid}}
    )
    existing = rayjobs.get_job(rayjobs.client(spec.dashboard_url), sid)
    if existing is not None:
        LOG.info(
            "the job is already on this cluster (a retried submitter): following it",
            extra={"fields": {"submission_id": sid, "state": rayjobs.status_name(existing.status)}},
        )
        return Attempt(spec, sid, submitted=True)
    finished = resume.finished_here(spec.raw)
    if finished is not None:
        LOG.info(
            resume.describe_finished(spec.raw, finished) + " (an earlier attempt's job saved it, then lost "
            "its Ray head before Ray could record the end)",
            extra={"fields": {"submission_id": sid, "latest_iteration": finished}},
        )
        return Attempt(spec, sid, submitted=False, finished=finished)
    LOG.info("checking the cluster before the run", extra={"fields": {"submission_id": sid}})
    return Attempt(spec, sid, submitted=False)


def close_finished(run: Attempt, latest: int, metadata: dict[str, str]) -> None:
    """Submit under the run's id a job that only says the run finished: KubeRay calls a RayJob Complete
    from its job's state, and this attempt has no other job to show it."""
    said = resume.describe_finished(run.spec.raw, latest)
    rayjobs.submit_job(
        rayjobs.client(run.spec.dashboard_url),
        entrypoint="echo " + shlex.quote(f"miles-hooks run-job: {said}; this job records the run's end"),
        submission_id=run.submission_id,
        metadata=metadata,
    )
    LOG.info(
        "submitted a job that records the run's end, so that the RayJob ends Complete",
        extra={"fields": {"submission_id": run.submission_id}},
    )


def follow_to_end(run: Attempt) -> dict[str, Any]:
    """The job's log until it ends; its final state and Ray's message."""
    cl = rayjobs.client(run.spec.dashboard_url)
    LOG.info("following the job's log", extra={"fields": {"submission_id": run.submission_id}})
    state = follow(cl, run.submission_id)
    if state == "LOST":
        raw = run.spec.raw
        latest = resume.latest_iteration(Path(raw["output"]["checkpointDir"]))
        start = "the start (no complete checkpoint)" if latest is None else f"checkpoint {latest}"
        message = (
            f"Ray job {run.submission_id} is no longer on the Ray head: the head was replaced (a new head "
            "starts with an empty job table) and the run's driver ends with the old cluster. This attempt "
            "ends; KubeRay counts it failed (Submitter completed but Ray job not found in RayCluster) and "
            f"starts the next on a new cluster (rayJob.backoffLimit), which resumes from {start}. The "
            f"driver's log: {raw['submit']['logDir']}/{run.submission_id}-*.log"
        )
        LOG.warning(message, extra={"fields": {"submission_id": run.submission_id, "state": state}})
        return {"submissionId": run.submission_id, "state": state, "message": message}
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


def export_on_end(run: Attempt, state: str, connect: Callable[[], kube.Api] = kube.connect) -> dict[str, Any]:
    """The run ended: start the export Job of its last checkpoint (``export.onRunEnd``). A Job that cannot
    be made is logged with the command that makes it by hand, never a failure of the run: the training is
    done."""
    raw = run.spec.raw
    if state != "SUCCEEDED" or not raw["export"]["onRunEnd"]:
        return {}
    latest = resume.latest_iteration(Path(raw["output"]["checkpointDir"]))
    if latest is None:
        LOG.warning("the run ended with no checkpoint saved: nothing to export")
        return {}
    try:
        return {"export": export_jobs.start(connect(), raw, latest)}
    except HookError as exc:
        namespace, template = raw["release"]["namespace"], raw["export"]["jobTemplate"]
        by_hand = f"kubectl create job -n {namespace} {template}-{latest} --from=cronjob/{template}"
        LOG.error(
            f"could not start the export of checkpoint {latest}: {exc}. The run itself succeeded; start the "
            f"export by hand: {by_hand}",
            extra={"fields": {"submission_id": run.submission_id}},
        )
        return {"export": {"error": str(exc), "iteration": latest}}
