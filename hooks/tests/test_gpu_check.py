"""CPU-only tests of the GPU node checks: parsing, thresholds, report building, verdict."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import replace
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from miles_hooks import cli
from miles_hooks.core import gpu as gpu_check
from miles_hooks.core.errors import BadInput
from miles_hooks.core.gpu import options, ranks, runner, verdict
from miles_hooks.core.gpu.options import GIB, MIB, Options, Thresholds

SIZES = (MIB, 64 * MIB, GIB, 2 * GIB)
# The figures these tests judge against (measured on a two-H200 machine); in a run they come from the
# run spec's checks.gpu, which the chart fills.
H200 = Thresholds(
    tolerance=0.85,
    matmul_tflops=779.0,
    copy_gbps=4285.0,
    allreduce_busbw_gbps=333.0,
    sendrecv_busbw_gbps=363.0,
)


def main(argv: list[str]) -> int:
    """``miles-hooks gpu-check ARGV`` in this process; argparse's exits become the exit code."""
    try:
        return cli.main(["gpu-check", *argv])
    except SystemExit as exc:
        return 0 if exc.code in (0, None) else int(str(exc.code))


def parse_args(argv: list[str]) -> Options:
    """The options ``miles-hooks gpu-check ARGV`` would run with."""
    return cli.gpu_check_options(cli.parse_args(["gpu-check", *argv]))


# ---------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", 1), ("64M", 64 * MIB), ("2G", 2 * GIB), ("1.5K", 1536), ("4KiB", 4096), ("8mb", 8 * MIB)],
)
def test_parse_size(text: str, expected: int) -> None:
    assert options.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1X", "-1M", "0.3"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(BadInput):
        options.parse_size(text)


def test_parse_sizes_sweep_includes_max() -> None:
    assert options.parse_sizes("1M:2G:4") == (MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, GIB, 2 * GIB)
    assert options.parse_sizes("1M:2G:2")[-1] == 2 * GIB
    assert len(options.parse_sizes("1M:2G:2")) == 12


def test_parse_sizes_list_sorted_dedup_aligned() -> None:
    assert options.parse_sizes("64M, 1M,64M,7") == (4, MIB, 64 * MIB)


@pytest.mark.parametrize("text", ["1M:2G", "2G:1M:2", "1M:2G:1", "1M:2G:x", ","])
def test_parse_sizes_rejects(text: str) -> None:
    with pytest.raises(BadInput):
        options.parse_sizes(text)


def test_throttle_parsing_and_names() -> None:
    assert options.parse_throttle("GpuIdle") == 0x1
    assert options.parse_throttle("gpuidle,SwPowerCap") == 0x5
    assert options.parse_throttle("0x41") == 0x41
    assert options.parse_throttle("none") == 0
    assert options.throttle_names(0x48) == ["HwSlowdown", "HwThermalSlowdown"]
    assert options.throttle_names(0x1000) == ["0x1000"]
    with pytest.raises(BadInput, match="unknown throttle reason"):
        options.parse_throttle("Sleepy")


# ---------------------------------------------------------------- thresholds and spec
def spec_doc(**gpu: Any) -> dict[str, Any]:
    base = {
        "enabled": True,
        "tolerance": 0.9,
        "matmulTflops": 700,
        "copyGBps": 4000,
        "allReduceBusbwGBps": 300,
        "sendRecvBusbwGBps": 350,
    }
    base.update(gpu)
    return {"topology": {"gpusPerWorker": 8}, "checks": {"nodes": {"gpusPerNode": 8}, "gpu": base}}


def test_no_built_in_figures_and_pass_mark_is_reference_times_tolerance() -> None:
    bare = Thresholds()  # no figure of its own: the chart (through the run spec) or a flag sets them
    assert bare.minimum("matmul_tflops") is None and bare.to_dict()["minimum"]["copy_gbps"] is None
    assert Thresholds(matmul_tflops=779.0).minimum("matmul_tflops") is None  # no tolerance: no pass mark
    th = H200
    assert th.minimum("matmul_tflops") == pytest.approx(779.0 * 0.85)
    assert th.minimum("allreduce_busbw_gbps") == pytest.approx(333.0 * 0.85)
    assert th.minimum("sendrecv_busbw_gbps") == pytest.approx(363.0 * 0.85)
    assert th.minimum("copy_gbps") == pytest.approx(4285.0 * 0.85)
    assert th.minimum("xnode_allreduce_busbw_gbps") is None
    assert th.to_dict()["minimum"]["copy_gbps"] == pytest.approx(4285.0 * 0.85)


