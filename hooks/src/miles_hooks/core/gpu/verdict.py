"""Pure functions over gathered measurements: bandwidth arithmetic, thresholds, failures, report, table.

Nothing here imports torch or NVML, so it runs (and is unit-tested) on any machine.

Raw measurements (what the ranks gather) look like::

    {"world_size": 2,
     "nodes": [{"name": "n0", "node_rank": 0, "ranks": [0, 1], "local_gpus": 2,
                "health": {... nvml.node_health() ...}}],
     "gpus": [{"node": "n0", "rank": 0, "local_rank": 0, "cuda_index": 0, "uuid": "GPU-...",
               "name": "NVIDIA H200", "pci_bus_id": "...", "matmul_tflops": 781.0,
               "copy_gbps": 4290.0, "error": None}],
     "allreduce": [{"scope": "node", "label": "n0", "nodes": ["n0"], "ranks": [0, 1],
                    "points": [{"bytes": 1048576, "time_s": 1.2e-05}], "correct": True, "error": None}],
     "sendrecv": [{"scope": "node", "label": "n0 gpu0<->gpu1", "nodes": ["n0", "n0"],
                   "gpus": [["n0", 0], ["n0", 1]], "ranks": [0, 1], "points": [...],
                   "correct": True, "error": None}],
     "errors": [{"rank": 1, "node": "n0", "phase": "matmul", "error": "..."}],
     "environment": {...}, "phases_s": {...}, "wall_s": 12.3}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from miles_hooks.core.gpu.options import GIB, MIB, Options, Thresholds, throttle_names

REPORT_KIND = "miles-hooks/gpu-check"

# NVML memory findings that fail a GPU when True: (key, check, message, expected, found).
MEMORY_FAULTS = (
    (
        "retired_pages_pending",
        "retired_pages",
        "retired pages pending (reset/drain the node)",
        "none pending",
        "pending",
    ),
    (
        "remapped_rows_pending",
        "row_remap",
        "row remapping pending (reset/drain the node)",
        "none pending",
        "pending",
    ),
    (
        "remapped_rows_failure",
        "row_remap",
        "row remapping failed (replace the GPU/node)",
        "no failure",
        "failure",
    ),
)
REPORT_VERSION = 1


def algbw_gbps(nbytes: int, time_s: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes/s): bytes moved per rank over the time of one operation."""
    if time_s <= 0:
        return 0.0
    return nbytes / time_s / 1e9


def allreduce_busbw_gbps(nbytes: int, time_s: float, nranks: int) -> float:
    """All-reduce bus bandwidth: algbw x 2(n-1)/n (comparable across rank counts)."""
    if nranks < 2:
        return 0.0
    return algbw_gbps(nbytes, time_s) * 2.0 * (nranks - 1) / nranks


def sendrecv_busbw_gbps(nbytes: int, time_s: float) -> float:
    """Send/recv bus bandwidth equals its algbw (bytes one rank sends per unit time)."""
    return algbw_gbps(nbytes, time_s)


def fmt_bytes(nbytes: int) -> str:
    for unit, size in (("G", GIB), ("M", MIB), ("K", 1024)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size}{unit}"
    return f"{nbytes}B"


def gpu_label(node: str, local_index: int) -> str:
    return f"node {node} GPU {local_index}"


def enrich_points(points: Sequence[Mapping[str, Any]], kind: str, nranks: int) -> list[dict[str, Any]]:
    """Add algbw/busbw to each (bytes, time_s) point of a sweep."""
    out = []
    for point in points:
        nbytes, time_s = int(point["bytes"]), float(point["time_s"])
        busbw = (
            allreduce_busbw_gbps(nbytes, time_s, nranks)
            if kind == "allreduce"
            else sendrecv_busbw_gbps(nbytes, time_s)
        )
        out.append(
            {"bytes": nbytes, "time_s": time_s, "algbw_gbps": algbw_gbps(nbytes, time_s), "busbw_gbps": busbw}
        )
    return out


def sweep_figure(points: Sequence[Mapping[str, Any]], check_bytes: int) -> tuple[float | None, int | None]:
    """The figure a threshold is applied to: the best busbw among sizes >= check_bytes
    (or at the largest size when the sweep stops below it).  Returns (busbw, bytes)."""
    if not points:
        return None, None
    eligible = [p for p in points if int(p["bytes"]) >= check_bytes]
    if not eligible:
        largest = max(int(p["bytes"]) for p in points)
        eligible = [p for p in points if int(p["bytes"]) == largest]
    best = max(eligible, key=lambda p: (float(p["busbw_gbps"]), int(p["bytes"])))
    return float(best["busbw_gbps"]), int(best["bytes"])


