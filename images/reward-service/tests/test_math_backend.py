"""The math_verify scoring function itself, in-process (real math-verify, no service)."""

from __future__ import annotations

import pytest

from miles_reward import math_backend
from miles_reward.outcome import Failed, Sample, Scored

LONG_REASONING = (
    "We start by writing the equation as $x^2 - 5x + 6 = 0$. Factoring gives $(x-2)(x-3)=0$, "
    "so the roots are $2$ and $3$. " * 20
)


@pytest.mark.parametrize(
    ("response", "label", "expected"),
    [
        ("Therefore the answer is $\\boxed{34}$.", "34", 1.0),
        ("Therefore the answer is $\\boxed{35}$.", "34", 0.0),
        ("So we get \\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("So we get \\boxed{0.5}", "\\frac{1}{2}", 1.0),
        ("The result is $\\boxed{2\\sqrt{3}}$", "\\sqrt{12}", 1.0),
        ("The result is $\\boxed{3\\sqrt{2}}$", "\\sqrt{12}", 0.0),
        (LONG_REASONING + "The product of the roots is $\\boxed{6}$.", "6", 1.0),
        ("I could not finish the problem.", "6", 0.0),
        ("", "6", 0.0),
        ("Answer: $\\boxed{(1, 2)}$", "(1,2)", 1.0),
    ],
)
def test_scores(response: str, label: str, expected: float) -> None:
    assert math_backend.score(Sample("Solve it.", response, label)) == Scored(expected)


@pytest.mark.parametrize("label", [None, "", "   ", "{"])
def test_unusable_label_is_a_failure_not_a_zero(label: str | None) -> None:
    outcome = math_backend.score(Sample("p", "The answer is $\\boxed{1}$.", label))
    assert isinstance(outcome, Failed)
    assert outcome.kind == "unusable_label"
    assert outcome.status == 422


def test_label_already_in_latex_delimiters() -> None:
    assert math_backend.score(Sample("p", "so $\\boxed{7}$", "$7$")) == Scored(1.0)
    assert math_backend.score(Sample("p", "so $\\boxed{7}$", "\\boxed{7}")) == Scored(1.0)
