#!/usr/bin/env python3
"""One device run: nccl-tests (all_reduce_perf, sendrecv_perf) vs ``miles-hooks gpu-check`` over the same
message sizes, a plain torch bf16 8192^3 matmul vs our matmul figure, the wall time of a full
single-node gpu-check, and two planted faults.  Writes ``bench.json`` / ``bench.md`` / ``compare.png``
(plus our own ``gpu-check.json`` / ``gpu-check.png``) under ``--out``.

Run by ``tests/bench/gpu/run.sh`` on the device machine; nothing here is hard-coded except the targets.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "hooks" / "src"))

# The device runs this from a bare checkout (no install), hence the path insert above.
from miles_hooks.core.gpu.options import GIB, LINK_LIMIT_NV18_GBPS  # noqa: E402
from miles_hooks.core.gpu.plot import write_plot  # noqa: E402
from miles_hooks.core.gpu.verdict import fmt_bytes  # noqa: E402

# The pass marks this bench judges with (the chart's checks.gpu figures at the time, with the tolerance
# of 0.85 the planted-fault arithmetic below assumes); gpu-check itself has no built-in figures.
H200_REFERENCES = ["--tolerance", "0.85", "--matmul-tflops", "779", "--copy-gbps", "4285"]
H200_REFERENCES += ["--allreduce-gbps", "333", "--sendrecv-gbps", "363"]
GPU_CHECK = [sys.executable, "-m", "miles_hooks", "gpu-check", "--spec", "", *H200_REFERENCES]

TARGET_RATIO = 0.95
TARGET_WALL_S = 60.0
NCCL_ARGS = ["-b", "1M", "-e", "2G", "-f", "2", "-n", "20", "-w", "5"]


def parse_nccl_tests(text: str) -> list[dict[str, Any]]:
    """Rows of an nccl-tests table: size, out-of-place and in-place time/algbw/busbw, #wrong."""
    rows = []
    for line in text.splitlines():
        tokens = line.split()
        if len(tokens) < 13 or line.lstrip().startswith("#") or not tokens[0].isdigit():
            continue
        try:
            oop = [float(t) for t in tokens[-8:-5]]
            inp = [float(t) for t in tokens[-4:-1]]
        except ValueError:
            continue

        def wrong(tok: str) -> int | None:
            return None if tok == "N/A" else int(float(tok))

        rows.append(
            {
                "bytes": int(tokens[0]),
                "oop_time_us": oop[0],
                "oop_algbw": oop[1],
                "oop_busbw": oop[2],
                "oop_wrong": wrong(tokens[-5]),
                "ip_time_us": inp[0],
                "ip_algbw": inp[1],
                "ip_busbw": inp[2],
                "ip_wrong": wrong(tokens[-1]),
            }
        )
    return rows


