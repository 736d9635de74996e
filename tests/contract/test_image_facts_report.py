"""The miles image's version report (hooks core/image_facts.py) run by the contract venv's interpreter, which
holds the real miles package with its Megatron and SGLang and the torch they import: each version it reads
from metadata and source files without importing anything equals what importing the package says."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from contractlib import contract_python
from miles_hooks.core import image_facts

IMPORTED = """
import json, platform
import importlib.metadata as md
import torch, ray
from megatron.core import package_info
import sglang.version
print(json.dumps({
    "python": platform.python_version(), "ray": ray.__version__, "torch": md.version("torch"),
    "cuda": torch.version.cuda, "sglang": sglang.version.__version__,
    "megatron": f"{package_info.MAJOR}.{package_info.MINOR}.{package_info.PATCH}",
}))
"""


def test_the_report_agrees_with_the_imported_packages(tmp_path: Path) -> None:
    python = contract_python()
    out = tmp_path / "facts.json"
    subprocess.run([python, "-c", image_facts.REPORT_SCRIPT, str(out)], check=True, capture_output=True)
    reported = image_facts.parse(out.read_text())
    imported = json.loads(
        subprocess.run([python, "-c", IMPORTED], check=True, capture_output=True, text=True).stdout
    )
    # the vendored SGLang has no build metadata: importing it says setuptools-scm's fallback, the report says
    # unknown (tests/test_image_facts.py reads an installed SGLang's _version.py)
    assert imported["sglang"] == "0.0.0.dev0" and reported["sglang"] is None
    del imported["sglang"]
    for key, value in imported.items():
        assert reported[key] == value, (key, reported[key], value)
    assert all(reported[k] for k in ("python", "ray", "torch", "megatron", "miles")), reported
