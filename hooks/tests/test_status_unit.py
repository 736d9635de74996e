"""Pure parts of status: the verdict and the text for `helm test`."""

from __future__ import annotations

from typing import Any

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
