"""helmfile's dev environment installs on the local testbed with the real helmfile and Helm.

`helmfile apply` first diffs through the helm-diff plugin, and the Go module proxy refuses every
github.com/databus23/helm-diff/v3 version we asked for (v3.9.14 to v3.14.0), so the plugin cannot be
built here; `sync` runs the same install (hooks included) without the diff.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness as tb
import pytest
import yaml

pytestmark = pytest.mark.cluster

HELMFILE = tb.REPO / "examples" / "helmfile" / "helmfile.yaml.gotmpl"
DEV = tb.REPO / "examples" / "helmfile" / "environments"


def test_dev_environment_syncs(namespace: str, inputs_ready: Callable[..., Any], tmp_path: Path) -> None:
    dev = yaml.safe_load((DEV / "dev.yaml").read_text())
    release = dev["release"]
    claim = yaml.safe_load((DEV / "dev-release.yaml").read_text())["storage"]["existingClaim"]
    tb.run([str(tb.REPO / "testbed" / "storage.sh"), namespace, claim])
    # dev is singleNode: the image's version report would run on the GPU pool, which kwok simulates here
    no_report = tmp_path / "no-image-report.yaml"
    no_report.write_text(yaml.safe_dump({"hooks": {"prepareData": {"imageFacts": False}}}))
    layered = [tb.OVERLAY, *(tb.VALUES / f for f in dev["scenarios"]), DEV / "dev-release.yaml", no_report]
    inputs_ready(layered, release, namespace)
    state = tmp_path / "testbed-state.yaml"
    state.write_text(
        yaml.safe_dump({"namespace": namespace, "preValueFiles": [str(tb.OVERLAY), str(no_report)]})
    )
    args = ["--file", str(HELMFILE), "--environment", "dev", "--state-values-file", str(state)]
    args += ["--helm-binary", str(tb.TOOLS_BIN / "helm4")]
    started = time.time()
    tb.run([str(tb.TOOLS_BIN / "helmfile"), *args, "sync"], timeout=900)
    assert tb.hook_steps(tb.journal(namespace, since=started)) == ["preflight", "prepare-data", "convert"]
    assert tb.kget("rayclusters.ray.io", namespace)["items"] == [], "dev is singleNode: no RayCluster"
    jobs = tb.kget("jobs", namespace, selector=f"app.kubernetes.io/instance={release}")["items"]
    assert len(jobs) == 1, [j["metadata"]["name"] for j in jobs]
    tb.run([str(tb.TOOLS_BIN / "helmfile"), *args, "destroy"], timeout=600)
    assert tb.kget("jobs", namespace, selector=f"app.kubernetes.io/instance={release}")["items"] == []
