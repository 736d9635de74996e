"""Thin helpers over ``ray.job_submission`` (imported lazily: Ray is heavy and absent from the
convert path)."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

from miles_hooks.core.errors import CheckFailed, HookTimeout

TERMINAL = frozenset({"STOPPED", "SUCCEEDED", "FAILED"})


def client(address: str, attempts: int = 3, delay: float = 2.0) -> Any:
    """A JobSubmissionClient for the dashboard at ``address``; CheckFailed when it is unreachable."""
    # ray is heavy and absent from the miles image (convert): imported on use
    from ray.exceptions import AuthenticationError  # noqa: PLC0415
    from ray.job_submission import JobSubmissionClient  # noqa: PLC0415

    last: Exception | None = None
    for attempt in range(attempts):
        try:
            return JobSubmissionClient(address)
        except AuthenticationError as exc:
            raise CheckFailed(auth_refusal(address, exc)) from None
        except (ConnectionError, RuntimeError, ValueError) as exc:
            last = exc
            if attempt + 1 < attempts:
                time.sleep(delay)
    raise CheckFailed(
        f"Ray dashboard at {address} is not reachable: {last}; expected the head service of the "
        "RayCluster to answer (the run spec's rayCluster.dashboardUrl; check that wait-ready passed)"
    )


def auth_headers() -> dict[str, str]:
    """The Authorization header Ray's own clients send under token authentication, for the few
    dashboard reads done without them: from RAY_AUTH_TOKEN or the file RAY_AUTH_TOKEN_PATH names."""
    if os.environ.get("RAY_AUTH_MODE") != "token":
        return {}
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if not token and os.environ.get("RAY_AUTH_TOKEN_PATH"):
        try:
            token = Path(os.environ["RAY_AUTH_TOKEN_PATH"]).read_text("utf-8").strip()
        except OSError:
            token = ""  # Ray's own client reports the unreadable file
    return {"Authorization": f"Bearer {token}"} if token else {}


def auth_refusal(address: str, exc: BaseException) -> str:
    """What to change when the Ray head refuses this hook (token authentication)."""
    sent = "a token" if auth_headers() else "no token"
    first = str(getattr(exc, "message", exc)).splitlines()[0]
    return (
        f"the Ray head at {address} refused this hook, which sent {sent} ({first}); expected the Ray pods "
        "and the hooks to read the same Secret (secrets.rayAuth: RAY_AUTH_MODE=token, the token from "
        "RAY_AUTH_TOKEN or the file RAY_AUTH_TOKEN_PATH names). "
        "If the Secret was replaced after the Ray pods started, restart them (delete the RayCluster's pods)"
    )


def is_not_found(exc: BaseException) -> bool:
    text = str(exc)
    return "404" in text or "does not exist" in text or "not found" in text.lower()


def get_job(cl: Any, submission_id: str) -> Any | None:
    """The job's JobDetails, or None when Ray has no job with that submission id."""
    try:
        return cl.get_job_info(submission_id)
    except RuntimeError as exc:
        if is_not_found(exc):
            return None
        raise CheckFailed(f"reading Ray job {submission_id} failed: {exc}") from exc


def status_name(status: Any) -> str:
    return str(getattr(status, "value", status))


def wait_terminal(cl: Any, submission_id: str, timeout: float) -> str:
    """Wait until the job is terminal; returns its state name or raises HookTimeout."""
    deadline = time.monotonic() + timeout
    delay = 0.2
    while True:
        job = get_job(cl, submission_id)
        if job is None:
            return "MISSING"
        state = status_name(job.status)
        if state in TERMINAL:
            return state
        if time.monotonic() >= deadline:
            raise HookTimeout(f"Ray job {submission_id} still {state} after {timeout:.0f}s")
        time.sleep(delay)
        delay = min(delay * 1.5, 2.0)


_TRANSIENT = ("No available agent", "try again later", "Connection refused", "Connection reset")


