"""Every spelling of a setting the chart renders, refused in recipe.extraArgs, is one the real miles parser
takes as that setting: argparse keeps the last value, so each would silently replace the chart's.

charts/miles/files/train-flags.json is generated from the pinned parser (ci/miles-contract/train_flags.py;
`make verify-generated` fails when it drifts); here the parser itself parses the chart's flag followed by the
user's spelling, and the chart, rendered by the real Helm, refuses that spelling.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from contractlib import SCENARIOS, contract_run, render, run_spec

REPO = Path(__file__).resolve().parents[2]
GENERATOR_DIR = REPO / "ci" / "miles-contract"

# (the chart's flag, the user's spelling of the same setting, the value it would leave)
OVERRIDES = [
    ("--lr", ["--lr=5e-6"], 5e-6),
    ("--tensor-model-parallel-size", ["--tensor-model-parallel-size=4"], 4),
    ("--sglang-expert-parallel-size", ["--sglang-ep", "4"], 4),
    ("--save-interval", ["--persistent-save-interval", "5"], 5),
]
MOE_EP2 = ("recipe.sglangExpertParallel=2",)

# the chart's argv, then each spelling after it, through the parser miles builds (parse only)
_PARSE_AFTER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from train_flags import miles_parser
parser = miles_parser()
table = json.load(open(sys.argv[2]))
chart_argv, overrides = json.loads(sys.stdin.read())
out = []
for own, user, _ in overrides:
    assert own in chart_argv, own
    ns, unknown = parser.parse_known_args(chart_argv + user)
    out.append({"dest": table["destOf"][own], "value": getattr(ns, table["destOf"][own]), "unknown": unknown})
print(json.dumps(out))
"""


def test_the_real_parser_takes_each_refused_spelling_as_the_charts_setting() -> None:
    chart_argv = run_spec(render(SCENARIOS["moe"], *MOE_EP2))["train"]["args"]
    table = REPO / "charts" / "miles" / "files" / "train-flags.json"
    out = contract_run(["-c", _PARSE_AFTER, str(GENERATOR_DIR), str(table)], [chart_argv, OVERRIDES])
    results = json.loads(out)
    for (own, user, expected), got in zip(OVERRIDES, results, strict=True):
        assert not got["unknown"], (user, got)
        assert got["value"] == pytest.approx(expected), f"{own} then {user}: {got['dest']} = {got['value']}"


@pytest.mark.parametrize("own,user,_", OVERRIDES, ids=[" ".join(u) for _, u, _ in OVERRIDES])
def test_the_chart_refuses_each_spelling(own: str, user: list[str], _: float) -> None:
    with pytest.raises(
        RuntimeError, match=r"recipe\.extraArgs\[0\]: expected a flag the chart does not render, found "
    ):
        render(SCENARIOS["moe"], *MOE_EP2, f"recipe.extraArgs={{{','.join(user)}}}")


def test_the_table_says_how_the_parser_matches() -> None:
    """The chart compares whole flags: right while the parser takes no abbreviations (Megatron builds it with
    allow_abbrev=False); the chart's rule reads a prefix as the flag it abbreviates otherwise."""
    table = json.loads((REPO / "charts" / "miles" / "files" / "train-flags.json").read_text())
    assert table["allowAbbrev"] is False
    assert table["prefixChars"] == "-"
    assert table["destOf"]["--lr"] == "lr"
