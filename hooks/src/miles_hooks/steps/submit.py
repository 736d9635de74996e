"""submit: exactly one Ray job per run spec, and it is the release's only active job.

The submission id is deterministic (``spec.submission_id``). Any other still-running job of the same
release is stopped first (``submit.onChange: restart``) or reported as an error (``fail``). Then, by the
state of the job with this id:

- none: submitted, and a provenance record written atomically;
- PENDING, RUNNING or SUCCEEDED: reported and left alone (a re-run after a crash, an unchanged ``helm
  upgrade``, a finished run);
- STOPPED: the release asks again for a run that a spec change stopped (``helm rollback`` to it, or an
  upgrade back to it): its record is deleted and it is submitted again under the same id, resuming from
  its checkpoints;
- FAILED: reported with what to do; never retried silently.

The step never follows the job: training outlives every Helm timeout. Ray's REST server answers a
duplicate submission id with HTTP 500 (not 409), so the job is looked up first, and a failed POST is
followed by another lookup before it counts as an error.
"""

from __future__ import annotations

import posixpath
import re
import time
from pathlib import Path
from typing import Any

from miles_hooks import __version__
from miles_hooks.core import fsutil, image_facts, log, rayjobs, resume, writable
from miles_hooks.core.entrypoint import build_entrypoint, entrypoint_resources
from miles_hooks.core.errors import CheckFailed
from miles_hooks.core.runspec import RunSpec, run_id
from miles_hooks.core.runspec_types import RawSpec

LOG = log.get("submit")

META_RELEASE = "miles.release"
META_NAMESPACE = "miles.namespace"
META_RUN_ID = "miles.runId"
META_REVISION = "miles.revision"
META_TOOL = "miles.submittedBy"
DEFAULT_STOP_TIMEOUT = 300.0  # seconds a previous job gets to stop on a spec change

_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")


def runtime_env(raw: RawSpec) -> dict[str, Any]:
    """Ray runtime env: the spec's non-secret env vars only (secrets reach the job through the worker
    pods' secretKeyRef env, never through Ray)."""
    return {"env_vars": dict(raw["runtimeEnv"]["envVars"])}


def metadata(raw: RawSpec) -> dict[str, str]:
    return {
        META_RELEASE: str(raw["release"]["name"]),
        META_NAMESPACE: str(raw["release"]["namespace"]),
        META_RUN_ID: run_id(raw),
        META_REVISION: str(raw["release"]["revision"]),
        META_TOOL: f"miles-hooks {__version__}",
    }


def image_digest(image: str) -> str | None:
    match = _DIGEST.search(image)
    return match.group(1) if match else None


def is_same_release(meta: dict[str, str] | None, raw: RawSpec) -> bool:
    meta = meta or {}
    return bool(
        meta.get(META_RELEASE) == raw["release"]["name"]
        and meta.get(META_NAMESPACE) == raw["release"]["namespace"]
    )


def previous_active(jobs: list[Any], raw: RawSpec, sid: str) -> list[Any]:
    """Non-terminal jobs of the same release whose submission id differs from ``sid``."""
    out = []
    for job in jobs:
        if job.submission_id == sid or not is_same_release(job.metadata, raw):
            continue
        if rayjobs.status_name(job.status) not in rayjobs.TERMINAL:
            out.append(job)
    return out


