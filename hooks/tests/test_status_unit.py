"""Pure parts of status: the verdict and the text for `helm test`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hooks_testlib import base_spec
from miles_hooks.core.runspec import RunSpec
from miles_hooks.steps import status


def result(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "submissionId": "miles-abc",
        "gcsHealthy": True,
        "gcsDetail": "HTTP 200: success",
        "job": {"state": "RUNNING", "message": "running"},
        "logTail": ["step 1"],
        "rayCluster": None,
    }
    base.update(over)
    return base


def test_healthy_running_job_has_no_problems() -> None:
    assert status.problems(result()) == []
    assert status.problems(result(job={"state": "SUCCEEDED"})) == []
    assert "recent job log:\n  | step 1" in status.render(result())


def test_failed_missing_and_unhealthy() -> None:
    assert status.problems(result(job={"state": "FAILED", "message": "boom"})) == [
        "Ray job miles-abc is FAILED: boom"
    ]
    assert "no Ray job miles-abc" in status.problems(result(job=None))[0]
    found = status.problems(result(gcsHealthy=False, gcsDetail="HTTP 503", job=None))
    assert found == ["Ray GCS not healthy: HTTP 503"]


def test_raycluster_verdict_unknown_is_not_a_failure() -> None:
    not_ready = result(rayCluster={"ready": False, "reasons": ["1 of 2 worker(s) Ready"]})
    assert status.problems(not_ready) == ["RayCluster not ready: 1 of 2 worker(s) Ready"]
    unknown = result(rayCluster={"ready": None, "reasons": ["not checked: forbidden"]})
    assert status.problems(unknown) == []
    assert "raycluster    : unknown not checked: forbidden" in status.render(unknown)


def test_tail() -> None:
    assert status.tail("a\nb\nc\n", 2) == ["b", "c"]
    assert status.tail("a", 0) == []


def spec_with_output(tmp_path: Path, mode: str = "rayCluster") -> RunSpec:
    raw = base_spec()
    raw["mode"] = mode
    raw["release"]["revision"] = 7
    raw["output"]["provenanceFile"] = str(tmp_path / "provenance.json")
    raw["output"]["checkpointDir"] = str(tmp_path / "checkpoints")
    return RunSpec(raw=raw, path="test")


def test_a_job_submit_recorded_but_the_head_lacks_names_the_command_that_resumes_it(tmp_path: Path) -> None:
    spec = spec_with_output(tmp_path)
    assert status.lost_job(spec) is None  # submit never recorded it: nothing says it was lost
    sid = spec.submission_id()
    (tmp_path / "provenance.json").write_text(
        json.dumps({"submissionId": sid, "submittedAt": "2026-12-07T00:00:00Z"})
    )
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("19")
    lost = status.lost_job(spec)
    assert lost == {
        "submittedAt": "2026-12-07T00:00:00Z",
        "latestCheckpoint": 19,
        "resumeCommand": "helm rollback miles 7 -n default",
        "finished": None,
    }
    found = status.problems(result(job=None, lostJob=lost, driverLogs="/fsx/runs/miles/logs/x-*.log"))
    assert len(found) == 1
    assert (
        "Ray job miles-abc is not on the Ray head, though submit created it at 2026-12-07T00:00:00Z"
        in found[0]
    )
    assert "from checkpoint 19: helm rollback miles 7 -n default." in found[0]
    assert "Its driver logs: /fsx/runs/miles/logs/x-*.log" in found[0]
    text = status.render(result(job=None, lostJob=lost))
    assert "resume with   : helm rollback miles 7 -n default" in text
    # an earlier run's record (another id) says nothing about this one
    (tmp_path / "provenance.json").write_text(json.dumps({"submissionId": "miles-000000000000"}))
    assert status.lost_job(spec) is None
    # mode rayJob: KubeRay's retry resubmits it, on a new cluster
    (tmp_path / "provenance.json").write_text(json.dumps({"submissionId": sid, "submittedAt": "t"}))
    rayjob = status.lost_job(spec_with_output(tmp_path, "rayJob"))
    assert rayjob is not None and rayjob["resumeCommand"].startswith("kubectl get rayjob -n default")


def test_a_lost_job_that_saved_the_runs_last_checkpoint_is_a_finished_run(tmp_path: Path) -> None:
    spec = spec_with_output(tmp_path)
    spec.raw["resume"]["numRollout"] = 20
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("19")
    record = {"submissionId": spec.submission_id(), "runId": spec.run_id(), "submittedAt": "t"}
    (tmp_path / "provenance.json").write_text(json.dumps(record))
    lost = status.lost_job(spec)
    assert lost is not None and lost["finished"] is not None
    assert "holds its checkpoint iteration 19, rollout 20 of recipe.numRollout=20" in lost["finished"]
    assert status.problems(result(job=None, lostJob=lost)) == []
    text = status.render(result(job=None, lostJob=lost))
    assert "finished      : the run finished" in text and "resume with" not in text
    # one rollout short of the end is a lost run, to be resumed
    (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("18")
    lost = status.lost_job(spec)
    assert lost is not None and lost["finished"] is None
    assert len(status.problems(result(job=None, lostJob=lost, driverLogs="x-*.log"))) == 1


def test_a_cluster_waiting_for_capacity_shows_the_schedulers_reason() -> None:
    pending = "pod miles-gpu-x: unschedulable: 0/3 nodes are available: 2 Insufficient nvidia.com/gpu."
    waiting = result(rayCluster={"ready": False, "reasons": ["1 of 2 worker(s) Ready"], "pods": [pending]})
    assert status.problems(waiting) == [f"RayCluster not ready: 1 of 2 worker(s) Ready; {pending}"]
    assert f"raycluster    : NOT READY 1 of 2 worker(s) Ready\n  {pending}" in status.render(waiting)
