"""Spec loading/validation, job hash and submission id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from hooks_testlib import FIXTURE, base_spec, run_cli, write
from miles_hooks.core import runspec as specmod
from miles_hooks.core.errors import SpecError


def problems_for(mutate: Any) -> list[str]:
    raw = base_spec()
    mutate(raw)
    return specmod.validate(raw)


def test_fixture_is_valid() -> None:
    assert specmod.validate(json.loads(FIXTURE.read_text())) == []
    loaded = specmod.load(FIXTURE)
    assert loaded.release == "miles" and loaded.namespace == "default"
    assert loaded.dashboard_url == "http://miles-head-svc.default.svc:8265"


def test_schema_is_strict_draft7() -> None:
    schema = specmod.schema()
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema["additionalProperties"] is False
    assert "sourceDir" in schema["properties"]["prepare"]["properties"]


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (
            lambda r: r["topology"].__setitem__("workerReplicas", 0),
            "topology.workerReplicas: expected minimum 1, found 0",
        ),
        (
            lambda r: r.__setitem__("mode", "k8s"),
            'mode: expected one of "rayCluster", "rayJob", "singleNode", found "k8s"',
        ),
        (lambda r: r["model"].pop("hfPath"), "model: required field(s) hfPath missing"),
        (
            lambda r: r["model"].__setitem__("hfPath", "relative/path"),
            "model.hfPath: expected a string matching ^/",
        ),
        (lambda r: r["submit"].__setitem__("extra", 1), "submit: unknown field(s) extra"),
        (
            lambda r: r["data"]["datasets"][0].__setitem__("files", []),
            "data.datasets[0].files: expected minItems 1",
        ),
        (lambda r: r["submit"]["entrypointResources"].__setitem__("gpu_node", 0), "exclusiveMinimum 0"),
    ],
)
def test_schema_errors_name_field_expected_and_found(mutate: Any, needle: str) -> None:
    found = problems_for(mutate)
    assert any(needle in p for p in found), found


def test_schema_version_mismatch_is_explained() -> None:
    found = problems_for(lambda r: r.__setitem__("schemaVersion", 1))
    assert found == [
        "schemaVersion: expected 3 (this hooks image), found 1; use a hooks image that matches the "
        "chart version"
    ]


def test_secret_values_are_refused_in_runtime_env() -> None:
    found = problems_for(lambda r: r["runtimeEnv"]["envVars"].update({"HF_TOKEN": "x", "WANDB_API_KEY": "y"}))
    assert any(p.startswith("the run spec's runtimeEnv.envVars HF_TOKEN: expected no value") for p in found)
    assert any(
        p.startswith("the run spec's runtimeEnv.envVars WANDB_API_KEY: expected credentials only by Secret")
        for p in found
    )


def test_secret_like_names_are_whole_words() -> None:
    ok = {
        "TOKENIZERS_PARALLELISM": "false",
        "NCCL_SOCKET_IFNAME": "^lo",
        "KEYRING": "x",
        "RAY_AUTH_MODE": "token",
        "SORT_KEY_ORDER": "asc",
    }
    assert problems_for(lambda r: r["runtimeEnv"]["envVars"].update(ok)) == []
    for name in (
        "HF_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "MY_API_KEY",
        "GOOGLE_CREDENTIALS",
        "OPENAI_APIKEY",
        "OPENAI_KEY",
        "GITHUB_PAT",
        "GPG_PASSPHRASE",
        "PROXY_AUTH",
    ):
        found = problems_for(lambda r, n=name: r["runtimeEnv"]["envVars"].update({n: "v"}))
        assert found and found[0].startswith(f"the run spec's runtimeEnv.envVars {name}:"), name


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found at"):
        specmod.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        specmod.load(tmp_path / "bad.json")


def test_cli_bad_spec_exit_2_and_names_field(tmp_path: Path) -> None:
    raw = base_spec()
    raw["topology"]["gpusPerWorker"] = "8"
    proc = run_cli("plan", "--spec", str(write(tmp_path / "run.json", raw)))
    assert proc.returncode == 2
    assert 'topology.gpusPerWorker: expected type integer, found "8"' in proc.stderr


def test_the_submission_id_and_run_identity_are_the_charts() -> None:
    """The chart computes both (miles.runId, miles.submissionId; tests/chart shows what changes them): a hook
    reads them, never recomputes them from the sections it sees."""
    raw = base_spec()
    raw["train"]["args"].append("--lr")
    raw["release"]["revision"] = 9
    assert specmod.submission_id(raw) == raw["submit"]["submissionId"]
    assert specmod.RunSpec(raw=raw, path="run.json").run_id() == raw["run"]["id"]


def test_a_submission_id_not_of_the_charts_shape_is_refused() -> None:
    found = problems_for(lambda r: r["submit"].__setitem__("submissionId", "miles-jobhash"))
    assert found and found[0].startswith("submit.submissionId:"), found
