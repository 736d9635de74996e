"""docs/runbook.md's code blocks and their marks: `runbook: local` blocks run on the testbed, `runbook: aws`
blocks need AWS. Shared by the docs test (every block marked) and the e2e test (the local ones run)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
MARK = re.compile(r"<!-- runbook: (local|aws) -->\n$")


@dataclass(frozen=True)
class Block:
    mark: str | None  # "local", "aws", or None when the block is not marked
    language: str
    code: str
    line: int


def blocks(text: str) -> list[Block]:
    found = []
    for m in FENCE.finditer(text):
        mark = MARK.search(text, 0, m.start())
        marked = mark is not None and mark.end() == m.start()
        found.append(
            Block(
                mark.group(1) if mark is not None and marked else None,
                m.group(1),
                m.group(2),
                text.count("\n", 0, m.start()) + 1,
            )
        )
    return found


def local_script() -> str:
    """The local blocks, in order, as one bash script that stops at the first failing command."""
    code = [b.code for b in blocks(RUNBOOK.read_text()) if b.mark == "local"]
    return "set -euo pipefail\nset -x\n" + "\n".join(code)
