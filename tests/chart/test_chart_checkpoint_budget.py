"""The checkpoint budget the chart computes (the run spec's output.checkpointBudget.savedCheckpoints, which
preflight compares with the claim): the most checkpoints on disk at once, rendered by the real Helm, against a
step-by-step replay of what miles and Megatron do. miles saves after rollout r when (r+1) % saveInterval == 0
and after the last rollout; with --save-retain-interval R, Megatron deletes the previous checkpoint once the
next is written unless its id is 0 or a multiple of R. The chart computes it in one pass over the saves: a run
of 100000 rollouts saving after each renders like any other (a list rebuilt per save took minutes there)."""

from __future__ import annotations

import pytest
from chartlib import docs, render, run_spec


def replayed_peak(num_rollout: int, save_interval: int, retain_interval: int) -> int:
    kept: list[int] = []
    peak = 0
    for rollout in range(num_rollout):
        if (rollout + 1) % save_interval and rollout != num_rollout - 1:
            continue
        kept.append(rollout)
        peak = max(peak, len(kept))
        if retain_interval and len(kept) >= 2:
            previous = kept[-2]
            if previous > 0 and previous % retain_interval:
                kept.remove(previous)
    return peak


# (numRollout, saveInterval, retainInterval): retainInterval is 0 (keep all) or a multiple of saveInterval
CASES = [
    (1, 1, 0),
    (2, 1, 1),
    (3, 1, 2),
    (10, 3, 0),
    (10, 3, 6),
    (37, 4, 8),
    (64, 8, 16),
    (99, 2, 6),
    (100, 7, 21),
    (1000, 3, 9),
    (3000, 20, 200),
    (100000, 1, 1000),
]


@pytest.mark.parametrize(("num_rollout", "save_interval", "retain_interval"), CASES)
def test_the_most_checkpoints_on_disk_at_once(
    num_rollout: int, save_interval: int, retain_interval: int
) -> None:
    spec = run_spec(
        docs(
            render(
                "helm4",
                "colocated",
                (
                    "--set", f"recipe.numRollout={num_rollout}",
                    "--set", f"recipe.saveInterval={save_interval}",
                    "--set", f"recipe.checkpoint.retainInterval={retain_interval}",
                ),
            )
        )
    )  # fmt: skip
    budget = spec["output"]["checkpointBudget"]
    assert budget["savedCheckpoints"] == replayed_peak(num_rollout, save_interval, retain_interval)
    assert (
        budget["totalBytes"] == budget["savedCheckpoints"] * budget["checkpointBytes"] + 2 * budget["hfBytes"]
    )
