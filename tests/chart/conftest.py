"""Fixtures for tests/chart (helpers live in chartlib.py, a name no other test tree uses)."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from chartlib import REPO, run


@pytest.fixture(scope="session")
def kubeconform_schemas(tmp_path_factory) -> pathlib.Path:
    """Schemas generated at test time from the pinned Kubernetes swagger and KubeRay CRDs."""
    out = tmp_path_factory.mktemp("kubeconform-schemas")
    run(
        [
            sys.executable,
            str(REPO / "ci" / "kubeconform" / "gen-schemas.py"),
            "--out",
            str(out),
        ]
    )
    return out
