"""The score sums behind the dashboard's mean reward, for scores of either sign."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from miles_reward.metrics import Metrics


def sums(metrics: Metrics) -> dict[str, float]:
    for family in text_string_to_metric_families(metrics.render().decode()):
        if family.name == "reward_score":
            return {s.labels["sign"]: s.value for s in family.samples}
    raise AssertionError("reward_score not exported")


def test_both_sums_are_exported_at_zero_before_any_score() -> None:
    assert sums(Metrics("reward_model", 1, 8)) == {"positive": 0.0, "negative": 0.0}


def test_negative_scores_add_to_their_own_sum_and_non_finite_ones_to_none() -> None:
    metrics = Metrics("reward_model", 1, 8)
    metrics.scores_given([1.5, -0.25, 0.0, -2.0, math.nan, math.inf])
    metrics.scores_given([0.5])
    assert sums(metrics) == {"positive": 2.0, "negative": 2.25}