def _failure(
    check: str,
    message: str,
    *,
    node: str | None = None,
    gpu: str | None = None,
    pair: str | None = None,
    expected: str = "",
    found: str = "",
) -> dict[str, Any]:
    return {
        "check": check,
        "node": node,
        "gpu": gpu,
        "pair": pair,
        "expected": expected,
        "found": found,
        "message": message,
    }


def health_failures(
    node: str,
    health: Mapping[str, Any],
    expected_gpus: int | None,
    allowed_throttle: int,
    visible_uuids: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """NVML findings of one node: count, ECC, retired pages / row remapping, throttling, sensors.

    ``visible_uuids`` (set when CUDA_VISIBLE_DEVICES narrows what the processes see, e.g. in a Ray
    task): only those GPUs are judged, and the count is checked on what torch sees instead.
    """
    fails: list[dict[str, Any]] = []
    if health.get("error"):
        fails.append(
            _failure(
                "nvml",
                f"node {node}: NVML unusable: {health['error']}",
                node=node,
                expected="NVML readable",
                found=str(health["error"]),
            )
        )
        return fails
    count = health.get("device_count")
    if expected_gpus is not None and count != expected_gpus and not visible_uuids:
        fails.append(
            _failure(
                "gpu_count",
                f"node {node}: NVML shows {count} GPU(s), expected {expected_gpus} "
                "(check the pod's GPU request / device plugin, or --expected-gpus / topology.gpusPerWorker)",
                node=node,
                expected=str(expected_gpus),
                found=str(count),
            )
        )
    for gpu in health.get("gpus", []):
        if visible_uuids and gpu.get("uuid") not in visible_uuids:
            continue
        label = f"node {node} NVML GPU {gpu.get('index')} ({gpu.get('pci_bus_id') or gpu.get('uuid')})"
        where = {"node": node, "gpu": f"nvml{gpu.get('index')}"}
        for key, what in (
            ("ecc_uncorrected_volatile", "volatile"),
            ("ecc_uncorrected_aggregate", "aggregate"),
        ):
            value = gpu.get(key)
            if isinstance(value, int) and value > 0:
                fails.append(
                    _failure(
                        "ecc",
                        f"{label}: {value} uncorrectable ECC error(s) ({what})",
                        expected="0",
                        found=str(value),
                        **where,
                    )
                )
        for key, check, what, expected, found in MEMORY_FAULTS:
            if gpu.get(key) is True:
                fails.append(_failure(check, f"{label}: {what}", expected=expected, found=found, **where))
        reasons = gpu.get("throttle_reasons")
        if isinstance(reasons, int) and reasons & ~allowed_throttle:
            bad = throttle_names(reasons & ~allowed_throttle)
            fails.append(
                _failure(
                    "throttle",
                    f"{label}: clocks held back by {', '.join(bad)}",
                    expected=f"only {', '.join(throttle_names(allowed_throttle)) or 'none'}",
                    found=", ".join(throttle_names(reasons)),
                    **where,
                )
            )
        unreadable = gpu.get("unreadable", {})
        for key in ("temperature_c", "power_w"):
            if gpu.get(key) is None:
                fails.append(
                    _failure(
                        "sensors",
                        f"{label}: {key.split('_')[0]} not readable: {unreadable.get(key, 'no value')}",
                        expected="readable",
                        found="unreadable",
                        **where,
                    )
                )
    return fails


def _threshold_check(value: float | None, minimum: float | None) -> bool | None:
    if minimum is None:
        return None
    return value is not None and value >= minimum


def evaluate(raw: Mapping[str, Any], options: Options) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Apply the thresholds to raw measurements.  Returns (annotated measurements, failures)."""
    th: Thresholds = options.thresholds
    failures: list[dict[str, Any]] = []

    nodes = []
    for node in raw.get("nodes", []):
        name = str(node["name"])
        entry = dict(node)
        local = node.get("local_gpus")
        if options.expected_gpus is not None and local is not None and local != options.expected_gpus:
            failures.append(
                _failure(
                    "gpu_count",
                    f"node {name}: torch sees {local} GPU(s), expected {options.expected_gpus}",
                    node=name,
                    expected=str(options.expected_gpus),
                    found=str(local),
                )
            )
        health = node.get("health")
        if health is not None:
            visible = node.get("visible_uuids") if node.get("cuda_visible_devices") else None
            failures.extend(
                health_failures(name, health, options.expected_gpus, options.allowed_throttle, visible)
            )
        nodes.append(entry)

    gpus = []
    for gpu in raw.get("gpus", []):
        entry = dict(gpu)
        label = gpu_label(str(gpu["node"]), int(gpu["local_rank"]))
        where = {"node": str(gpu["node"]), "gpu": str(gpu["local_rank"])}
        if gpu.get("error"):
            failures.append(
                _failure("gpu_compute", f"{label}: {gpu['error']}", expected="runs", found="error", **where)
            )
        for key, unit in (("matmul_tflops", "TFLOP/s"), ("copy_gbps", "GB/s")):
            minimum = th.minimum(key)
            value = gpu.get(key)
            ok = _threshold_check(value, minimum)
            entry[f"{key}_min"] = minimum
            entry[f"{key}_pass"] = ok
            if ok is False and not gpu.get("error"):
                what = "bf16 matmul" if key == "matmul_tflops" else "device copy"
                ref = getattr(th, key)
                failures.append(
                    _failure(
                        key,
                        f"{label}: {what} {value:.1f} {unit} < {minimum:.1f} ({ref:g} x {th.tolerance:g})",
                        expected=f">= {minimum:.1f}",
                        found=f"{value:.1f}",
                        **where,
                    )
                )
        gpus.append(entry)

    def sweeps(kind: str) -> list[dict[str, Any]]:
        out = []
        for sweep in raw.get(kind, []):
            entry = dict(sweep)
            nranks = len(sweep.get("ranks", [])) or 2
            entry["points"] = enrich_points(sweep.get("points", []), kind, nranks)
            cross = sweep.get("scope") == "cross-node"
            key = f"{'xnode_' if cross else ''}{kind}_busbw_gbps"
            minimum = th.minimum(key)
            figure, at = sweep_figure(entry["points"], options.check_bytes)
            entry["figure_gbps"], entry["figure_bytes"], entry["minimum_gbps"] = figure, at, minimum
            what = "all-reduce" if kind == "allreduce" else "send/recv"
            label = f"{'cross-node ' if cross else ''}{what} {sweep.get('label')}"
            where: dict[str, Any] = {
                "node": ",".join(sorted(set(sweep.get("nodes", [])))) or None,
                "pair": sweep.get("label") if kind == "sendrecv" else None,
            }
            ok: bool | None = True
            if sweep.get("error"):
                ok = False
                failures.append(
                    _failure(kind, f"{label}: {sweep['error']}", expected="completes", found="error", **where)
                )
            elif sweep.get("correct") is False:
                ok = False
                failures.append(
                    _failure(
                        kind,
                        f"{label}: wrong result (data corrupted in transit)",
                        expected="correct sum/data",
                        found="mismatch",
                        **where,
                    )
                )
            else:
                ok = _threshold_check(figure, minimum)
                if ok is False:
                    ref = float(getattr(th, key) or 0.0)
                    found = "no data" if figure is None else f"{figure:.1f}"
                    at_txt = fmt_bytes(at) if at is not None else "-"
                    failures.append(
                        _failure(
                            kind,
                            f"{label}: busbw {found} GB/s at {at_txt} < {minimum:.1f} "
                            f"({ref:g} x {th.tolerance:g})",
                            expected=f">= {minimum:.1f}",
                            found=found,
                            **where,
                        )
                    )
            entry["pass"] = ok
            out.append(entry)
        return out

    allreduce = sweeps("allreduce")
    sendrecv = sweeps("sendrecv")

    for err in raw.get("errors", []):
        failures.append(
            _failure(
                "run",
                f"node {err.get('node')} rank {err.get('rank')}: "
                f"{err.get('phase')} failed: {err.get('error')}",
                node=err.get("node"),
                expected="completes",
                found="error",
            )
        )
    if not raw.get("gpus") and not raw.get("errors"):
        failures.append(
            _failure(
                "gpu_count",
                "no GPU measured (no GPU visible, or the check did not start)",
                expected=">= 1 GPU",
                found="0",
            )
        )

    annotated = {"nodes": nodes, "gpus": gpus, "allreduce": allreduce, "sendrecv": sendrecv}
    return annotated, failures


def verdict_line(failures: Sequence[Mapping[str, Any]]) -> str:
    if not failures:
        return "PASS: all GPU checks passed"
    named = sorted({label for f in failures for label in _names(f)})
    head = f"FAIL: {len(failures)} check(s) failed"
    if named:
        head += f" on {', '.join(named)}"
    return (
        head
        + ": "
        + "; ".join(str(f["message"]) for f in failures[:5])
        + (" ..." if len(failures) > 5 else "")
    )


def _names(failure: Mapping[str, Any]) -> Iterable[str]:
    if failure.get("pair"):
        yield f"pair {failure['pair']}"
    elif failure.get("gpu") is not None and failure.get("node"):
        yield f"node {failure['node']} GPU {failure['gpu']}"
    elif failure.get("node"):
        yield f"node {failure['node']}"


def build_report(raw: Mapping[str, Any], options: Options) -> dict[str, Any]:
    """The JSON report: per GPU, per node, per pair; thresholds; pass/fail with the reasons."""
    annotated, failures = evaluate(raw, options)
    return {
        "kind": REPORT_KIND,
        "version": REPORT_VERSION,
        "ok": not failures,
        "verdict": verdict_line(failures),
        "failures": failures,
        "thresholds": options.thresholds.to_dict(),
        "expected_gpus": options.expected_gpus,
        "check_bytes": options.check_bytes,
        "allowed_throttle": throttle_names(options.allowed_throttle),
        "sizes": list(options.sizes),
        "world_size": raw.get("world_size"),
        "environment": raw.get("environment", {}),
        "phases_s": raw.get("phases_s", {}),
        "wall_s": raw.get("wall_s"),
        **annotated,
    }


def _cell(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _mark(ok: bool | None) -> str:
    return {True: "ok", False: "FAIL", None: "-"}[ok]


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return lines


def format_table(report: Mapping[str, Any]) -> str:
    """A readable summary for the log."""
    th = report["thresholds"]["minimum"]
    tolerance = report["thresholds"]["tolerance"]
    lines = [
        f"GPU checks: {len(report.get('nodes', []))} node(s), {len(report.get('gpus', []))} GPU(s); "
        + (
            f"thresholds = reference x {tolerance:g}"
            if tolerance is not None
            else "no pass marks (no run spec and no threshold flags): figures reported only"
        )
    ]
    env = report.get("environment", {})
    if env:
        lines.append("  " + ", ".join(f"{k} {v}" for k, v in env.items() if v is not None))
    health: dict[tuple[str, str], Mapping[str, Any]] = {}
    for node in report.get("nodes", []):
        for g in (node.get("health") or {}).get("gpus", []):
            if g.get("uuid"):
                health[(node["name"], g["uuid"])] = g
    rows = []
    for g in report.get("gpus", []):
        h = health.get((g["node"], g.get("uuid") or ""), {})
        temp = h.get("temperature_c")
        power = h.get("power_w")
        ecc = f"{_cell(h.get('ecc_uncorrected_volatile'))}/{_cell(h.get('ecc_uncorrected_aggregate'))}"
        thr = h.get("throttle_reasons")
        ok = (
            g.get("matmul_tflops_pass") is not False
            and g.get("copy_gbps_pass") is not False
            and not g.get("error")
        )
        rows.append(
            [
                str(g["node"]),
                str(g["local_rank"]),
                str(g.get("name") or "-"),
                "-" if temp is None else f"{temp}C",
                "-" if power is None else f"{power:.0f}W",
                ecc,
                "-" if thr is None else ",".join(throttle_names(int(thr))) or "none",
                _cell(g.get("matmul_tflops"), 1),
                _cell(g.get("copy_gbps")),
                _mark(ok),
            ]
        )
    lines.append("")
    lines.append(
        f"per GPU (matmul >= {_cell(th['matmul_tflops'], 1)} TFLOP/s, copy >= {_cell(th['copy_gbps'])} GB/s)"
    )
    lines += _table(
        [
            "node",
            "gpu",
            "name",
            "temp",
            "power",
            "ecc v/a",
            "throttle",
            "matmul TFLOP/s",
            "copy GB/s",
            "status",
        ],
        rows,
    )

    sizes = list(report.get("sizes", []))
    for kind, title, key in (
        ("allreduce", "all-reduce", "allreduce_busbw_gbps"),
        ("sendrecv", "send/recv", "sendrecv_busbw_gbps"),
    ):
        sweeps = report.get(kind, [])
        if not sweeps:
            continue
        all_sizes = sorted({p["bytes"] for s in sweeps for p in s["points"]} | set(sizes))
        lines.append("")
        xkey = f"xnode_{key}"
        lines.append(
            f"{title} busbw GB/s (node >= {_cell(th[key])}, cross-node >= {_cell(th[xkey])}; "
            f"checked at >= {fmt_bytes(int(report['check_bytes']))})"
        )
        rows = []
        for s in sweeps:
            by_size = {p["bytes"]: p["busbw_gbps"] for p in s["points"]}
            status = _mark(s.get("pass"))
            if s.get("error"):
                status = "FAIL (error)"
            elif s.get("correct") is False:
                status = "FAIL (wrong data)"
            rows.append([s["scope"], str(s["label"])] + [_cell(by_size.get(b)) for b in all_sizes] + [status])
        lines += _table(["scope", "members"] + [fmt_bytes(b) for b in all_sizes] + ["status"], rows)
    lines.append("")
    if report.get("phases_s"):
        lines.append("phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in report["phases_s"].items()))
    if report.get("wall_s") is not None:
        lines.append(f"wall: {report['wall_s']:.1f} s")
    for f in report.get("failures", []):
        lines.append(f"FAILED {f['check']}: {f['message']}")
    lines.append(str(report["verdict"]))
    return "\n".join(lines)