def test_spec_settings() -> None:
    s = options.spec_settings(spec_doc())
    assert s["expected_gpus"] == 8
    assert s["enabled"] is True
    assert s["thresholds"] == {
        "tolerance": 0.9,
        "matmul_tflops": 700.0,
        "copy_gbps": 4000.0,
        "allreduce_busbw_gbps": 300.0,
        "sendrecv_busbw_gbps": 350.0,
    }
    only_nodes = {"checks": {"nodes": {"gpusPerNode": 4}}}
    assert options.spec_settings(only_nodes) == {"expected_gpus": 4}


@pytest.mark.parametrize(
    "bad",
    [{"tolerance": 1.5}, {"tolerance": 0}, {"matmulTflops": "fast"}, {"copyGBps": -1}, {"copyGBps": True}],
)
def test_spec_settings_rejects(bad: dict[str, Any]) -> None:
    with pytest.raises(BadInput):
        options.spec_settings(spec_doc(**bad))


def test_parse_args_precedence(tmp_path: Path) -> None:
    spec = tmp_path / "run.json"
    spec.write_text(json.dumps(spec_doc()))
    opts = parse_args(["--spec", str(spec), "--sendrecv-gbps", "400", "--expected-gpus", "2"])
    assert opts.thresholds.tolerance == 0.9  # spec
    assert opts.thresholds.matmul_tflops == 700.0  # spec
    assert opts.thresholds.sendrecv_busbw_gbps == 400.0  # flag beats spec
    assert opts.expected_gpus == 2  # flag beats topology.gpusPerWorker
    assert opts.spec_path == str(spec)
    defaults = parse_args(["--spec", ""])
    assert defaults.thresholds == Thresholds()
    assert defaults.sizes == options.parse_sizes(options.DEFAULT_SIZES)
    assert defaults.expected_gpus is None


def test_parse_args_errors(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="cannot read"):
        parse_args(["--spec", str(tmp_path / "missing.json")])
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(BadInput, match="not valid JSON"):
        parse_args(["--spec", str(bad)])
    with pytest.raises(BadInput, match="tolerance"):
        parse_args(["--spec", "", "--tolerance", "0"])
    with pytest.raises(BadInput, match="expected-gpus"):
        parse_args(["--spec", "", "--expected-gpus", "0"])
    with pytest.raises(BadInput, match="iters"):
        parse_args(["--spec", "", "--iters", "0"])


def test_options_roundtrip_through_json() -> None:
    opts = parse_args(
        ["--spec", "", "--sizes", "1M,2G", "--xnode-allreduce-gbps", "150", "--tolerance", "0.8"]
    )
    back = Options.from_dict(json.loads(json.dumps(opts.to_dict())))
    assert back == opts


def test_apply_spec_respects_flags() -> None:
    merged = options.resolve(spec_doc(enabled=False), {"tolerance": 0.5})
    assert merged.thresholds.tolerance == 0.5
    assert merged.thresholds.copy_gbps == 4000.0
    assert merged.expected_gpus == 8
    assert merged.enabled is False


# ---------------------------------------------------------------- bandwidth arithmetic
def test_busbw_formulas() -> None:
    assert verdict.algbw_gbps(2 * 10**9, 1.0) == pytest.approx(2.0)
    assert verdict.allreduce_busbw_gbps(10**9, 1.0, 2) == pytest.approx(1.0)  # 2(n-1)/n = 1
    assert verdict.allreduce_busbw_gbps(10**9, 1.0, 8) == pytest.approx(1.75)
    assert verdict.allreduce_busbw_gbps(10**9, 1.0, 1) == 0.0
    assert verdict.sendrecv_busbw_gbps(10**9, 0.5) == pytest.approx(2.0)
    assert verdict.algbw_gbps(1, 0.0) == 0.0


