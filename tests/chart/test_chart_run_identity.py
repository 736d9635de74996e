"""What a run is, once: the chart's run identity (miles.runDefinition -> run.id) names the job in every mode.

The hooks read `run.id` and `submit.submissionId`; the RayJob's `spec.jobId` is the same submission id; the
RayJob's
name adds the cluster's shape. Each value below either is in the run's definition (a new run: new id) or is
not
(the same run: same id), rendered by the real Helm.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from chartlib import docs, find, render, run_spec

# a change of any of these is a new run
DEFINING = {
    "learning rate": "recipe.lr=2e-6",
    "rollouts": "recipe.numRollout=200",
    "model revision": "model.revision=0123456789abcdef0123456789abcdef01234567",
    "model size": "model.parameterCount=4100000000",
    "dataset revision": (
        "data.datasets[0].revision=fedcba9876543210fedcba9876543210fedcba98,"
        "data.datasets[0].repoId=zhuzilin/dapo-math-17k,data.datasets[0].files={dapo-math-17k.jsonl},"
        "data.datasets[0].path=data/dapo-math-17k"
    ),
    "miles image": "image.tag=v0.2.0",
    "runtime env": "recipe.extraEnv.MILES_TEST_SETTING=on",
    "entrypoint resources": "json:submit.entrypointResources.gpu_node=0.5",
    "output directory": "output.dir=/fsx/runs/other",
}
# and none of these is
NOT_DEFINING = {
    "hooks image": "hooks.image.tag=other",
    "GPU checks": "checks.gpu.enabled=true",
    "wait-ready timeout": "checks.waitReadyTimeoutSeconds=99",
    "convert lock": "hooks.convert.lockStaleSeconds=60",
    "head resources": "rayCluster.head.resources.requests.memory=9Gi",
}


def identity(scenario: str, *sets: str) -> tuple[dict, list[dict]]:
    # "json:KEY=VALUE" is a --set-json (a number --set would pass as a string)
    extra = tuple(
        arg for s in sets for arg in (("--set-json", s[5:]) if s.startswith("json:") else ("--set", s))
    )
    documents = docs(render("helm4", scenario, extra))
    return run_spec(documents), documents


@pytest.fixture(scope="module")
def base() -> dict:
    spec, _ = identity("moe + rayjob")
    return spec


def test_the_identity_is_the_hash_of_the_sections_it_names(base: dict) -> None:
    run = base["run"]
    assert re.fullmatch(r"[0-9a-f]{64}", run["id"])
    assert run["definedBy"] == sorted(run["definedBy"])
    assert {"train", "model", "data", "output", "runtimeEnv", "topology", "reward", "release", "mode"} <= set(
        run["definedBy"]
    )
    assert base["submit"]["submissionId"] == f"miles-{run['id'][:12]}"


@pytest.mark.parametrize("change", DEFINING.values(), ids=DEFINING.keys())
def test_a_job_defining_change_is_a_new_run(base: dict, change: str) -> None:
    spec, _ = identity("moe + rayjob", change)
    assert spec["run"]["id"] != base["run"]["id"]
    assert spec["submit"]["submissionId"] != base["submit"]["submissionId"]


@pytest.mark.parametrize("change", NOT_DEFINING.values(), ids=NOT_DEFINING.keys())
def test_other_changes_keep_the_run(base: dict, change: str) -> None:
    spec, _ = identity("moe + rayjob", change)
    assert spec["run"]["id"] == base["run"]["id"]


def test_both_modes_name_their_job_from_the_identity() -> None:
    """Mode rayCluster submits under submit.submissionId; mode rayJob's RayJob carries it as spec.jobId, and
    the RayJob's name changes with the cluster's shape while its job id does not."""
    spec, documents = identity("moe + rayjob")
    (job,) = find(documents, "RayJob")
    assert job["spec"]["jobId"] == spec["submit"]["submissionId"]
    assert job["metadata"]["name"].startswith("miles-")
    _, documents2 = identity("moe + rayjob", "rayCluster.head.resources.requests.memory=9Gi")
    (job2,) = find(documents2, "RayJob")
    assert job2["spec"]["jobId"] == job["spec"]["jobId"]
    assert job2["metadata"]["name"] != job["metadata"]["name"]
    cluster_spec, _ = identity("moe")
    assert cluster_spec["mode"] == "rayCluster"
    assert re.fullmatch(r"miles-[0-9a-f]{12}", cluster_spec["submit"]["submissionId"])


def test_the_hooks_carry_no_hash_of_their_own() -> None:
    """No Python code recomputes the identity: the hooks read run.id and submit.submissionId."""
    src = Path(__file__).resolve().parents[2] / "hooks" / "src" / "miles_hooks"
    runspec = (src / "core" / "runspec.py").read_text()
    assert "hashlib" not in runspec and "JOB_DEFINING" not in runspec
    assert not [p for p in src.rglob("*.py") if "job_hash" in p.read_text()]
