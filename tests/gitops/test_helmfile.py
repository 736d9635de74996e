"""The Helmfile environments lint and render with the real helmfile and Helm."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HELMFILE = ROOT / "examples" / "helmfile" / "helmfile.yaml.gotmpl"


def helmfile(env: str, *command: str) -> subprocess.CompletedProcess[str]:
    binary, helm = shutil.which("helmfile"), shutil.which("helm4")
    assert binary and helm, "helmfile and helm4 come from make tools (.tools/bin)"
    args = [binary, "--file", str(HELMFILE), "--environment", env, "--helm-binary", helm, *command]
    return subprocess.run(args, capture_output=True, text=True, check=False, cwd=ROOT)


def rendered(env: str) -> list[dict[str, Any]]:
    done = helmfile(env, "template", "--skip-deps")
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def run_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    for obj in objects:
        if (
            obj["kind"] == "ConfigMap"
            and "run.json" in obj.get("data", {})
            and not obj["metadata"].get("annotations")
        ):
            return dict(json.loads(obj["data"]["run.json"]))
    raise AssertionError("no run spec ConfigMap rendered")


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_lint(env: str) -> None:
    done = helmfile(env, "lint", "--skip-deps")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_no_secret_is_rendered(env: str) -> None:
    # Secrets are referenced by name and key; the chart never carries their values.
    assert not [o for o in rendered(env) if o["kind"] == "Secret"]


def test_dev_is_one_node_without_kuberay() -> None:
    objects = rendered("dev")
    spec = run_spec(objects)
    assert spec["mode"] == "singleNode"
    assert spec["release"]["namespace"] == "miles-dev"
    assert not [o for o in objects if o["kind"] == "RayCluster"]


def test_staging_is_disaggregated_over_two_worker_pods() -> None:
    spec = run_spec(rendered("staging"))
    assert spec["topology"]["colocate"] is False
    assert spec["topology"]["workerReplicas"] == 2
    assert "@sha256:" in spec["images"]["miles"]


def test_prod_layers_moe_hyperpod_and_reward() -> None:
    objects = rendered("prod")
    spec = run_spec(objects)
    assert spec["model"]["profile"] == "qwen3-30B-A3B"
    assert spec["checks"]["nodes"]["cluster"] == "hyperpod"
    assert spec["reward"]["serviceEnabled"] is True
    assert spec["reward"]["url"].startswith("http://miles-prod-")
    assert spec["storage"]["kind"] == "fsxStatic"
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "PersistentVolume", "PersistentVolumeClaim", "RayCluster"} <= kinds