def provenance_record(
    spec: RunSpec,
    sid: str,
    entrypoint: str,
    submitted_at: float,
    cluster_version: str | None,
    created: bool,
    resumed: resume.Resume | None = None,
) -> dict[str, Any]:
    raw = spec.raw
    prepared = fsutil.read_json(posixpath.join(raw["model"]["hfPath"], ".miles-hooks-prepared.json"))
    resolved = prepared.get("resolvedRevision") if isinstance(prepared, dict) else None
    return {
        "kind": "miles-hooks/provenance",
        "version": 1,
        "submissionId": sid,
        "runId": spec.run_id(),
        "createdBySubmit": created,
        "resume": resumed.as_dict() if resumed else None,
        "submittedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(submitted_at)),
        "release": raw["release"],
        "images": {
            "miles": raw["images"]["miles"],
            "milesDigest": image_digest(raw["images"]["miles"]),
            "milesRollingTag": raw["images"]["milesRollingTag"],
            "hooks": raw["images"]["hooks"],
            "milesFacts": image_facts.recorded(raw),
        },
        "model": {
            "repoId": raw["model"]["repoId"],
            "revision": raw["model"]["revision"],
            "resolvedRevision": resolved,
            "profile": raw["model"]["profile"],
        },
        "datasets": [
            {"repoId": d["repoId"], "revision": d["revision"], "files": d["files"]}
            for d in raw["data"]["datasets"]
        ],
        "ray": {
            "dashboardUrl": raw["rayCluster"]["dashboardUrl"],
            "declaredVersion": raw["rayCluster"]["rayVersion"],
            "clusterVersion": cluster_version,
        },
        "entrypoint": entrypoint,
        "entrypointResources": entrypoint_resources(raw),
        "secretsByReference": [{"name": s["name"], "key": s["key"], "env": s["env"]} for s in raw["secrets"]],
        "spec": raw,
    }


def merge_previous(record: dict[str, Any], existing: Any, created: bool) -> dict[str, Any]:
    """``record`` completed from the provenance file's previous content ``existing``.

    The same job found again (``created`` false) keeps its first submission time. A job submitted
    now, under the id of an earlier record (the same spec after its job vanished with a new Ray head,
    say), gets the new time and the earlier submission joins ``previousSubmissions``: otherwise the
    run report would date the new job by the old one and call it stalled."""
    if not isinstance(existing, dict):
        return record
    previous = list(existing.get("previousSubmissions") or [])
    same_job = existing.get("submissionId") == record["submissionId"] and not created
    if same_job:
        record["submittedAt"] = existing.get("submittedAt", record["submittedAt"])
        record["resume"] = record.get("resume") or existing.get("resume")
        record["createdBySubmit"] = existing.get("createdBySubmit", created)
    elif existing.get("submissionId") is not None:
        previous.append(
            {"submissionId": existing.get("submissionId"), "submittedAt": existing.get("submittedAt")}
        )
    record["previousSubmissions"] = previous[-20:]
    return record


def write_provenance(
    spec: RunSpec,
    sid: str,
    entrypoint: str,
    submitted_at: float,
    cl: Any,
    created: bool,
    resumed: resume.Resume | None = None,
) -> str:
    path = str(spec.raw["output"]["provenanceFile"])
    record = provenance_record(
        spec, sid, entrypoint, submitted_at, rayjobs.ray_version(spec.dashboard_url), created, resumed
    )
    merge_previous(record, fsutil.read_json(path), created)
    try:
        fsutil.atomic_write_json(path, record)
    except OSError as exc:
        raise CheckFailed(
            f"cannot write the provenance record {path}: {exc.strerror}; expected the shared "
            "volume to be mounted writable (the run spec's output.provenanceFile, under output.dir)"
        ) from exc
    return path


def stop_previous(cl: Any, spec: RunSpec, sid: str, stop_timeout: float) -> None:
    """Stops every active job of the release other than ``sid`` (``submit.onChange: restart``), or refuses
    (``fail``)."""
    raw = spec.raw
    active = previous_active(list(cl.list_jobs()), raw, sid)
    if not active:
        return
    ids = ", ".join(f"{j.submission_id} ({rayjobs.status_name(j.status)})" for j in active)
    if raw["submit"]["onChange"] == "fail":
        raise CheckFailed(
            f"the run spec changed while job(s) {ids} of release {spec.release} are still running; "
            "expected no active job with a different spec (submit.onChange is 'fail'). Stop the job, "
            "or set submit.onChange=restart to stop it automatically"
        )
    for job in active:
        LOG.info(
            "the run spec changed: stopping the previous job",
            extra={"fields": {"previous": job.submission_id, "new": sid}},
        )
        cl.stop_job(job.submission_id)
    for job in active:
        state = rayjobs.wait_terminal(cl, job.submission_id, stop_timeout)
        LOG.info("previous job stopped", extra={"fields": {"previous": job.submission_id, "state": state}})


