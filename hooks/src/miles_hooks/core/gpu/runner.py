"""Launching the ranks, writing the report, the exit code."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from miles_hooks.core.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_TIMEOUT, BadInput
from miles_hooks.core.gpu.nvml import node_health
from miles_hooks.core.gpu.options import Options, resolve
from miles_hooks.core.gpu.plot import write_plot
from miles_hooks.core.gpu.ranks import node_name, rank_main
from miles_hooks.core.gpu.verdict import build_report, format_table


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _startup_failure(error: str, phase: str = "start") -> dict[str, Any]:
    """Raw measurements for a node where the ranks could not run: NVML findings plus the error."""
    name = node_name()
    return {
        "world_size": 0,
        "gpus": [],
        "allreduce": [],
        "sendrecv": [],
        "nodes": [{"name": name, "node_rank": 0, "ranks": [], "local_gpus": None, "health": node_health()}],
        "errors": [{"rank": None, "node": name, "phase": phase, "error": error}],
    }


def _tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])


def run_local(
    opts: Options,
    *,
    num_nodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
) -> tuple[dict[str, Any], bool]:
    """Start one process per visible GPU (``python -m miles_hooks.core.gpu.child``) and return
    (raw measurements, timed_out).  Plain subprocesses, not multiprocessing: the caller's
    ``__main__`` (a Ray worker, a script on stdin) is never re-imported."""
    try:
        import torch  # noqa: PLC0415 - heavy and absent outside the miles image: only to count GPUs
    except ImportError as exc:
        return _startup_failure(f"torch not importable: {exc}"), False
    nproc = torch.cuda.device_count()
    if nproc == 0:
        return _startup_failure(
            "torch sees no CUDA GPU (CUDA_VISIBLE_DEVICES, driver, or the pod's GPU request)"
        ), False
    if num_nodes > 1 and (not master_addr or not master_port):
        raise BadInput("several nodes need master_addr and master_port")
    addr = master_addr or "127.0.0.1"
    port = master_port or _free_port()
    workdir = Path(tempfile.mkdtemp(prefix="miles-gpu-check-"))
    (workdir / "options.json").write_text(json.dumps(opts.to_dict()))
    pkg_root = str(Path(__file__).resolve().parents[3])
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    try:
        for local_rank in range(nproc):
            env = dict(os.environ)
            env.update(
                {
                    "MASTER_ADDR": addr,
                    "MASTER_PORT": str(port),
                    "LOCAL_RANK": str(local_rank),
                    "RANK": str(node_rank * nproc + local_rank),
                    "WORLD_SIZE": str(num_nodes * nproc),
                    "LOCAL_WORLD_SIZE": str(nproc),
                    "GROUP_RANK": str(node_rank),
                    "PYTHONPATH": os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p),
                }
            )
            log = workdir / f"rank-{local_rank}.log"
            logs.append(log)
            with open(log, "wb") as fh:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "miles_hooks.core.gpu.child", str(workdir)],
                        env=env,
                        stdout=fh,
                        stderr=subprocess.STDOUT,
                    )
                )
        deadline = time.monotonic() + opts.timeout_s
        failed: list[int] = []
        timed_out = False
        while any(p.poll() is None for p in procs):
            failed = [i for i, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed:
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(0.05)
        failed = [i for i, p in enumerate(procs) if p.returncode not in (None, 0)]
        for p in procs:  # a dead peer leaves the others waiting in NCCL: stop them
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()
        raw_path = workdir / "raw.json"
        if raw_path.exists() and not failed and not timed_out:
            return json.loads(raw_path.read_text()), False
        phases = {p.name: p.read_text() for p in sorted(workdir.glob("phase-*"))}
        where = (
            ", ".join(f"rank {k.split('-', 1)[1]} in {v}" for k, v in phases.items())
            or "before the first phase"
        )
        if timed_out:
            msg = (
                f"gpu-check did not finish within {opts.timeout_s:.0f} s (hung collective or GPU?); "
                f"last phases: {where}"
            )
        else:
            first = failed[0] if failed else 0
            msg = (
                f"local rank {first} exited with code {procs[first].returncode}; last phases: {where}; "
                f"its log ends: {_tail(logs[first])}"
            )
        for i, log in enumerate(logs):
            if i in failed or timed_out:
                print(f"--- gpu-check local rank {i} log (tail) ---\n{_tail(log, 30)}", file=sys.stderr)
        return _startup_failure(msg, "run"), timed_out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def finish(raw: dict[str, Any], opts: Options, wall_s: float, *, write: bool = True) -> dict[str, Any]:
    """Build the report, write JSON + PNG to ``opts.out_dir``, log the table/verdict."""
    raw = dict(raw)
    raw["wall_s"] = wall_s
    report = build_report(raw, opts)
    if write:
        out = Path(opts.out_dir)
        try:
            out.mkdir(parents=True, exist_ok=True)
            if opts.plot:
                png = write_plot(report, out / "gpu-check.png")
                report["plot"] = str(png) if png else None
            report["report_path"] = str(out / "gpu-check.json")
            (out / "gpu-check.json").write_text(json.dumps(report, indent=1, default=str))
        except OSError as exc:
            print(f"gpu-check: cannot write the report under {out}: {exc}", file=sys.stderr)
    if opts.log_format == "json":
        print(
            json.dumps(
                {
                    "step": "gpu-check",
                    "level": "info" if report["ok"] else "error",
                    "message": report["verdict"],
                    "failures": report["failures"],
                    "report": report.get("report_path"),
                }
            ),
            flush=True,
        )
    else:
        print(format_table(report), flush=True)
    return report


def check_node(
    *,
    spec: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    num_nodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
    write: bool = True,
) -> dict[str, Any]:
    """Run every check on this node (one process per visible GPU) and return the report dict.

    See the package docstring; ``report["exit_code"]`` is what ``gpu-check`` would exit with.
    """
    t0 = time.perf_counter()
    opts = resolve(spec, overrides or {})
    raw, timed_out = run_local(
        opts, num_nodes=num_nodes, node_rank=node_rank, master_addr=master_addr, master_port=master_port
    )
    report = finish(raw, opts, time.perf_counter() - t0, write=write)
    report["exit_code"] = EXIT_TIMEOUT if timed_out else (EXIT_OK if report["ok"] else EXIT_CHECK_FAILED)
    return report


def under_launcher() -> bool:
    """True under torchrun (or any launcher that sets the env:// variables)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def run_under_launcher(opts: Options, started: float) -> dict[str, Any] | None:
    """This process is one rank of a launcher's job: measure, and on global rank 0 write the report.

    Returns the report (written and printed by rank 0 only), or None when this rank failed.
    """
    raw = rank_main(opts)
    if raw is None:
        return None
    if int(os.environ["RANK"]) != 0:
        return build_report(raw, opts)
    return finish(raw, opts, time.perf_counter() - started)
