"""Fixtures for the hook tests; helpers live in hooks_testlib.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hooks_testlib import spec_in


@pytest.fixture
def spec_raw(tmp_path: Path) -> dict[str, Any]:
    return spec_in(tmp_path)
