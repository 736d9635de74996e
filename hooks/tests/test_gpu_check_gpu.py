"""GPU tests of the node checks: run on a machine with CUDA GPUs (the device run), skipped elsewhere."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from miles_hooks import cli
from miles_hooks.core import gpu as gpu_check


def _gpus() -> tuple[int, str]:
    if importlib.util.find_spec("torch") is None:
        return 0, "torch is not installed here"
    import torch  # noqa: PLC0415

    if not torch.cuda.is_available():
        return 0, "no CUDA GPU visible here"
    return torch.cuda.device_count(), ""


NGPUS, WHY = _gpus()
pytestmark = pytest.mark.skipif(NGPUS == 0, reason=f"GPU tests need CUDA GPUs: {WHY}")

QUICK = [
    "--spec",
    "",
    "--sizes",
    "1M,256M",
    "--check-size",
    "256M",
    "--iters",
    "5",
    "--warmup",
    "2",
    "--matmul-iters",
    "10",
    "--copy-size",
    "512M",
    "--timeout",
    "240",
]
# The same settings for check_node, by flag name (what the CLI would pass).
QUICK_FLAGS: dict[str, Any] = {
    "sizes": "1M,256M",
    "check_size": "256M",
    "iters": 5,
    "warmup": 2,
    "matmul_iters": 10,
    "copy_size": "512M",
    "timeout": 240.0,
}


def test_nvml_health_sees_the_gpus() -> None:
    from miles_hooks.core.gpu.nvml import node_health  # noqa: PLC0415

    health = node_health()
    assert health["error"] is None
    assert health["device_count"] >= NGPUS
    for gpu in health["gpus"]:
        assert gpu["temperature_c"] is not None
        assert gpu["power_w"] is not None


def test_check_node_measures_every_gpu_and_pair(tmp_path: Path) -> None:
    # loose thresholds: this test checks the plumbing, the benchmark checks the figures
    report: dict[str, Any] = gpu_check.check_node(
        overrides={
            **QUICK_FLAGS,
            "expected_gpus": NGPUS,
            "tolerance": 0.05,
            "allow_throttle": "0x1ff",
            "out_dir": str(tmp_path),
        }
    )
    assert report["exit_code"] == 0, report["failures"]
    assert len(report["gpus"]) == NGPUS
    assert all(g["matmul_tflops"] > 10 and g["copy_gbps"] > 100 for g in report["gpus"])
    if NGPUS > 1:
        assert report["allreduce"][0]["correct"] is True
        assert len(report["sendrecv"]) == NGPUS * (NGPUS - 1) // 2
        assert all(s["correct"] for s in report["sendrecv"])
    assert (tmp_path / "gpu-check.json").exists()
    assert (tmp_path / "gpu-check.png").exists()


def test_planted_gpu_count_fault_is_named(tmp_path: Path) -> None:
    code = cli.main(
        ["gpu-check", *QUICK, "--expected-gpus", str(NGPUS + 1), "--out-dir", str(tmp_path), "--no-plot"]
    )
    assert code == 1
    import json  # noqa: PLC0415

    report = json.loads((tmp_path / "gpu-check.json").read_text())
    counts = [f for f in report["failures"] if f["check"] == "gpu_count"]
    assert counts, report["failures"]
    assert f"expected {NGPUS + 1}" in counts[0]["message"]
