"""Rule-based answer checking with math-verify: 1.0 when the final answer equals the label.

Runs inside a worker process. math-verify's own signal-based timeouts are switched off on purpose:
when they fire the library answers "not equal", which would turn a slow check into a 0.0 reward. The
pool's hard timeout (kill the worker, answer 503) is the only timeout.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

from math_verify import parse, verify

from miles_reward.outcome import Failed, Outcome, Sample, Scored

# math-verify warns once that its timeouts are off; that is deliberate here.
logging.getLogger("math_verify").setLevel(logging.ERROR)


def _as_latex(label: str) -> str:
    """Labels are bare answers ("34", "\\frac{1}{2}"); math-verify extracts LaTeX from $...$."""
    if "$" in label or "\\boxed" in label or "\\(" in label or "\\[" in label:
        return label
    return f"${label}$"


@lru_cache(maxsize=4096)
def parse_label(label: str) -> tuple[Any, ...]:
    """The label's parsed forms; empty when it holds nothing math-verify can turn into math.

    Cached: each prompt's label is checked n_samples_per_prompt times in a row.
    """
    parsed = parse(_as_latex(label), parsing_timeout=None)
    if not any(not isinstance(item, str) for item in parsed):
        return ()
    return tuple(parsed)


def score(sample: Sample) -> Outcome:
    label = sample.label
    if label is None or not label.strip():
        return Failed("unusable_label", "label is missing or empty; math_verify needs a reference")
    gold = parse_label(label.strip())
    if not gold:
        return Failed("unusable_label", f"label {label[:80]!r} does not parse as a math answer")
    predicted = parse(sample.response, parsing_timeout=None)
    if not predicted:
        return Scored(0.0)
    ok = verify(list(gold), predicted, timeout_seconds=None)
    return Scored(1.0 if ok else 0.0)


def warm_up() -> None:
    """Pays the first-call costs (regex compilation, grammar load) before serving."""
    score(Sample("warm-up", "The answer is $\\boxed{\\frac{1}{2}}$.", "0.5"))
