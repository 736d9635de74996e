"""docs/runbook.md: every code block says whether the testbed runs it (tests/e2e/test_runbook.py) or it needs
AWS, so no command joins the runbook unrun without saying why."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
import runbook


def test_every_code_block_is_marked_local_or_aws() -> None:
    found = runbook.blocks(runbook.RUNBOOK.read_text())
    unmarked = [f"line {b.line}" for b in found if b.mark is None]
    assert not unmarked, f"code blocks of docs/runbook.md without a runbook: local/aws mark: {unmarked}"
    assert all(b.language == "bash" for b in found), [(b.line, b.language) for b in found]


def test_the_path_from_install_to_uninstall_is_run_locally() -> None:
    script = runbook.local_script()
    for step in ("kubectl create namespace", "helm install", "helm test", "helm uninstall"):
        assert step in script, f"no local block of docs/runbook.md runs {step!r}"


def test_an_unmarked_block_is_found() -> None:
    text = "<!-- runbook: local -->\n```bash\necho a\n```\n\ntext\n```bash\necho b\n```\n"
    assert [b.mark for b in runbook.blocks(text)] == ["local", None]
