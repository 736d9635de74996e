"""The chart pushed to and pulled from an OCI registry on loopback installs on the local testbed."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness as tb
import pytest
from test_lifecycle import check_single_job, spec_fullname

pytestmark = pytest.mark.cluster


def test_pulled_chart_installs(namespace: str, inputs_ready: Callable[..., Any], tmp_path: Path) -> None:
    values = [tb.OVERLAY, tb.VALUES / "values-colocated.yaml"]
    inputs_ready(values, "miles-oci", namespace)
    env = {
        "OUT_DIR": str(tmp_path),
        "INSTALL": "1",
        "INSTALL_NAMESPACE": namespace,
        "HELM": str(tb.TOOLS_BIN / "helm4"),
    }
    done = tb.run([str(tb.REPO / "ci" / "package.sh")], env=env, timeout=900)
    assert "pushed and pulled back identical" in done.out
    spec = tb.run_spec(namespace, spec_fullname(namespace, "miles-oci"))
    check_single_job("miles-oci", namespace, spec)
    release = tb.helm("helm4", "status", "miles-oci", "-n", namespace, "-o", "json").out
    assert '"status":"deployed"' in release.replace(" ", "")
    assert os.path.basename(next(tmp_path.glob("pulled/miles-*.tgz"))).startswith("miles-")
