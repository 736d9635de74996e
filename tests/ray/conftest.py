"""Session fixture: one real local Ray cluster (see ray_testlib.LocalRay) for submit/status/verify.

The cluster runs with token authentication. This process and the hook CLIs it starts get the token the
way a hook pod does, through its environment; set at collection, before any Ray client reads it (Ray
reads RAY_AUTH_MODE once per process).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from ray_testlib import AUTH_ENV, BIN, LocalRay

os.environ.update(AUTH_ENV)


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
