"""run-job's own parts (mode rayJob): the job id KubeRay polls, and this attempt's dashboard."""

from __future__ import annotations

from typing import Any

import pytest

from hooks_testlib import base_spec
from miles_hooks.core import runspec as specmod
from miles_hooks.core.errors import BadInput, CheckFailed
from miles_hooks.steps import run_job


def rayjob_spec() -> specmod.RunSpec:
    raw: Any = base_spec()
    raw["mode"] = "rayJob"
    raw["submit"]["submissionId"] = "miles-1a2b3c4d5e6f"
    raw["rayCluster"]["dashboardUrl"] = "http://miles-1a2b3c4d-head-svc.ml.svc:8265"
    return specmod.RunSpec(raw=raw, path="run.json")


def test_the_job_id_is_the_run_specs_and_kuberays_must_agree() -> None:
    spec = rayjob_spec()
    assert spec.submission_id() == "miles-1a2b3c4d5e6f"
    assert run_job.job_id(spec, {"RAY_JOB_SUBMISSION_ID": "miles-1a2b3c4d5e6f"}) == "miles-1a2b3c4d5e6f"
    with pytest.raises(CheckFailed, match=r"KubeRay asks for job miles-99999999 .* names miles-1a2b3c4d5e6f"):
        run_job.job_id(spec, {"RAY_JOB_SUBMISSION_ID": "miles-99999999"})


def test_only_a_rayjob_run_spec_is_run() -> None:
    raw: Any = base_spec()
    with pytest.raises(BadInput, match=r"expected a run spec of mode rayJob .* found rayCluster"):
        run_job.job_id(specmod.RunSpec(raw=raw, path="run.json"), {})


def test_the_attempts_own_head_service_replaces_the_rayjob_named_one() -> None:
    env = {"RAY_DASHBOARD_ADDRESS": "miles-1a2b3c4d-x7k2p-head-svc.ml.svc.cluster.local:8265"}
    spec = run_job.on_attempt_cluster(rayjob_spec(), env)
    assert spec.dashboard_url == "http://miles-1a2b3c4d-x7k2p-head-svc.ml.svc.cluster.local:8265"
    assert spec.raw["rayCluster"]["headService"] == "miles-1a2b3c4d-x7k2p-head-svc"
    assert rayjob_spec().dashboard_url == "http://miles-1a2b3c4d-head-svc.ml.svc:8265"  # the input untouched


def test_without_kuberays_dashboard_address_nothing_is_called() -> None:
    with pytest.raises(BadInput, match="RAY_DASHBOARD_ADDRESS is not set"):
        run_job.on_attempt_cluster(rayjob_spec(), {})


class Job:
    def __init__(self, state: str) -> None:
        self.status = state


class Head:
    """A Ray head as run-job's follower sees it: a list of answers, each a Job, None (no such job) or an
    exception (the head does not answer)."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers

    def get_job_info(self, sid: str) -> Any:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if answer is None:
            raise RuntimeError(f"Request failed with status code 404: Job {sid} does not exist.")
        return answer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_head_that_comes_back_without_the_job_means_the_job_was_lost() -> None:
    head = Head([Job("RUNNING"), ConnectionError("Connection refused"), ConnectionError("refused"), None])
    clock = Clock()
    assert run_job.await_end(head, "miles-1", clock=clock, sleep=clock.sleep) == "LOST"


def test_a_head_that_comes_back_with_the_job_is_followed_to_its_end() -> None:
    head = Head([ConnectionError("Connection refused"), Job("RUNNING"), Job("SUCCEEDED")])
    clock = Clock()
    assert run_job.await_end(head, "miles-1", clock=clock, sleep=clock.sleep) == "SUCCEEDED"


def test_a_head_that_never_answers_again_fails_the_pod_after_the_wait() -> None:
    head = Head([ConnectionError("Connection refused")])
    clock = Clock()
    with pytest.raises(CheckFailed, match=r"has not answered for 30s while following job miles-1"):
        run_job.await_end(head, "miles-1", head_wait=30, clock=clock, sleep=clock.sleep)
    assert 30 <= clock.now <= 34
