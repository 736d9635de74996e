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
