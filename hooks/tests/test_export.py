"""export: the real orchestration around the testbed's exporter, which converts real torch_dist checkpoints to
real safetensors; validation against a real base model (its safetensors headers, transformers loading it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hooks_testlib import REPO, read_until, run_cli, spec_in, write
from miles_hooks.core import export_jobs, exported, fsutil, hf_checkpoint
from miles_hooks.core import runspec as specmod
from miles_hooks.core.errors import BadInput, CheckFailed
from miles_hooks.steps import export

pytest.importorskip("torch", reason="the test checkpoints are real torch.distributed.checkpoint files")

TOOLS = REPO / "testbed" / "fake-miles" / "tools"
sys.path.insert(0, str(REPO / "tests" / "e2e"))
import seed  # noqa: E402  (the testbed's base model: real safetensors, a tokenizer transformers loads)


def export_spec(tmp: Path, saved: tuple[int, ...] = (1, 3)) -> dict[str, Any]:
    """A run whose checkpoint dir holds ``saved`` iterations of the test model (the tracker at the last)."""
    raw = spec_in(tmp)
    mirror = seed.seed(tmp / "mirror")
    shutil.copytree(mirror / "models" / "Qwen" / "Qwen3-4B" / "main", raw["model"]["hfPath"])
    release = tmp / "torch_dist"
    converter = [sys.executable, str(TOOLS / "dcp_converter.py"), "--hf-checkpoint", raw["model"]["hfPath"]]
    subprocess.run(
        [*converter, "--save", str(release)],
        check=True,
        capture_output=True,
    )
    ckpt = Path(raw["output"]["checkpointDir"])
    for iteration in saved:
        shutil.copytree(release / "release", ckpt / f"iter_{iteration:07d}")
    (ckpt / "latest_checkpointed_iteration.txt").write_text(str(saved[-1]))
    raw["export"].update(
        command=[sys.executable, str(TOOLS / "convert_torch_dist_to_hf.py")],
        dir=str(tmp / "run" / "hf"),
        lockStaleSeconds=60,
    )
    raw["train"]["workdir"] = str(tmp)
    raw["runtimeEnv"]["envVars"].pop("PYTHONPATH", None)
    fsutil.atomic_write_json(
        raw["output"]["provenanceFile"], {"kind": "miles-hooks/provenance", "runId": "r"}
    )
    return raw


def spec(raw: dict[str, Any]) -> specmod.RunSpec:
    return specmod.parse(json.dumps(raw), "test")


def test_exports_the_newest_iteration_validated_marked_and_recorded_then_does_nothing_again(
    tmp_path: Path,
) -> None:
    raw = export_spec(tmp_path)
    result = export.run(spec(raw))
    target = tmp_path / "run" / "hf" / "iter_0000003"
    assert result["exported"] and result["target"] == str(target) and result["iteration"] == 3
    base = hf_checkpoint.tensor_table(Path(raw["model"]["hfPath"]))
    assert hf_checkpoint.compare(base, hf_checkpoint.tensor_table(target)) == []
    marker = json.loads((target / export.MARKER).read_text())
    assert marker["source"]["iteration"] == 3 and marker["tensors"] == len(base)
    by_name = {f["name"]: f for f in marker["files"]}
    assert {"config.json", "tokenizer.json", "model.safetensors.index.json"} <= set(by_name)
    for name, entry in by_name.items():
        assert entry["sha256"] == fsutil.sha256_file(target / name)
    assert "Qwen3Config" in marker["loadedAs"]
    record = json.loads(Path(raw["output"]["provenanceFile"]).read_text())
    assert [e["iteration"] for e in record["exports"]] == [3]
    assert list(tmp_path.joinpath("run", "hf").glob(".iter_*")) == []  # no staging left

    started = time.monotonic()
    again = export.run(spec(raw))
    assert again == {"exported": False, "skipped": True, "reason": "up to date", "target": str(target)}
    assert time.monotonic() - started < 5


def test_an_older_iteration_on_demand_and_a_missing_one_named(tmp_path: Path) -> None:
    raw = export_spec(tmp_path)
    assert export.run(spec(raw), iteration=1)["target"].endswith("hf/iter_0000001")
    with pytest.raises(
        BadInput, match=r"--iteration 2: .* saved iterations in .*: iter_0000001, iter_0000003"
    ):
        export.run(spec(raw), iteration=2)


def test_a_damaged_or_outdated_export_is_exported_again(tmp_path: Path) -> None:
    raw = export_spec(tmp_path, saved=(3,))
    target = Path(export.run(spec(raw))["target"])
    shard = next(target.glob("*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:-1])
    again = export.run(spec(raw))
    assert (
        again["exported"]
        and fsutil.size_mismatch(target, json.loads((target / export.MARKER).read_text())["files"]) is None
    )
    marker = json.loads((target / export.MARKER).read_text())
    marker["source"]["metadataSha256"] = (
        "0" * 64
    )  # exported from another checkpoint saved under this iteration
    fsutil.atomic_write_json(target / export.MARKER, marker)
    assert export.run(spec(raw))["exported"]


@pytest.mark.parametrize(
    ("fault", "named"),
    [
        ("drop-tensor", r"model\.norm\.weight: in the base model, missing from the export"),
        ("wrong-shape", r"model\.embed_tokens\.weight: shape \[1023, 64\], the base model's is \[1024, 64\]"),
    ],
)
def test_a_mismatch_names_the_tensor_and_nothing_is_published(tmp_path: Path, fault: str, named: str) -> None:
    raw = export_spec(tmp_path, saved=(3,))
    os.environ["HF_EXPORTER_FAULT"] = fault
    try:
        with pytest.raises(CheckFailed) as err:
            export.run(spec(raw))
    finally:
        del os.environ["HF_EXPORTER_FAULT"]
    assert any(re.search(named, d) for d in err.value.details), err.value.details
    hf = tmp_path / "run" / "hf"
    assert list(hf.iterdir()) == [], list(hf.iterdir())  # no target, no staging, lock released


def test_vocabulary_padding_left_in_is_named_with_the_fix(tmp_path: Path) -> None:
    base = {"model.embed_tokens.weight": hf_checkpoint.Tensor("BF16", (1000, 64), "a")}
    got = {"model.embed_tokens.weight": hf_checkpoint.Tensor("BF16", (1024, 64), "b")}
    assert hf_checkpoint.compare(base, got) == [
        "model.embed_tokens.weight: shape [1024, 64], the base model's is [1000, 64] (the vocabulary padding "
        "is still there: pass --vocab-size)"
    ]
    got = {"model.embed_tokens.weight": hf_checkpoint.Tensor("F32", (1000, 64), "b")}
    assert hf_checkpoint.compare(base, got) == [
        "model.embed_tokens.weight: dtype F32, the base model's is BF16"
    ]


def test_a_truncated_safetensors_file_is_named(tmp_path: Path) -> None:
    raw = export_spec(tmp_path, saved=(3,))
    shard = Path(raw["model"]["hfPath"]) / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(
        CheckFailed, match=r"model-00002-of-00002\.safetensors: tensor .*\(a truncated file\)"
    ):
        hf_checkpoint.tensor_table(shard.parent)


def test_killed_mid_way_leaves_nothing_published_and_the_next_export_completes(tmp_path: Path) -> None:
    raw = export_spec(tmp_path, saved=(3,))
    path = write(tmp_path / "spec.json", raw)
    env = {**os.environ, "HF_EXPORTER_PAUSE_AT": "written", "PYTHONPATH": str(REPO / "hooks" / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "miles_hooks", "export", "--spec", str(path)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        read_until(proc, "hf_exporter: paused at written")
        hf = tmp_path / "run" / "hf"
        staging = [p for p in hf.iterdir() if p.name.startswith(".iter_0000003.tmp-")]
        assert staging and any(staging[0].glob("*.safetensors"))  # weights written, not published
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not (hf / "iter_0000003").exists()
    # the next pod: the dead holder's lock is broken (same host, dead pid), the leftover removed
    result = run_cli("export", "--spec", str(path), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["exported"] is True
    assert "removing the leftover of an interrupted export" in result.stderr
    assert sorted(p.name for p in hf.iterdir()) == ["iter_0000003"]


def test_the_iteration_from_the_environment_and_a_bad_one_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "spec.json", export_spec(tmp_path))
    done = run_cli("export", "--spec", str(path), "--json", env={"MILES_HOOKS_EXPORT_ITERATION": "1"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["iteration"] == 1
    bad = run_cli("export", "--spec", str(path), env={"MILES_HOOKS_EXPORT_ITERATION": "last"})
    assert bad.returncode == 2
    assert (
        "MILES_HOOKS_EXPORT_ITERATION: expected a saved iteration number or empty, found 'last'" in bad.stderr
    )


def test_nothing_saved_yet_is_a_failed_check(tmp_path: Path) -> None:
    raw = export_spec(tmp_path, saved=(3,))
    (Path(raw["output"]["checkpointDir"]) / "latest_checkpointed_iteration.txt").unlink()
    with pytest.raises(CheckFailed, match="holds no complete checkpoint yet"):
        export.run(spec(raw))


def test_export_jobs_are_named_per_run_and_iteration_within_the_label_limit() -> None:
    long_template = "a-release-name-that-is-quite-long-indeed-and-then-some-export"
    name = export_jobs.job_name(long_template, "run-1", 1234567)
    assert len(name) <= 63 and name.endswith("-1234567")
    assert name == export_jobs.job_name(long_template, "run-1", 1234567)  # a retried submitter: the same Job
    assert name != export_jobs.job_name(long_template, "run-2", 1234567)  # another run: another Job


def test_an_export_job_is_the_templates_job_with_the_iteration_owned_by_the_template() -> None:
    cronjob = {
        "metadata": {"name": "miles-export", "namespace": "ml", "uid": "u-1"},
        "spec": {
            "jobTemplate": {
                "metadata": {"labels": {"app.kubernetes.io/component": "hook-export"}},
                "spec": {
                    "backoffLimit": 2,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "export",
                                    "env": [{"name": "MILES_HOOKS_EXPORT_ITERATION", "value": ""}],
                                }
                            ]
                        }
                    },
                },
            }
        },
    }
    job = export_jobs.job_from_template(cronjob, "miles-export-abc-7", 7)
    assert job["spec"]["backoffLimit"] == 2
    assert job["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "MILES_HOOKS_EXPORT_ITERATION", "value": "7"}
    ]
    assert job["metadata"]["ownerReferences"][0] | {"uid": "u-1"} == job["metadata"]["ownerReferences"][0]
    assert job["metadata"]["labels"] == {"app.kubernetes.io/component": "hook-export"}
    assert (
        cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] == ""
    )


def test_the_report_shows_the_newest_export(tmp_path: Path) -> None:
    raw = export_spec(tmp_path, saved=(1, 3))
    export.run(spec(raw), iteration=1)
    export.run(spec(raw))
    found = exported.published(raw["export"]["dir"])
    assert [e["iteration"] for e in found] == [1, 3]
    assert found[-1]["path"].endswith("hf/iter_0000003") and found[-1]["bytes"] > 0
