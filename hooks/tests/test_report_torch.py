"""report on event files written by torch's ``SummaryWriter``: the writer miles itself uses
(``miles.utils.tensorboard_utils`` calls ``add_scalar(key, value, step)`` for every metric)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from miles_hooks.steps.report import collect
from miles_hooks.steps.report.events import GRAD_NORM, REWARD
from test_report import (
    HOUR,
    LOW_REPETITION,
    MIN,
    NOW,
    load,
    make_checkpoints,
    make_spec,
    run_rows,
    write_provenance,
)

pytestmark = pytest.mark.torch

if os.environ.get("MILES_HOOKS_ALLOW_NO_TORCH") == "1":
    pytest.importorskip("torch", reason="torch not installed and MILES_HOOKS_ALLOW_NO_TORCH=1")


def write_with_torch(logdir: Path, rows: list[tuple[str, int, float, float]]) -> None:
    from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415 - torch is heavy and optional

    writer = SummaryWriter(log_dir=str(logdir))
    for tag, step, value, wall in rows:
        writer.add_scalar(tag, value, step, walltime=wall)
    writer.close()


def test_torch_summary_writer_degenerate_run(tmp_path: Path) -> None:
    raw = make_spec(tmp_path, maxRepetitionFrac=0.5)
    grad = [0.3] * 22 + [float("nan"), float("nan")]
    rows = run_rows([0.0] * 12, [0.6] * 12, NOW - MIN, grad=grad)
    write_with_torch(Path(raw["output"]["tensorboardDir"]) / "tb_project" / "20261130_010203", rows)
    make_checkpoints(Path(raw["output"]["checkpointDir"]), {9: [2048]}, "9", NOW - 5 * MIN)
    write_provenance(raw, NOW - HOUR)
    result = collect(load(raw), now=NOW)
    assert result["verdict"] == "degenerate"
    reasons = " | ".join(f["reason"] for f in result["findings"])
    assert "rollout/raw_reward is 0.0 for the last 10 rollouts" in reasons
    assert "rollout/repetition_frac averages 0.6 " in reasons
    assert "train/grad_norm is nan at 2 of the last 10 train steps (latest at step 23)" in reasons
    assert result["metrics"][GRAD_NORM]["nonFinite"] == 2


def test_torch_summary_writer_healthy_run(tmp_path: Path) -> None:
    raw = make_spec(tmp_path)
    rewards = [0.2 + 0.02 * i for i in range(12)]
    write_with_torch(Path(raw["output"]["tensorboardDir"]), run_rows(rewards, LOW_REPETITION, NOW - MIN))
    result = collect(load(raw), now=NOW)
    assert result["verdict"] == "healthy", result["findings"]
    assert result["metrics"][REWARD]["points"] == 12
    assert result["metrics"][REWARD]["last"] == pytest.approx(0.42, abs=1e-6)