def run(spec: RunSpec, stop_timeout: float = DEFAULT_STOP_TIMEOUT, dry_run: bool = False) -> dict[str, Any]:
    raw = spec.raw
    sid = spec.submission_id()
    entrypoint = build_entrypoint(raw)
    LOG.info(
        "run spec resolved",
        extra={
            "fields": {
                "submission_id": sid,
                "run_id": spec.run_id()[:12],
                "dashboard": spec.dashboard_url,
            }
        },
    )
    if dry_run:
        return {"submissionId": sid, "entrypoint": entrypoint, "created": False, "dryRun": True}
    # the provenance record is written after the job exists: an output dir closed to the hooks' user must
    # stop this step before it submits (or stops anything), not after
    writable.require([("output.dir", Path(raw["output"]["dir"]))])
    cl = rayjobs.client(spec.dashboard_url)
    stop_previous(cl, spec, sid, stop_timeout)
    existing = rayjobs.get_job(cl, sid)
    if existing is not None:
        state = rayjobs.status_name(existing.status)
        if state != "STOPPED":
            LOG.info(
                "a job for this run spec already exists; nothing to submit",
                extra={"fields": {"submission_id": sid, "state": state}},
            )
            if state == "FAILED":
                LOG.warning(
                    "that job has FAILED; change the spec (or delete the job) to run again",
                    extra={"fields": {"message": existing.message}},
                )
            started = (existing.start_time or time.time() * 1000) / 1000.0
            path = write_provenance(spec, sid, entrypoint, started, cl, created=False)
            return {"submissionId": sid, "created": False, "state": state, "provenance": path}
    finished = resume.finished_here(raw)
    if finished is not None:
        # its job vanished with a lost Ray head after the last save: submitting it again would load the
        # last checkpoint and train nothing, and refusing it would call a finished run a mistake
        LOG.info(
            resume.describe_finished(raw, finished) + "; nothing to submit",
            extra={"fields": {"submission_id": sid, "latest_iteration": finished}},
        )
        return {"submissionId": sid, "created": False, "state": "FINISHED", "latestIteration": finished}
    if existing is not None:
        LOG.info(
            "the job of this run spec was stopped (a rollback, or an upgrade back to this spec): "
            "submitting it again under the same id; it resumes from its latest checkpoint",
            extra={"fields": {"submission_id": sid}},
        )
        rayjobs.delete_settled(cl, spec.dashboard_url, sid)

    # the last gate before a job exists (a rollback or a new Ray head reaches it without prepare-data)
    resumed = resume.decide(raw)
    LOG.info(resumed.describe(), extra={"fields": resumed.as_dict()})
    submitted_at = time.time()
    try:
        rayjobs.submit_job(
            cl,
            entrypoint=entrypoint,
            submission_id=sid,
            runtime_env=runtime_env(raw),
            entrypoint_resources=entrypoint_resources(raw),
            metadata=metadata(raw),
        )
        created = True
    except RuntimeError as exc:
        # A concurrent submit (or a retried POST) may have created it: Ray answers 500 for duplicates.
        if rayjobs.get_job(cl, sid) is None:
            raise CheckFailed(f"submitting Ray job {sid} failed: {exc}") from exc
        LOG.info(
            "the job appeared concurrently; treating it as submitted",
            extra={"fields": {"submission_id": sid}},
        )
        created = False
    LOG.info(
        "job submitted" if created else "job present",
        extra={"fields": {"submission_id": sid, "entrypoint_resources": entrypoint_resources(raw)}},
    )
    try:
        path = write_provenance(spec, sid, entrypoint, submitted_at, cl, created=created, resumed=resumed)
    except CheckFailed as exc:
        if not created:
            raise
        # a failed hook marks the release failed: the job this step started must not train on regardless
        cl.stop_job(sid)
        raise CheckFailed(
            f"{exc.message}; job {sid}, submitted moments before, was stopped so that the failed release "
            "leaves no run behind. Fix the volume, then `helm upgrade --install` again",
            exc.details,
        ) from exc
    LOG.info("provenance recorded", extra={"fields": {"path": path}})
    return {"submissionId": sid, "created": created, "state": "PENDING", "provenance": path}
