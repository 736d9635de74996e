"""core/resume.py: what a new job does with the checkpoints already in output.dir, judged from real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hooks_testlib import spec_in
from miles_hooks.core import resume
from miles_hooks.core.errors import BadInput


def saved(raw: dict[str, Any], iteration: int | str) -> None:
    """What miles leaves after a save: iter_<n>/ and, written last, the tracker."""
    ckpt = Path(raw["output"]["checkpointDir"])
    if isinstance(iteration, int):
        (ckpt / f"iter_{iteration:07d}").mkdir(parents=True, exist_ok=True)
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / resume.TRACKER).write_text(f"{iteration}\n")


def recorded(raw: dict[str, Any], **changes: Any) -> None:
    """The provenance record submit writes, for this release and model unless ``changes`` say otherwise."""
    record = {
        "release": {**raw["release"], **changes.get("release", {})},
        "model": {
            "repoId": raw["model"]["repoId"],
            "revision": raw["model"]["revision"],
            **changes.get("model", {}),
        },
    }
    path = Path(raw["output"]["provenanceFile"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_an_empty_directory_starts_the_run(tmp_path: Path) -> None:
    raw = spec_in(tmp_path)
    got = resume.decide(raw)  # type: ignore[arg-type]
    assert (got.action, got.latest_iteration) == ("start", None)
    assert "starts at rollout 0" in got.describe()


def test_this_release_s_checkpoints_continue_below_num_rollout(tmp_path: Path) -> None:
    raw = spec_in(tmp_path)
    raw["resume"]["numRollout"] = 100
    saved(raw, 39)
    recorded(raw)
    got = resume.decide(raw)  # type: ignore[arg-type]
    assert got.as_dict() == {
        "action": "continue",
        "checkpointDir": raw["output"]["checkpointDir"],
        "latestIteration": 39,
        "numRollout": 100,
    }
    assert "continues at rollout 40 of recipe.numRollout=100" in got.describe()


@pytest.mark.parametrize("last", [99, 120])
def test_a_finished_run_is_refused_naming_num_rollout_and_output_dir(tmp_path: Path, last: int) -> None:
    raw = spec_in(tmp_path)
    raw["resume"]["numRollout"] = 100
    saved(raw, last)
    recorded(raw)
    with pytest.raises(BadInput) as err:
        resume.decide(raw)  # type: ignore[arg-type]
    msg = str(err.value)
    assert f"output.dir {raw['output']['dir']} holds a finished run" in msg
    assert f"Set recipe.numRollout above {last + 1}" in msg and "output.dir to a new directory" in msg


def test_one_rollout_short_of_the_end_still_continues(tmp_path: Path) -> None:
    raw = spec_in(tmp_path)
    raw["resume"]["numRollout"] = 100
    saved(raw, 98)
    recorded(raw)
    assert resume.decide(raw).action == "continue"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"release": {"name": "other"}}, "release default/other"),
        ({"model": {"revision": "0123abc"}}, "model Qwen/Qwen3-4B@0123abc"),
        (None, "no provenance record explains"),
    ],
    ids=["another release", "another model revision", "no record"],
)
def test_someone_else_s_checkpoints_are_refused_unless_adopted(
    tmp_path: Path, changes: dict[str, Any] | None, named: str
) -> None:
    raw = spec_in(tmp_path)
    saved(raw, 19)
    if changes is not None:
        recorded(raw, **changes)
    with pytest.raises(BadInput) as err:
        resume.decide(raw)  # type: ignore[arg-type]
    assert named in str(err.value) and "output.adoptCheckpoints=true" in str(err.value), str(err.value)
    raw["resume"]["adoptCheckpoints"] = True
    got = resume.decide(raw)  # type: ignore[arg-type]
    assert (got.action, got.latest_iteration) == ("adopt", 19)


def test_a_converted_checkpoint_as_output_dir_is_refused(tmp_path: Path) -> None:
    raw = spec_in(tmp_path)
    saved(raw, "release")
    with pytest.raises(BadInput, match="converted torch_dist checkpoint"):
        resume.decide(raw)  # type: ignore[arg-type]


def test_prepare_data_refuses_a_finished_run_before_any_download(tmp_path: Path) -> None:
    """The CLI exits 2 naming the values to set, and has fetched nothing (no model directory made)."""
    raw = spec_in(tmp_path)
    raw["resume"]["numRollout"] = 10
    saved(raw, 9)
    recorded(raw)
    spec = tmp_path / "run.json"
    spec.write_text(json.dumps(raw))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "miles_hooks",
            "prepare-data",
            "--spec",
            str(spec),
            "--source-dir",
            str(tmp_path / "none"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "holds a finished run" in proc.stderr and "recipe.numRollout above 10" in proc.stderr
    assert not Path(raw["model"]["hfPath"]).exists()
