"""A resumed run whose optimiser schedule changed loads its checkpoint, with Megatron's own scheduler.

Every train command passes `--load <output>/checkpoints`, so an upgrade that changes the learning rate, the
decay
style or the number of rollouts (miles derives the decay length from it) resumes the saved run. Megatron's
`OptimizerParamScheduler.load_state_dict` compares each saved schedule value with the new one and asserts on
any
difference unless `--override-opt_param-scheduler` or `--use-checkpoint-opt_param-scheduler` is set. The chart
renders one of the two (recipe.checkpoint.resumeSchedule). Here the argv the chart renders before and after
each
change goes through the real parser (validation included, as a job start does), miles' own
`get_optimizer_param_scheduler` builds the scheduler from each, and the new one loads the old one's state
(tests/contract/resume_driver.py, one process): it takes the new values with the chart's default, keeps the
saved ones with `checkpoint`, and asserts exactly as upstream does with neither flag (the parsed args with the
chart's flag off, which is all that the flag changes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from contractlib import SCENARIOS, contract_run, document, model_args, render, run_spec

DRIVER = Path(__file__).resolve().parent / "resume_driver.py"
FIRST = ("recipe.lr=1e-6", "recipe.lrDecayStyle=linear", "recipe.numRollout=100")
RUNS = {
    "first": FIRST,
    "new-lr": ("recipe.lr=2e-6", "recipe.lrDecayStyle=linear", "recipe.numRollout=100"),
    "more-rollouts": ("recipe.lr=1e-6", "recipe.lrDecayStyle=linear", "recipe.numRollout=200"),
    "keep-checkpoint": (
        "recipe.lr=2e-6",
        "recipe.lrDecayStyle=constant",
        "recipe.numRollout=100",
        "recipe.checkpoint.resumeSchedule=checkpoint",
    ),
}
NEITHER = {"override_opt_param_scheduler": False, "use_checkpoint_opt_param_scheduler": False}
RESUMES = [
    ("first", "first", {}),
    ("first", "new-lr", {}),
    ("first", "more-rollouts", {}),
    ("first", "keep-checkpoint", {}),
    ("first", "new-lr", NEITHER),
    ("first", "more-rollouts", NEITHER),
]


def parse_document(sets: tuple[str, ...]) -> dict[str, Any]:
    spec = run_spec(render(SCENARIOS["colocated"], *sets))
    return document(spec, model_args(spec["model"]["profile"]) + spec["train"]["args"])


@pytest.fixture(scope="module")
def resumed() -> list[dict[str, Any]]:
    doc = {
        "runs": {name: parse_document(sets) for name, sets in RUNS.items()},
        "resumes": RESUMES,
        "steps": 10,
    }
    result = json.loads(contract_run([str(DRIVER)], doc))
    failed = {name: run["error"] for name, run in result["runs"].items() if not run["ok"]}
    assert not failed, failed
    out: list[dict[str, Any]] = result["resumes"]
    return out


def test_the_chart_renders_the_values_schedule_by_default(resumed: list[dict[str, Any]]) -> None:
    same = resumed[0]
    assert same["loaded"] and same["override"] and not same["use_checkpoint"], same


def test_a_changed_learning_rate_resumes_with_the_new_one(resumed: list[dict[str, Any]]) -> None:
    got = resumed[1]
    assert got["loaded"], got
    assert got["max_lr"] == pytest.approx(2e-6)


def test_more_rollouts_resume_with_the_longer_decay(resumed: list[dict[str, Any]]) -> None:
    """miles sets the decay length from --num-rollout: more rollouts change a saved schedule value too."""
    got = resumed[2]
    assert got["loaded"], got
    assert got["lr_decay_steps"] == 2 * resumed[0]["lr_decay_steps"]


def test_the_checkpoint_schedule_is_kept_when_asked(resumed: list[dict[str, Any]]) -> None:
    got = resumed[3]
    assert got["loaded"] and got["use_checkpoint"] and not got["override"], got
    assert (got["max_lr"], got["lr_decay_style"]) == (pytest.approx(1e-6), "linear")


@pytest.mark.parametrize("index,change", [(4, "learning rate"), (5, "total number of iterations")])
def test_without_the_charts_flag_megatron_asserts_at_load(
    resumed: list[dict[str, Any]], index: int, change: str
) -> None:
    got = resumed[index]
    assert not got["loaded"], got
    assert "do not match" in got["error"] and change in got["error"], got