def is_transient(exc: BaseException) -> bool:
    text = str(exc)
    return any(t in text for t in _TRANSIENT)


def submit_job(cl: Any, retry_for: float = 90.0, **kwargs: Any) -> str:
    """``cl.submit_job(**kwargs)``, retried while the dashboard says its job agent is not ready yet.

    Before each retry the submission id is looked up: a POST that failed after creating the job (or a
    concurrent submit) leaves a job behind, and a second POST would get HTTP 500 for the duplicate.
    """
    sid = kwargs.get("submission_id")
    deadline = time.monotonic() + retry_for
    delay = 1.0
    while True:
        try:
            return str(cl.submit_job(**kwargs))
        except RuntimeError as exc:
            if sid and get_job(cl, sid) is not None:
                raise
            if not is_transient(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 8.0)


# Ray's job manager checks each job's supervisor actor once per JobManager.JOB_MONITOR_LOOP_PERIOD_S and
# writes FAILED for a job whose record is gone while the actor was still alive at its last check: a record
# deleted right after the job ends comes back.
_SUPERVISOR_ACTOR = "_ray_internal_job_actor_{sid}"


def supervisor_alive(dashboard: str, submission_id: str) -> bool:
    """Whether the job's supervisor actor is still alive (state API, through the dashboard)."""
    # ray is heavy and absent from the miles image (convert): imported on use
    from ray.util.state import list_actors  # noqa: PLC0415

    name = _SUPERVISOR_ACTOR.format(sid=submission_id)
    actors = list_actors(address=dashboard, filters=[("name", "=", name)], raise_on_missing_output=False)
    return any(str(getattr(a, "state", "")) != "DEAD" for a in actors)


def delete_settled(cl: Any, dashboard: str, submission_id: str, timeout: float = 60.0) -> None:
    """Delete a terminal job's record for good: once its supervisor actor is dead, delete; a record the
    job manager writes back (FAILED, "supervisor died") is deleted again, until it has stayed gone for
    two of the manager's checks."""
    # ray is heavy and absent from the miles image (convert): imported on use
    from ray.dashboard.modules.job.job_manager import JobManager  # noqa: PLC0415

    period = float(JobManager.JOB_MONITOR_LOOP_PERIOD_S)
    deadline = time.monotonic() + timeout
    while supervisor_alive(dashboard, submission_id):
        if time.monotonic() >= deadline:
            raise HookTimeout(f"Ray job {submission_id}: supervisor actor still alive after {timeout:.0f}s")
        time.sleep(0.2)
    gone_since: float | None = None
    while True:
        now = time.monotonic()
        if get_job(cl, submission_id) is not None:
            cl.delete_job(submission_id)
            gone_since = now
        elif gone_since is None:
            gone_since = now
        if now - gone_since >= 2 * period:
            return
        if now >= deadline:
            raise HookTimeout(f"Ray job {submission_id}: its record kept coming back for {timeout:.0f}s")
        time.sleep(0.2)


def dashboard_json(url: str, timeout: float = 10.0) -> Any:
    """GET ``url`` on the Ray dashboard (with the Ray token when one is set), parsed."""
    if not url.startswith(("http://", "https://")):
        raise CheckFailed(f"the run spec's rayCluster.dashboardUrl must be http(s), found {url!r}")
    request = urllib.request.Request(url, headers=auth_headers())  # noqa: S310 - scheme checked
    with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 - scheme checked
        return json.loads(resp.read())


def ray_version(dashboard: str) -> str | None:
    """The Ray release the cluster runs (``/api/version``'s ``ray_version``; its ``version`` is the Jobs
    API's, which ``JobSubmissionClient.get_version`` returns), or None when the dashboard does not say."""
    try:
        version = dashboard_json(dashboard.rstrip("/") + "/api/version").get("ray_version")
    except (OSError, ValueError, AttributeError, CheckFailed):
        return None
    return str(version) if version else None
