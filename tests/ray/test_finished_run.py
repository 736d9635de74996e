"""A run whose own job saved its last checkpoint and then vanished with its Ray head (the driver, on a worker,
outlived the head long enough): against the real local Ray of conftest.py, submit submits nothing, status
passes and names the run finished, and mode rayJob's submitter records the end under the run's id so that
KubeRay can call the RayJob Complete. Another run's finished checkpoints are still refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from miles_hooks.core import resume
from miles_hooks.core import runspec as specmod
from miles_hooks.core.errors import BadInput
from miles_hooks.steps import submit
from ray.job_submission import JobSubmissionClient
from ray_testlib import LocalRay, make_spec, write_spec
from test_submit_status import release_jobs, wait_state

NUM_ROLLOUT = 3


def finished_by(raw: dict[str, Any], run_id: str) -> None:
    """What a run's own job leaves when it saved its last rollout: the tracker, and submit's record of it."""
    ckpt = Path(raw["output"]["checkpointDir"])
    (ckpt / f"iter_{NUM_ROLLOUT - 1:07d}").mkdir(parents=True)
    (ckpt / resume.TRACKER).write_text(f"{NUM_ROLLOUT - 1}\n")
    record = {
        "kind": "miles-hooks/provenance",
        "submissionId": raw["submit"]["submissionId"],
        "runId": run_id,
        "submittedAt": "2026-12-07T08:00:00Z",
        "release": raw["release"],
        "model": {"repoId": raw["model"]["repoId"], "revision": raw["model"]["revision"]},
    }
    Path(raw["output"]["provenanceFile"]).write_text(json.dumps(record))


def hook(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "miles_hooks", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_submit_and_status_call_a_run_finished_by_its_own_lost_job_finished(
    local_ray: LocalRay, tmp_path: Path
) -> None:
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rt-finished")
    raw["resume"]["numRollout"] = NUM_ROLLOUT
    finished_by(raw, raw["run"]["id"])
    path = write_spec(tmp_path / "run.json", raw)
    client = JobSubmissionClient(local_ray.dashboard_url)

    result = submit.run(specmod.load(path))
    assert result == {
        "submissionId": raw["submit"]["submissionId"],
        "created": False,
        "state": "FINISHED",
        "latestIteration": NUM_ROLLOUT - 1,
    }
    assert release_jobs(client, "rt-finished") == []

    st = hook("status", "--spec", str(path), "--log-format", "text")
    assert st.returncode == 0, st.stdout + st.stderr
    said = f"finished      : the run finished: {raw['output']['checkpointDir']} holds its checkpoint"
    assert said in st.stdout, st.stdout
    assert "resume with" not in st.stdout

    # prepare-data's judgement is unchanged: a new job over a finished run (a reinstall) is refused
    with pytest.raises(BadInput, match="holds a finished run"):
        resume.decide(raw)  # type: ignore[arg-type]


def test_another_runs_finished_checkpoints_are_refused_not_taken_for_this_runs(
    local_ray: LocalRay, tmp_path: Path
) -> None:
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rt-finished-other")
    raw["resume"]["numRollout"] = NUM_ROLLOUT
    finished_by(raw, "0" * 64)  # the same release's earlier run (another recipe)
    path = write_spec(tmp_path / "run.json", raw)
    with pytest.raises(BadInput, match=r"holds a finished run: its checkpoint iteration 2 is rollout 3"):
        submit.run(specmod.load(path))
    assert release_jobs(JobSubmissionClient(local_ray.dashboard_url), "rt-finished-other") == []


def test_the_rayjob_submitter_records_the_end_of_a_run_an_earlier_attempt_finished(
    local_ray: LocalRay, tmp_path: Path
) -> None:
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rt-finished-rj", mode="rayJob")
    raw["resume"]["numRollout"] = NUM_ROLLOUT
    raw["checks"]["gpu"]["enabled"] = True  # verify would fail here (no GPU): the finished path skips it
    raw["submit"]["logDir"] = str(tmp_path / "run" / "logs")
    finished_by(raw, raw["run"]["id"])
    path = write_spec(tmp_path / "run.json", raw)
    sid = raw["submit"]["submissionId"]

    env = {"RAY_DASHBOARD_ADDRESS": local_ray.dashboard_url, "RAY_JOB_SUBMISSION_ID": sid}
    done = hook("run-job", "--spec", str(path), "--log-format", "text", "--json", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("}") and '"state": "SUCCEEDED"' in done.stdout, done.stdout
    assert "an earlier attempt's job saved it" in done.stderr, done.stderr
    assert "checking the cluster before the run" not in done.stderr, done.stderr
    # the attempt's own lines outlive its pod, beside the driver logs (a name of their own: not a driver log)
    (kept,) = (tmp_path / "run" / "logs").glob(f"submitter-{sid}-*.log")
    said = kept.read_text()
    assert "an earlier attempt's job saved it" in said and "records the run's end" in said, said

    client = JobSubmissionClient(local_ray.dashboard_url)
    assert [j.submission_id for j in release_jobs(client, "rt-finished-rj")] == [sid]
    assert wait_state(client, sid, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
    assert client.get_job_info(sid).entrypoint.startswith("echo ")
    assert "this job records the run's end" in client.get_job_logs(sid)
    assert "TRAIN DONE" not in client.get_job_logs(sid)  # nothing trained