def test_sweep_figure_uses_best_of_large_sizes() -> None:
    pts = verdict.enrich_points(
        [{"bytes": MIB, "time_s": 1e-6}, {"bytes": GIB, "time_s": 4e-3}, {"bytes": 2 * GIB, "time_s": 6e-3}],
        "sendrecv",
        2,
    )
    figure, at = verdict.sweep_figure(pts, GIB)
    assert at == 2 * GIB
    assert figure == pytest.approx(2 * GIB / 6e-3 / 1e9)
    small = verdict.enrich_points([{"bytes": MIB, "time_s": 1e-5}], "sendrecv", 2)
    fig_small, at_small = verdict.sweep_figure(small, GIB)
    assert at_small == MIB
    assert fig_small == pytest.approx(MIB / 1e-5 / 1e9)
    assert verdict.sweep_figure([], GIB) == (None, None)


def test_fmt_bytes() -> None:
    assert [verdict.fmt_bytes(b) for b in (MIB, 2 * GIB, 1536, 4)] == ["1M", "2G", "1536B", "4B"]


# ---------------------------------------------------------------- verdict
def _points(busbw: float, kind: str, n: int = 2) -> list[dict[str, Any]]:
    factor = 2 * (n - 1) / n if kind == "allreduce" else 1.0
    return [{"bytes": b, "time_s": b * factor / (busbw * 1e9)} for b in SIZES]


def healthy_gpu(index: int) -> dict[str, Any]:
    return {
        "index": index,
        "name": "NVIDIA H200",
        "uuid": f"GPU-{index}",
        "pci_bus_id": f"0000:{index:02X}:00.0",
        "ecc_mode": True,
        "ecc_uncorrected_volatile": 0,
        "ecc_uncorrected_aggregate": 0,
        "retired_pages_pending": None,
        "remapped_rows_pending": False,
        "remapped_rows_failure": False,
        "throttle_reasons": 0x1,
        "temperature_c": 30,
        "power_w": 120.0,
        "unreadable": {},
    }


def raw_node(ngpus: int = 2, nodes: int = 1) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "world_size": ngpus * nodes,
        "nodes": [],
        "gpus": [],
        "allreduce": [],
        "sendrecv": [],
        "errors": [],
        "environment": {"torch": "2.11"},
        "phases_s": {"nvml": 0.1},
    }
    for k in range(nodes):
        name = f"n{k}"
        ranks_ = list(range(k * ngpus, (k + 1) * ngpus))
        raw["nodes"].append(
            {
                "name": name,
                "node_rank": k,
                "ranks": ranks_,
                "local_gpus": ngpus,
                "health": {
                    "error": None,
                    "driver_version": "580",
                    "cuda_driver_version": "13.0",
                    "device_count": ngpus,
                    "gpus": [healthy_gpu(i) for i in range(ngpus)],
                },
            }
        )
        for i in range(ngpus):
            raw["gpus"].append(
                {
                    "node": name,
                    "rank": ranks_[i],
                    "local_rank": i,
                    "cuda_index": i,
                    "uuid": f"GPU-{i}",
                    "name": "NVIDIA H200",
                    "pci_bus_id": None,
                    "matmul_tflops": 780.0,
                    "copy_gbps": 4280.0,
                    "error": None,
                }
            )
        raw["allreduce"].append(
            {
                "scope": "node",
                "label": name,
                "nodes": [name],
                "ranks": ranks_,
                "points": _points(335.0, "allreduce", ngpus),
                "correct": True,
                "error": None,
            }
        )
        for a, b in combinations(range(ngpus), 2):
            raw["sendrecv"].append(
                {
                    "scope": "node",
                    "label": f"{name} gpu{a}<->gpu{b}",
                    "nodes": [name, name],
                    "gpus": [[name, a], [name, b]],
                    "ranks": [ranks_[a], ranks_[b]],
                    "points": _points(363.0, "sendrecv"),
                    "correct": True,
                    "error": None,
                }
            )
    return raw


OPTS = Options(thresholds=H200, sizes=SIZES, expected_gpus=2)


def test_healthy_node_passes() -> None:
    report = verdict.build_report(raw_node(), OPTS)
    assert report["ok"] is True
    assert report["failures"] == []
    assert report["verdict"].startswith("PASS")
    assert report["allreduce"][0]["figure_gbps"] == pytest.approx(335.0)
    assert report["sendrecv"][0]["pass"] is True
    assert report["gpus"][0]["matmul_tflops_pass"] is True
    json.dumps(report)  # serialisable