def run(
    cmd: list[str],
    log: list[str],
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> tuple[int, str, float]:
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    elapsed = time.perf_counter() - t0
    out = proc.stdout + proc.stderr
    log.append(f"$ {' '.join(cmd)}\n(rc {proc.returncode}, {elapsed:.1f} s)\n{out}")
    print(out[-6000:], flush=True)
    return proc.returncode, proc.stdout, elapsed


def torch_matmul(n: int = 8192, warmup: int = 10, iters: int = 20, windows: int = 3) -> list[list[float]]:
    """Plain ``c = a @ b`` in bf16 on random data, one GPU after another, timed like ours:
    ``warmup`` products, then ``windows`` event-timed windows of ``iters``.  TFLOP/s per window."""
    import torch

    out = []
    for i in range(torch.cuda.device_count()):
        with torch.cuda.device(i):
            a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            for _ in range(warmup):
                c = a @ b
            per_gpu = []
            for _ in range(windows):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(iters):
                    c = a @ b
                end.record()
                end.synchronize()
                per_gpu.append(2.0 * n**3 * iters / (start.elapsed_time(end) / 1e3) / 1e12)
            out.append(per_gpu)
            del a, b, c
            torch.cuda.empty_cache()
    return out


def torch_matmul_sustained(n: int = 8192, seconds: float = 2.0) -> list[float]:
    """For the record: the same product back to back for ``seconds`` on each GPU (power-capped rate)."""
    import torch

    out = []
    for i in range(torch.cuda.device_count()):
        with torch.cuda.device(i):
            a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            count = 0
            t0 = time.perf_counter()
            torch.cuda.synchronize()
            while time.perf_counter() - t0 < seconds:
                for _ in range(20):
                    c = a @ b
                count += 20
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - t0
            out.append(2.0 * n**3 * count / elapsed / 1e12)
            del a, b, c
            torch.cuda.empty_cache()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nccl-tests-bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ngpus", type=int, required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "hooks" / "src") + os.pathsep + env.get("PYTHONPATH", "")
    n = args.ngpus
    bench: dict[str, Any] = {
        "host": platform.node(),
        "ngpus": n,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "nccl_tests_args": [*NCCL_ARGS, "-g", str(n)],
        "env": {
            k: os.environ.get(k)
            for k in (
                "NCCL_NVLS_ENABLE",
                "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                "NVSHMEM_DISABLE_NVLS",
            )
        },
    }
    rc, smi, _ = run(["nvidia-smi", "topo", "-m"], log)
    bench["nvidia_smi_topo"] = smi
    rc, smi, _ = run(
        [
            "nvidia-smi",
            "--query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu",
            "--format=csv",
        ],
        log,
    )
    bench["nvidia_smi"] = smi

    nccl: dict[str, list[dict[str, Any]]] = {}
    for name in ("all_reduce_perf", "sendrecv_perf"):
        rc, text, _ = run([str(Path(args.nccl_tests_bin) / name), *NCCL_ARGS, "-g", str(n)], log, env)
        nccl[name] = parse_nccl_tests(text)
        bench[f"{name}_rc"] = rc
        bench[f"{name}_header"] = [
            ln for ln in text.splitlines() if ln.startswith("#") and ("NCCL" in ln or "Rank" in ln)
        ][:6]
    bench["nccl_tests"] = nccl

    # our full single-node check, default flags (the timed run)
    check_dir = out / "check"
    cmd = [
        *GPU_CHECK,
        "--expected-gpus",
        str(n),
        "--out-dir",
        str(check_dir),
    ]
    rc, _, wall = run(cmd, log, env)
    report = json.loads((check_dir / "gpu-check.json").read_text())
    bench["ours"] = {
        "rc": rc,
        "process_wall_s": wall,
        "wall_s": report.get("wall_s"),
        "verdict": report["verdict"],
        "phases_s": report.get("phases_s"),
        "environment": report.get("environment"),
        "gpus": [
            {
                k: g.get(k)
                for k in (
                    "node",
                    "local_rank",
                    "name",
                    "matmul_tflops",
                    "matmul_windows_tflops",
                    "copy_gbps",
                )
            }
            for g in report["gpus"]
        ],
        "allreduce": report["allreduce"],
        "sendrecv": report["sendrecv"],
        "health": [nd.get("health") for nd in report["nodes"]],
    }

    # planted faults
    planted = []
    for what, flags in (
        ("expected GPU count one higher", ["--expected-gpus", str(n + 1)]),
        (
            "send/recv reference 530 GB/s (pass mark 450.5 = above the NV18 link limit)",
            ["--expected-gpus", str(n), "--sendrecv-gbps", "530"],
        ),
    ):
        pdir = out / "planted"
        rc, stdout, _ = run(
            [
                *GPU_CHECK,
                *flags,
                "--out-dir",
                str(pdir),
                "--no-plot",
            ],
            log,
            env,
        )
        prep = json.loads((pdir / "gpu-check.json").read_text())
        planted.append(
            {
                "fault": what,
                "flags": flags,
                "rc": rc,
                "verdict": prep["verdict"],
                "failures": prep["failures"],
                "wall_s": prep.get("wall_s"),
                "log_tail": [ln for ln in stdout.splitlines() if ln.startswith(("FAILED", "FAIL", "PASS"))],
            }
        )
        shutil.rmtree(pdir, ignore_errors=True)
    bench["planted"] = planted

    base_windows = torch_matmul()
    base = [max(w) for w in base_windows]
    bench["torch_matmul_sustained_2s_tflops"] = torch_matmul_sustained()
    bench["torch_matmul_windows_tflops"] = base_windows
    bench["torch_matmul_tflops"] = base

    # comparison
    cmp_rows = []
    ours_ar = next((s for s in report["allreduce"] if s["scope"] == "node"), None)
    ours_sr = [s for s in report["sendrecv"] if s["scope"] == "node"]
    for kind, rows, ours_list in (
        ("all_reduce", nccl["all_reduce_perf"], [ours_ar] if ours_ar else []),
        ("sendrecv", nccl["sendrecv_perf"], ours_sr),
    ):
        ref = {r["bytes"]: max(r["oop_busbw"], r["ip_busbw"]) for r in rows}
        for sweep in ours_list:
            for p in sweep["points"]:
                if p["bytes"] in ref:
                    cmp_rows.append(
                        {
                            "kind": kind,
                            "label": sweep["label"],
                            "bytes": p["bytes"],
                            "ours_busbw": p["busbw_gbps"],
                            "nccl_tests_busbw": ref[p["bytes"]],
                            "ratio": p["busbw_gbps"] / ref[p["bytes"]] if ref[p["bytes"]] else None,
                        }
                    )
    bench["comparison"] = cmp_rows
    big = [r for r in cmp_rows if GIB <= r["bytes"] <= 2 * GIB]
    mm_ratios = [
        g["matmul_tflops"] / b for g, b in zip(report["gpus"], base, strict=False) if g.get("matmul_tflops")
    ]
    targets = {
        "busbw_1_2GiB_ratio_min": min((r["ratio"] for r in big), default=None),
        "busbw_target_met": bool(big) and all(r["ratio"] >= TARGET_RATIO for r in big),
        "matmul_ratio_min": min(mm_ratios, default=None),
        "matmul_target_met": bool(mm_ratios) and min(mm_ratios) >= TARGET_RATIO,
        "wall_s": report.get("wall_s"),
        "wall_target_met": report.get("wall_s") is not None and report["wall_s"] <= TARGET_WALL_S,
        "planted_caught": all(p["rc"] == 1 for p in planted),
    }
    bench["targets"] = targets
    bench["link_limit_gbps"] = LINK_LIMIT_NV18_GBPS
    (out / "bench.json").write_text(json.dumps(bench, indent=1))
    (out / "bench.md").write_text(render_md(bench))
    extra = {
        "allreduce": {
            "nccl-tests all_reduce_perf": [
                (r["bytes"], max(r["oop_busbw"], r["ip_busbw"])) for r in nccl["all_reduce_perf"]
            ]
        },
        "sendrecv": {
            "nccl-tests sendrecv_perf": [
                (r["bytes"], max(r["oop_busbw"], r["ip_busbw"])) for r in nccl["sendrecv_perf"]
            ],
            f"link limit {LINK_LIMIT_NV18_GBPS:.0f}": [
                (1 << 20, LINK_LIMIT_NV18_GBPS),
                (2 * GIB, LINK_LIMIT_NV18_GBPS),
            ],
        },
    }
    write_plot(report, out / "compare.png", extra=extra)
    for name in ("gpu-check.json", "gpu-check.png"):
        if (check_dir / name).exists():
            shutil.copy(check_dir / name, out / name)
    shutil.rmtree(check_dir, ignore_errors=True)
    (out / "bench.log").write_text("\n".join(log))
    print(render_md(bench), flush=True)
    return 0


def render_md(b: dict[str, Any]) -> str:
    t = b["targets"]
    gpu_name = b["ours"]["gpus"][0]["name"] if b["ours"]["gpus"] else "?"
    lines = [
        f"# gpu-check vs nccl-tests on {b['ngpus']}x {gpu_name} ({b['started']})",
        "",
    ]
    env = b["ours"].get("environment") or {}
    lines.append(
        "Environment: "
        + ", ".join(f"{k} {v}" for k, v in env.items())
        + f"; nccl-tests {' '.join(b['nccl_tests_args'])}"
    )
    lines.append("")
    lines.append(
        "| collective | members | size | ours busbw GB/s | nccl-tests busbw GB/s | ours / nccl-tests |"
    )
    lines.append("|---|---|---|---|---|---|")
    for r in b["comparison"]:
        lines.append(
            f"| {r['kind']} | {r['label']} | {fmt_bytes(r['bytes'])} | {r['ours_busbw']:.1f} | "
            f"{r['nccl_tests_busbw']:.1f} | {(r['ratio'] or 0) * 100:.1f}% |"
        )
    lines.append("")
    lines.append("| GPU | ours matmul TFLOP/s | torch a@b TFLOP/s | ratio | ours copy GB/s |")
    lines.append("|---|---|---|---|---|")
    for g, base in zip(b["ours"]["gpus"], b["torch_matmul_tflops"], strict=False):
        lines.append(
            f"| {g['node']} GPU {g['local_rank']} | {g['matmul_tflops']:.1f} | {base:.1f} | "
            f"{g['matmul_tflops'] / base * 100:.1f}% | {g['copy_gbps']:.0f} |"
        )
    lines.append("")
    lines.append(
        f"Full single-node gpu-check: {t['wall_s']:.1f} s from main() entry (process incl. interpreter: "
        f"{b['ours']['process_wall_s']:.1f} s); phases: "
        + ", ".join(f"{k} {v:.1f}" for k, v in (b["ours"]["phases_s"] or {}).items())
    )
    lines.append("")
    lines.append(
        f"Targets: busbw at 1-2 GiB >= 95% of nccl-tests: {'met' if t['busbw_target_met'] else 'NOT met'} "
        f"(min {(t['busbw_1_2GiB_ratio_min'] or 0) * 100:.1f}%); matmul >= 95% of torch: "
        f"{'met' if t['matmul_target_met'] else 'NOT met'} (min {(t['matmul_ratio_min'] or 0) * 100:.1f}%); "
        f"wall <= 60 s: {'met' if t['wall_target_met'] else 'NOT met'}; "
        f"planted faults caught: {t['planted_caught']}"
    )
    lines.append(f"Link limit (NV18, 18 x 25 GB/s per direction): {b['link_limit_gbps']:.0f} GB/s")
    lines.append("")
    lines.append("## Planted faults")
    for p in b["planted"]:
        lines.append(f"- {p['fault']} (`{' '.join(p['flags'])}`): exit {p['rc']}")
        lines.append(f"  - `{p['verdict']}`")
    lines.append("")
    lines.append(f"Our verdict on the healthy machine: `{b['ours']['verdict']}` (exit {b['ours']['rc']})")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
