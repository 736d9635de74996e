"""docs/runbook.md followed on the testbed: every `runbook: local` block, in order, in one bash (Helm 4, the
real hooks, KubeRay and Ray head). Three stand-ins, as the runbook says: `helm` adds the testbed's cluster
overlay to install and upgrade, the model comes converted from the local mirror, HF_TOKEN is a placeholder."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness as tb
import pytest
import runbook
import yaml

pytestmark = pytest.mark.cluster

HELM_WRAPPER = """#!/usr/bin/env bash
# the testbed's cluster overlay after the runbook's values (the nodes, images and storage of this testbed)
case "${1:-}" in
  install|upgrade) verb=$1; shift; exec "%(helm)s" "$verb" "$@" -f "%(overlay)s" ;;
  *) exec "%(helm)s" "$@" ;;
esac
"""


def test_the_runbooks_local_commands_run_on_the_testbed(
    namespace: str, inputs_ready: Callable[..., Any], tmp_path: Path
) -> None:
    release = "miles"
    work = tmp_path / "work"
    (work / "bin").mkdir(parents=True)
    for name in ("charts", "values"):
        (work / name).symlink_to(tb.REPO / name)
    cluster_values = {"secrets": {"huggingface": {"existingSecret": "hf-token"}}}
    (work / "my-cluster.yaml").write_text(yaml.safe_dump(cluster_values))
    wrapper = work / "bin" / "helm"
    wrapper.write_text(HELM_WRAPPER % {"helm": tb.TOOLS_BIN / "helm4", "overlay": tb.OVERLAY})
    wrapper.chmod(0o755)
    # the runbook creates the namespace's Secret itself
    tb.kubectl("-n", namespace, "delete", "secret", "hf-token")
    scenario = tb.VALUES / "values-colocated.yaml"
    inputs_ready([scenario, work / "my-cluster.yaml", tb.OVERLAY], release, namespace)

    env = dict(
        tb.tool_env(),
        NS=namespace,
        RELEASE=release,
        HF_TOKEN="hf_testbed_placeholder",
        PATH=f"{work / 'bin'}:{tb.TOOLS_BIN}:{tb.REPO / '.venv' / 'bin'}:{os.environ.get('PATH', '')}",
    )
    res = tb.run(["bash", "-c", runbook.local_script()], check=False, timeout=900, env=env, cwd=work)
    said = res.out + res.err
    assert res.rc == 0, said[-6000:]
    assert "Phase:          Succeeded" in said or "Phase: Succeeded" in said.replace("  ", " "), said[-4000:]
    assert not (work / "hf-token.txt").exists(), "the runbook leaves the token file behind"
    assert tb.kget("rayclusters.ray.io", namespace)["items"] == []
    assert tb.kget("secrets", namespace, name="hf-token")["data"]["token"]