def test_slow_gpu_is_named() -> None:
    raw = raw_node()
    raw["gpus"][1]["matmul_tflops"] = 400.0
    report = verdict.build_report(raw, OPTS)
    assert not report["ok"]
    (f,) = report["failures"]
    assert f["check"] == "matmul_tflops"
    assert (f["node"], f["gpu"]) == ("n0", "1")
    assert "node n0 GPU 1: bf16 matmul 400.0 TFLOP/s < 662.1" in f["message"]
    assert "node n0 GPU 1" in report["verdict"]


def test_slow_copy_and_compute_error() -> None:
    raw = raw_node()
    raw["gpus"][0]["copy_gbps"] = 1000.0
    raw["gpus"][1].update(error="RuntimeError: CUDA error", matmul_tflops=None, copy_gbps=None)
    failures = verdict.build_report(raw, OPTS)["failures"]
    assert [f["check"] for f in failures] == ["copy_gbps", "gpu_compute"]


def test_bandwidth_thresholds_name_the_pair() -> None:
    raw = raw_node(ngpus=3)
    raw["sendrecv"][2]["points"] = _points(200.0, "sendrecv")  # gpu1<->gpu2
    raw["allreduce"][0]["points"] = _points(250.0, "allreduce", 3)
    report = verdict.build_report(raw, Options(thresholds=H200, sizes=SIZES, expected_gpus=3))
    checks = {(f["check"], f["pair"]) for f in report["failures"]}
    assert checks == {("allreduce", None), ("sendrecv", "n0 gpu1<->gpu2")}
    assert "pair n0 gpu1<->gpu2" in report["verdict"]
    msg = next(f["message"] for f in report["failures"] if f["check"] == "sendrecv")
    assert "busbw 200.0 GB/s at 2G < 308.6 (363 x 0.85)" in msg


def test_threshold_above_link_limit_fails_every_pair() -> None:
    opts = Options(sizes=SIZES, thresholds=replace(H200, sendrecv_busbw_gbps=530.0))
    report = verdict.build_report(raw_node(), opts)
    assert [f["check"] for f in report["failures"]] == ["sendrecv"]


def test_wrong_data_and_errors_fail() -> None:
    raw = raw_node()
    raw["allreduce"][0]["correct"] = False
    raw["sendrecv"][0]["error"] = "only one side finished"
    raw["errors"].append(
        {"rank": 1, "node": "n0", "phase": "sendrecv_node 0-1", "error": "DistBackendError: x"}
    )
    checks = [f["check"] for f in verdict.build_report(raw, OPTS)["failures"]]
    assert checks == ["allreduce", "sendrecv", "run"]


def test_gpu_count_mismatch() -> None:
    report = verdict.build_report(raw_node(), Options(thresholds=H200, sizes=SIZES, expected_gpus=3))
    msgs = [f["message"] for f in report["failures"]]
    assert [f["check"] for f in report["failures"]] == ["gpu_count", "gpu_count"]
    assert "node n0: torch sees 2 GPU(s), expected 3" in msgs[0]
    assert "node n0: NVML shows 2 GPU(s), expected 3" in msgs[1]


def test_no_expected_count_skips_count_check() -> None:
    assert verdict.build_report(raw_node(), Options(thresholds=H200, sizes=SIZES))["ok"]


@pytest.mark.parametrize(
    ("change", "check"),
    [
        ({"ecc_uncorrected_volatile": 2}, "ecc"),
        ({"ecc_uncorrected_aggregate": 1}, "ecc"),
        ({"retired_pages_pending": True}, "retired_pages"),
        ({"remapped_rows_pending": True}, "row_remap"),
        ({"remapped_rows_failure": True}, "row_remap"),
        ({"throttle_reasons": 0x41}, "throttle"),
        ({"temperature_c": None, "unreadable": {"temperature_c": "NotSupported"}}, "sensors"),
        ({"power_w": None}, "sensors"),
    ],
)
def test_nvml_findings(change: dict[str, Any], check: str) -> None:
    raw = raw_node()
    raw["nodes"][0]["health"]["gpus"][1].update(change)
    (f,) = verdict.build_report(raw, OPTS)["failures"]
    assert f["check"] == check
    assert f["node"] == "n0"
    assert f["gpu"] == "nvml1"
    assert "NVML GPU 1" in f["message"]


def test_throttle_allow_list() -> None:
    raw = raw_node()
    raw["nodes"][0]["health"]["gpus"][0]["throttle_reasons"] = 0x4
    assert not verdict.build_report(raw, OPTS)["ok"]
    assert verdict.build_report(
        raw, Options(thresholds=H200, sizes=SIZES, expected_gpus=2, allowed_throttle=0x5)
    )["ok"]


