"""Session fixture: one real local Ray cluster (see ray_testlib.LocalRay) for submit/status/verify."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from ray_testlib import BIN, LocalRay


@pytest.fixture(scope="session")
def local_ray() -> Iterator[LocalRay]:
    if not (BIN / "ray").exists():
        pytest.fail(f"ray CLI not found next to {sys.executable}; install ci/requirements.txt into the venv")
    cluster = LocalRay()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
