"""The MoE scenario's parallel layout on real GPUs with real Megatron (megatron-core).

The chart decides tensor, expert, expert-tensor and sequence parallelism for values-moe.yaml, and a
wrong combination only fails inside Megatron, at model build or the first training step; the argument
parser cannot see it. These tests take the layout from the rendered run spec (helm, or a spec rendered
elsewhere and named by MILES_RENDERED_MOE_SPEC where there is no helm, as on the GPU machines) and run
one forward, backward and optimizer step of a tiny model of the profile's shape (tests/gpu/moe_step.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
STEP = Path(__file__).resolve().parent / "moe_step.py"

pytestmark = pytest.mark.gpu


def gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def megatron_core() -> bool:
    import importlib.util

    return importlib.util.find_spec("megatron.core") is not None


@pytest.fixture(scope="module")
def moe_spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if gpus() == 0:
        pytest.skip("needs an NVIDIA GPU (run on the GPU machine; see docs/recipes.md)")
    if not megatron_core():
        pytest.skip("needs megatron-core (pip install megatron-core==0.19.2)")
    rendered = os.environ.get("MILES_RENDERED_MOE_SPEC")
    if rendered:
        return Path(rendered)
    sys.path.insert(0, str(REPO / "tests" / "contract"))
    from contractlib import SCENARIOS, render, run_spec

    out = tmp_path_factory.mktemp("moe") / "run.json"
    out.write_text(json.dumps(run_spec(render(SCENARIOS["moe"]))))
    return out


def run_step(spec: Path, tmp: Path, nproc: int, *flags: str) -> dict[str, Any]:
    out = tmp / "result.json"
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")
    torchrun = shutil.which("torchrun") or "torchrun"
    done = subprocess.run(
        [torchrun, f"--nproc-per-node={nproc}", str(STEP), "--spec", str(spec), "--out", str(out), *flags],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert out.exists(), f"no result (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(out.read_text())
    print(json.dumps(result, indent=1))
    return result


def test_moe_model_trains_a_step_on_one_gpu(moe_spec: Path, tmp_path: Path) -> None:
    result = run_step(moe_spec, tmp_path, 1, "--layout", "single")
    assert result["ok"], result
    assert result["lossFinite"] and result["expertParamsWithNonzeroGrad"] > 0
    spec = json.loads(moe_spec.read_text())
    assert result["experts"] == spec["model"]["architecture"]["numExperts"]


def test_chart_layout_trains_a_step_and_fails_without_sequence_parallelism(
    moe_spec: Path, tmp_path: Path
) -> None:
    spec = json.loads(moe_spec.read_text())
    topo = spec["topology"]
    need = max(topo["tensorParallel"], topo["expertTensorParallel"] * topo["expertParallel"])
    if gpus() < need:
        pytest.skip(f"the chart's MoE layout needs {need} GPUs of one host, found {gpus()}")
    assert topo["tensorParallel"] > 1 and topo["sequenceParallel"] is True
    result = run_step(moe_spec, tmp_path, need)
    assert result["ok"], result
    assert result["layout"]["sp"] is True and result["expertParamsWithNonzeroGrad"] > 0
    off = run_step(moe_spec, tmp_path, need, "--sequence-parallel", "off")
    assert not off["ok"]
    assert "enabled without also enabling sequence parallelism" in off["error"], off