def test_nvml_unusable() -> None:
    raw = raw_node()
    raw["nodes"][0]["health"] = {
        "error": "nvmlInit failed: driver not loaded",
        "device_count": None,
        "gpus": [],
    }
    (f,) = verdict.build_report(raw, OPTS)["failures"]
    assert f["check"] == "nvml"


def test_cross_node_report_only_by_default_and_threshold_when_set() -> None:
    raw = raw_node(nodes=2)
    raw["allreduce"].append(
        {
            "scope": "cross-node",
            "label": "all 2 nodes (4 GPUs)",
            "nodes": ["n0", "n1"],
            "ranks": [0, 1, 2, 3],
            "points": _points(40.0, "allreduce", 4),
            "correct": True,
            "error": None,
        }
    )
    raw["sendrecv"].append(
        {
            "scope": "cross-node",
            "label": "n0<->n1",
            "nodes": ["n0", "n1"],
            "ranks": [0, 1, 2, 3],
            "points": _points(20.0, "sendrecv"),
            "correct": True,
            "error": None,
        }
    )
    report = verdict.build_report(raw, OPTS)
    assert report["ok"], report["failures"]
    assert report["sendrecv"][-1]["pass"] is None
    strict = Options(
        sizes=SIZES,
        expected_gpus=2,
        thresholds=replace(H200, xnode_allreduce_busbw_gbps=100, xnode_sendrecv_busbw_gbps=40),
    )
    failures = verdict.build_report(raw, strict)["failures"]
    assert [(f["check"], f["pair"]) for f in failures] == [("allreduce", None), ("sendrecv", "n0<->n1")]
    assert failures[0]["message"].startswith("cross-node all-reduce all 2 nodes")
    assert failures[0]["node"] == "n0,n1"


def test_nothing_measured_fails() -> None:
    raw: dict[str, Any] = {"nodes": [], "gpus": []}
    (f,) = verdict.build_report(raw, OPTS)["failures"]
    assert f["check"] == "gpu_count"


def test_table_and_verdict_text() -> None:
    raw = raw_node()
    raw["gpus"][1]["matmul_tflops"] = 100.0
    raw["wall_s"] = 12.5
    text = verdict.format_table(verdict.build_report(raw, OPTS))
    assert "matmul TFLOP/s" in text
    assert "n0 gpu0<->gpu1" in text
    assert "FAILED matmul_tflops: node n0 GPU 1" in text
    assert text.splitlines()[-1].startswith("FAIL: 1 check(s) failed on node n0 GPU 1")
    assert "wall: 12.5 s" in text


# ---------------------------------------------------------------- rank-side helpers (no torch)
@pytest.mark.parametrize("n", range(1, 10))
def test_round_robin_covers_every_pair_once(n: int) -> None:
    rounds = ranks.round_robin(n)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == sorted(combinations(range(n), 2))
    for r in rounds:
        members = [x for p in r for x in p]
        assert len(members) == len(set(members))
    assert len(rounds) == (0 if n < 2 else n - 1 if n % 2 == 0 else n)


def _rank_result(rank: int, node: int, local: int, peers: dict[str, list[int]]) -> dict[str, Any]:
    pts = [{"bytes": GIB, "time_s": 0.003 + 0.0001 * rank}]
    res: dict[str, Any] = {
        "ident": {
            "rank": rank,
            "local_rank": local,
            "node": f"h{node}",
            "node_key": f"{node}/h{node}",
            "cuda_index": local,
            "name": "NVIDIA H200",
            "uuid": f"GPU-{rank}",
            "pci_bus_id": None,
        },
        "gpu": {"matmul_tflops": 780.0 + rank, "copy_gbps": 4200.0},
        "allreduce_node": {"points": pts, "probe_sum": 3.0 if node == 0 else 7.0, "probe_uniform": True},
        "allreduce_world": {"points": pts, "probe_sum": 10.0, "probe_uniform": True},
        "pairs": [
            {"scope": s, "peer": p, "points": pts, "correct": True} for s, ps in peers.items() for p in ps
        ],
        "errors": [],
        "phases_s": {"nvml": 0.1},
        "elapsed_s": 5.0,
    }
    if local == 0:
        res["health"] = {"error": None, "device_count": 2, "gpus": []}
        res["local_gpus"] = 2
        res["environment"] = {"torch": "2.11", "nccl": "2.28.9"}
    return res


