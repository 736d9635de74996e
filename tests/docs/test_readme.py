"""README.md states the two set-up commands and its scenario table matches what the chart renders."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_scenario_table_is_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "render_scenarios.py"), "--check-readme"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr


def test_quick_start_is_exactly_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [line.strip() for line in quick.splitlines() if line.startswith("    ")]
    assert commands == ["make demo", "make test"]
