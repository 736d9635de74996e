"""Writes corpus.jsonl: a fixed set of (prompt, response, label) triples shaped like a GRPO rollout
of a math dataset (DAPO-style prompts, n=8 responses per prompt, chain-of-thought responses with
LaTeX, integer labels as in DAPO-Math-17k and AIME). Deterministic: the same seed gives the same file.

    python tests/bench/reward/make_corpus.py [--prompts 64] [--samples-per-prompt 8] [--short]

corpus.jsonl: chain-of-thought responses of 400-4000 characters (the realistic case);
corpus-short.jsonl (--short): one sentence and the final answer (checks well under a millisecond,
so HTTP and process overhead dominate - the case the service's overhead goals are about).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent

INSTRUCTION = (
    "Solve the following math problem step by step. The last line of your response should be of "
    "the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
PROBLEMS = [
    "Let $a$ and $b$ be positive integers such that $a + b = {p}$ and $\\gcd(a, b) = {q}$. Find the "
    "number of ordered pairs $(a, b)$.",
    "A sequence satisfies $x_1 = {q}$ and $x_{{n+1}} = x_n + 2n$ for $n \\ge 1$. Compute "
    "$x_{{{p}}}$ modulo $1000$.",
    "Triangle $ABC$ has side lengths $AB = {q}$, $BC = {p}$ and $CA = {r}$. Find the area of the "
    "triangle, expressed in simplest form.",
    "How many integers $n$ with $1 \\le n \\le {p}$ satisfy that $n^2 + {q}$ is divisible by {r}?",
    "Find the value of $\\sum_{{k=1}}^{{{p}}} \\frac{{1}}{{k(k+1)}}$ written as $\\frac{{m}}{{n}}$; "
    "report $m + n$.",
    "The polynomial $x^3 - {p}x^2 + {q}x - {r}$ has roots $r_1, r_2, r_3$. Find $r_1^2 + r_2^2 + r_3^2$.",
]
STEPS = [
    "First, we rewrite the condition as $({a}x - {b})({a}x + {b}) = {c}$, which gives "
    "$x^2 = \\frac{{{c} + {b}^2}}{{{a}^2}}$.",
    "Substituting $x = {a}$ into the expression yields ${a}^2 + {b} \\cdot {a} = {c}$.",
    "By the Euclidean algorithm, $\\gcd({c}, {b}) = \\gcd({b}, {c} \\bmod {b})$, so we reduce the "
    "problem step by step.",
    "Now we use Vieta's formulas: the sum of the roots is ${a}$ and the sum of pairwise products "
    "is ${b}$, hence $r_1^2 + r_2^2 + r_3^2 = {a}^2 - 2\\cdot {b}$.",
    "Wait, let me double-check this computation. We have ${a} \\times {b} = {c}$, and indeed "
    "${c} / {b} = {a}$, so the previous step is consistent.",
    "Telescoping, $\\frac{{1}}{{k(k+1)}} = \\frac{{1}}{{k}} - \\frac{{1}}{{k+1}}$, and the partial "
    "sums collapse to $1 - \\frac{{1}}{{{a}+1}}$.",
    "Counting the cases separately: when $n$ is even there are ${a}$ choices, and when $n$ is odd "
    "there are ${b}$ choices, giving ${c}$ in total.",
    "Let me consider the boundary case $n = {a}$ to make sure nothing is missed; the inequality "
    "${a} \\le {b}$ holds, so it is included.",
]
NON_INTEGER_LABELS = [
    ("\\frac{3}{4}", ["\\frac{3}{4}", "0.75", "\\dfrac{3}{4}"], ["\\frac{4}{3}", "0.7"]),
    ("2\\sqrt{3}", ["2\\sqrt{3}", "\\sqrt{12}"], ["3\\sqrt{2}", "\\sqrt{3}"]),
    ("\\frac{\\pi}{6}", ["\\frac{\\pi}{6}", "\\pi/6"], ["\\frac{\\pi}{3}"]),
    ("x^2 + 2x + 1", ["(x+1)^2", "x^2 + 2x + 1"], ["x^2 + 1"]),
    ("(1, 3)", ["(1, 3)", "(1,3)"], ["[1, 3]", "(1, 2)"]),
    ("-\\frac{7}{2}", ["-\\frac{7}{2}", "-3.5"], ["\\frac{7}{2}"]),
]


def reasoning(rng: random.Random, chars: int) -> str:
    parts: list[str] = []
    size = 0
    while size < chars:
        a, b = rng.randint(2, 60), rng.randint(2, 60)
        step = rng.choice(STEPS).format(a=a, b=b, c=a * b)
        parts.append(step)
        size += len(step) + 1
    return " ".join(parts)


def make(
    prompts: int, per_prompt: int, seed: int, short: bool = False, integer_share: float = 1.0
) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows: list[dict[str, str]] = []
    for _ in range(prompts):
        p, q, r = rng.randint(10, 999), rng.randint(2, 50), rng.randint(3, 40)
        prompt = INSTRUCTION + rng.choice(PROBLEMS).format(p=p, q=q, r=r)
        if rng.random() < integer_share:
            answer = rng.randint(0, 999)
            label, right, wrong = str(answer), [str(answer)], [str(answer + rng.randint(1, 9))]
        else:
            label, right, wrong = rng.choice(NON_INTEGER_LABELS)
        for _ in range(per_prompt):
            body = reasoning(rng, 1 if short else rng.choice([400, 900, 1600, 2500, 4000]))
            roll = rng.random()
            if roll < 0.45:
                final = f"\n\nTherefore, the final answer is $\\boxed{{{rng.choice(right)}}}$."
            elif roll < 0.80:
                final = f"\n\nTherefore, the final answer is $\\boxed{{{rng.choice(wrong)}}}$."
            elif roll < 0.90:
                final = f"\n\nAnswer: {rng.choice(right + wrong)}"
            else:  # truncated at the length limit: no final answer
                final = ""
                body = body[: int(len(body) * 0.8)]
            rows.append({"prompt": prompt, "response": body + final, "label": label})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--samples-per-prompt", type=int, default=8)
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument(
        "--short",
        action="store_true",
        help="one reasoning sentence per response (checks cost well under 1 ms: HTTP-bound)",
    )
    parser.add_argument(
        "--integer-share",
        type=float,
        default=1.0,
        help="share of integer labels (1.0 = DAPO-Math-17k/AIME, whose labels are all integers); "
        "the rest are fractions, radicals, polynomials and intervals, whose symbolic comparison "
        "costs 10-100x more",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    out = args.out or HERE / ("corpus-short.jsonl" if args.short else "corpus.jsonl")
    rows = make(args.prompts, args.samples_per_prompt, args.seed, args.short, args.integer_share)
    with out.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"wrote {len(rows)} samples to {out}")


if __name__ == "__main__":
    main()