def test_assemble_two_nodes() -> None:
    results = [
        _rank_result(0, 0, 0, {"node": [1], "cross-node": [2]}),
        _rank_result(1, 0, 1, {"node": [0], "cross-node": [3]}),
        _rank_result(2, 1, 0, {"node": [3], "cross-node": [0]}),
        _rank_result(3, 1, 1, {"node": [2], "cross-node": [1]}),
    ]
    raw = ranks.assemble(results, ["h0", "h1"], [[0, 1], [2, 3]])
    assert [n["name"] for n in raw["nodes"]] == ["h0", "h1"]
    assert [g["local_rank"] for g in raw["gpus"]] == [0, 1, 0, 1]
    ar = {a["label"]: a for a in raw["allreduce"]}
    assert ar["h0"]["correct"] and ar["h1"]["correct"]
    assert ar["all 2 nodes (4 GPUs)"]["correct"] is True
    assert ar["h0"]["points"] == [{"bytes": GIB, "time_s": pytest.approx(0.0031)}]  # slowest rank
    labels = [s["label"] for s in raw["sendrecv"]]
    assert labels == ["h0 gpu0<->gpu1", "h1 gpu0<->gpu1", "h0<->h1"]
    cross = raw["sendrecv"][-1]
    assert sorted(cross["rails"]) == ["gpu0", "gpu1"]
    assert cross["points"][0]["time_s"] == pytest.approx(0.0033)
    assert raw["environment"]["nccl"] == "2.28.9"
    report = verdict.build_report(raw, Options(thresholds=H200, sizes=(GIB,), expected_gpus=2))
    assert report["ok"], report["failures"]


def test_assemble_flags_wrong_sum_and_same_hostnames() -> None:
    results = [_rank_result(0, 0, 0, {"node": [1]}), _rank_result(1, 0, 1, {"node": [0]})]
    results[1]["allreduce_node"]["probe_sum"] = 2.0
    raw = ranks.assemble(results, ["h0"], [[0, 1]])
    assert raw["allreduce"][0]["correct"] is False
    assert ranks._unique_names(["a", "a", "b"]) == ["a", "a#2", "b"]


# ---------------------------------------------------------------- CLI on a machine without torch/GPUs
def test_main_bad_input_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--spec", "", "--sizes", "1M:2G"]) == 2
    assert main(["--no-such-flag"]) == 2
    assert main(["--help"]) == 0
    assert "gpu-check" in capsys.readouterr().err


def test_main_disabled_by_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "run.json"
    spec.write_text(json.dumps(spec_doc(enabled=False)))
    assert main(["--spec", str(spec)]) == 0
    assert "disabled by the run spec" in capsys.readouterr().out


def test_main_without_torch_fails_with_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    monkeypatch.setitem(sys.modules, "pynvml", None)
    code = main(["--spec", "", "--out-dir", str(tmp_path), "--expected-gpus", "2", "--no-plot"])
    assert code == 1
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    checks = [f["check"] for f in report["failures"]]
    assert checks == ["nvml", "run"]
    assert "torch not importable" in report["failures"][1]["message"]
    assert "FAIL" in capsys.readouterr().out


def test_json_log_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    main(["--spec", "", "--out-dir", str(tmp_path), "--log-format", "json", "--no-plot"])
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["step"] == "gpu-check"
    assert line["level"] == "error"


