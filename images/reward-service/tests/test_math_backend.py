"""The math_verify scoring function itself, in-process (real math-verify, no service)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

from miles_reward import math_backend
from miles_reward.config import ANSWER_MODES
from miles_reward.outcome import Failed, Sample, Scored

SCORERS = {mode: math_backend.make_scorer(mode) for mode in ANSWER_MODES}
score = SCORERS["anchored"]

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
    for mode in ANSWER_MODES:
        assert SCORERS[mode](Sample("Solve it.", response, label)) == Scored(expected), mode


@pytest.mark.parametrize(
    "response",
    [
        "So the sum is $41$. Answer: 41",
        "The final answer is $41$.",
        "Hence the final answer is 41.",
        "We conclude that the answer is $\\frac{82}{2}$.",
        "Thus $\\boxed{41}$",
    ],
)
def test_anchored_accepts_each_way_of_declaring_the_answer(response: str) -> None:
    assert SCORERS["anchored"](Sample("p", response, "41")) == Scored(1.0)


def test_unanchored_last_expression_scores_only_in_last_expression_mode() -> None:
    """A chain of thought cut off at the length limit, whose last expression equals the label."""
    cut = Sample(
        "p",
        "Telescoping, the partial sums collapse to $1 - \\frac{1}{2}$, so the value is $41$",
        "41",
    )
    assert SCORERS["anchored"](cut) == Scored(0.0)
    assert SCORERS["last_expression"](cut) == Scored(1.0)


@pytest.mark.parametrize("label", [None, "", "   ", "{"])
def test_unusable_label_is_a_failure_not_a_zero(label: str | None) -> None:
    outcome = score(Sample("p", "The answer is $\\boxed{1}$.", label))
    assert isinstance(outcome, Failed)
    assert outcome.kind == "unusable_label"
    assert outcome.status == 422


def test_label_already_in_latex_delimiters() -> None:
    assert score(Sample("p", "so $\\boxed{7}$", "$7$")) == Scored(1.0)
    assert score(Sample("p", "so $\\boxed{7}$", "\\boxed{7}")) == Scored(1.0)


CORPUS = Path(__file__).resolve().parents[3] / "tests" / "bench" / "reward" / "corpus.jsonl"


def test_the_anchor_precheck_skips_only_what_math_verify_would_not_extract() -> None:
    """declares_an_answer() lets anchored checks skip math-verify: prove, against the library,
    that math-verify's anchored extraction finds nothing in every response it skips."""
    responses = [json.loads(line)["response"] for line in CORPUS.read_text().splitlines()]
    responses += [
        "The result: $\\frac{1}{2}$. Therefore $x = 3$.",
        "Final: 42",
        "\\[ x = 3 \\] so the value is $\\fbox{3}$",
        "Result is 41. So it is 41.",
        "Hence ${41}$ is the ANS.",
    ]
    skipped = [r for r in responses if not math_backend.declares_an_answer(r)]
    assert len(skipped) >= 50, "the corpus should hold truncated responses without an answer"
    extraction = [
        LatexExtractionConfig(try_extract_without_anchor=False),
        ExprExtractionConfig(try_extract_without_anchor=False),
    ]
    for response in skipped:
        assert parse(response, extraction_config=extraction, parsing_timeout=None) == [], response
