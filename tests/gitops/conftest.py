"""Shared helpers for the GitOps tests: the real Helm and helmfile binaries built by make tools."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "miles"


def find_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not on PATH: run `make tools` (it builds .tools/bin/{name})")
    return path


@pytest.fixture(scope="session")
def tool() -> Callable[[str], str]:
    """tool(name) -> the path of a tool built by make tools; fails the test when it is missing."""
    return find_tool


@pytest.fixture(scope="session")
def render() -> Callable[..., list[dict[str, Any]]]:
    """render(*value_files, helm="helm4") -> the rendered objects of charts/miles."""

    def _render(*value_files: str, helm: str = "helm4") -> list[dict[str, Any]]:
        args = [find_tool(helm), "template", "miles", str(CHART), "--namespace", "miles"]
        for name in value_files:
            args += ["-f", str(ROOT / name)]
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc]

    return _render