def test_plot_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from miles_hooks.core.gpu.plot import write_plot  # noqa: PLC0415

    report = verdict.build_report(raw_node(), OPTS)
    path = write_plot(report, tmp_path / "p.png", extra={"sendrecv": {"ref": [(MIB, 10.0), (GIB, 300.0)]}})
    assert path is not None
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_plot_layout_on_one_gpu_shows_the_gpu_and_says_why_no_sweeps(tmp_path: Path) -> None:
    from miles_hooks.core.gpu import plot  # noqa: PLC0415 - as the test above: the plot module itself is light

    one = raw_node(ngpus=1)
    one["allreduce"] = []  # as the ranks report it: one GPU has no peer to all-reduce with
    report = verdict.build_report(one, Options(thresholds=H200, sizes=SIZES, expected_gpus=1))
    panels, notes = plot.layout(report)
    assert panels == ["matmul_tflops", "copy_gbps"]  # what was measured, and no empty sweep panel
    assert notes == [
        "all-reduce: not measured (one GPU: no peer to talk to)",
        "send/recv (per pair, bidirectional): not measured (one GPU: no peer to talk to)",
    ]
    two = verdict.build_report(raw_node(), OPTS)
    assert plot.layout(two) == (["matmul_tflops", "copy_gbps", "allreduce", "sendrecv"], [])
    nothing = verdict.build_report({"nodes": [], "gpus": [], "errors": [{"error": "x"}]}, OPTS)
    assert (
        plot.layout(nothing)[1][0]
        == "bf16 matmul per GPU: not measured (the check did not run; see the verdict)"
    )
    if importlib.util.find_spec("matplotlib") is not None:
        path = plot.write_plot(report, tmp_path / "one.png")
        assert path is not None and path.read_bytes()[:4] == b"\x89PNG"


def test_import_is_light() -> None:
    code = (
        "import sys, miles_hooks.core.gpu, miles_hooks.core.gpu.runner;"
        "heavy = {'torch', 'pynvml', 'matplotlib', 'jsonschema', 'kubernetes', 'ray'} & set(sys.modules);"
        "print(sorted(heavy))"
    )
    src = str(Path(gpu_check.__file__).resolve().parents[3])
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "[]"


def test_cuda_visible_devices_narrows_nvml_checks() -> None:
    raw = raw_node(ngpus=2)
    raw["gpus"] = raw["gpus"][1:]
    raw["allreduce"], raw["sendrecv"] = [], []
    node = raw["nodes"][0]
    node.update(local_gpus=1, cuda_visible_devices="1", visible_uuids=["GPU-1"])
    node["health"]["gpus"][0]["ecc_uncorrected_volatile"] = 5  # another process's GPU
    opts = Options(thresholds=H200, sizes=SIZES, expected_gpus=1)
    assert verdict.build_report(raw, opts)["ok"]  # NVML shows 2, torch sees the 1 expected
    node["health"]["gpus"][1]["ecc_uncorrected_volatile"] = 1
    (f,) = verdict.build_report(raw, opts)["failures"]
    assert (f["check"], f["gpu"]) == ("ecc", "nvml1")
    node["cuda_visible_devices"] = None  # whole node visible: NVML count and every GPU judged
    checks = sorted(f["check"] for f in verdict.build_report(raw, opts)["failures"])
    assert checks == ["ecc", "ecc", "gpu_count"]


def test_tail_of_a_log(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.log"
    log.write_text("a\nb\nRuntimeError: NCCL error\n")
    assert runner._tail(log, 2) == "b | RuntimeError: NCCL error"
    assert runner._tail(tmp_path / "missing") == ""


# ---------------------------------------------------------------- launcher, with a stand-in torch
FAKE_TORCH = """
import os, time

class cuda:
    @staticmethod
    def device_count():
        return 1

    @staticmethod
    def set_device(index):
        if os.environ.get("FAKE_TORCH_MODE") == "hang":
            time.sleep(600)
        raise RuntimeError("fake torch: no CUDA here")


def device(*args):
    return args
"""


@pytest.fixture
def fake_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``torch`` that reports one GPU and fails (or hangs) in each rank process."""
    root = tmp_path / "fake"
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (root / "torch" / "distributed.py").write_text("")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.delitem(sys.modules, "torch.distributed", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def test_rank_process_failure_is_reported(fake_torch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = fake_torch / "out"
    code = main(["--spec", "", "--out-dir", str(out), "--no-plot", "--timeout", "60"])
    assert code == 1
    report = json.loads((out / "gpu-check.json").read_text())
    msg = report["failures"][-1]["message"]
    assert "local rank 0 exited with code 1" in msg
    assert "fake torch: no CUDA here" in msg
    assert "local rank 0 log" in capsys.readouterr().err


def test_hung_rank_times_out_with_exit_3(fake_torch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TORCH_MODE", "hang")
    out = fake_torch / "out"
    code = main(["--spec", "", "--out-dir", str(out), "--no-plot", "--timeout", "3"])
    assert code == 3
    report = json.loads((out / "gpu-check.json").read_text())
    assert "did not finish within 3 s" in report["failures"][-1]["message"]
