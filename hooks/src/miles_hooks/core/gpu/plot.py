"""PNG of what gpu-check measured (matplotlib, imported on use, Agg backend).

One panel per kind of figure that was measured: bf16 matmul and device copy per GPU (bars, the pass
mark dotted), then bus bandwidth against message size for all-reduce and send/recv (one line per
sweep). A kind that was not measured gets no empty panel: a note under the panels says which and why
(a node with one GPU has no peer to talk to, so no all-reduce or send/recv).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from miles_hooks.core.gpu.verdict import fmt_bytes

Series = Mapping[str, Sequence[tuple[int, float]]]

PER_GPU = (
    ("matmul_tflops", "bf16 matmul per GPU", "TFLOP/s"),
    ("copy_gbps", "device copy per GPU (read + write)", "GB/s"),
)
SWEEPS = (
    ("allreduce", "all-reduce", "allreduce_busbw_gbps"),
    ("sendrecv", "send/recv (per pair, bidirectional)", "sendrecv_busbw_gbps"),
)


def _why_not_measured(report: Mapping[str, Any]) -> str:
    nodes = report.get("nodes") or []
    if len(nodes) == 1 and (nodes[0].get("local_gpus") or len(report.get("gpus") or [])) == 1:
        return "one GPU: no peer to talk to"
    if not report.get("gpus"):
        return "the check did not run; see the verdict"
    return "no result; see the failures"


def layout(
    report: Mapping[str, Any], extra: Mapping[str, Series] | None = None
) -> tuple[list[str], list[str]]:
    """(the panels to draw, in order, by figure key; the notes on what was not measured and why)."""
    panels: list[str] = []
    notes: list[str] = []
    gpus = report.get("gpus") or []
    for key, title, _ in PER_GPU:
        if any(g.get(key) is not None for g in gpus):
            panels.append(key)
        else:
            notes.append(f"{title}: not measured ({_why_not_measured(report)})")
    for kind, title, _ in SWEEPS:
        if any(s.get("points") for s in report.get(kind) or []) or (extra or {}).get(kind):
            panels.append(kind)
        else:
            notes.append(f"{title}: not measured ({_why_not_measured(report)})")
    return panels, notes


def _per_gpu_panel(ax: Any, report: Mapping[str, Any], key: str, title: str, unit: str) -> None:
    gpus = [g for g in report.get("gpus") or [] if g.get(key) is not None]
    labels = [f"{g['node']}\nGPU {g['local_rank']}" for g in gpus]
    minimum = report["thresholds"]["minimum"].get(key)
    colors = ["tab:red" if g.get(f"{key}_pass") is False else "tab:blue" for g in gpus]
    ax.bar(range(len(gpus)), [float(g[key]) for g in gpus], color=colors)
    if minimum is not None:
        ax.axhline(minimum, color="red", linestyle=":", linewidth=1.5, label=f"pass mark {minimum:.0f}")
        ax.legend(fontsize=7)
    ax.set_xticks(range(len(gpus)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_title(title)
    ax.set_ylabel(unit)
    ax.grid(True, axis="y", alpha=0.3)


def _sweep_panel(
    ax: Any, report: Mapping[str, Any], kind: str, title: str, key: str, extra: Mapping[str, Series] | None
) -> set[int]:
    th = report["thresholds"]["minimum"]
    sizes: set[int] = set()
    for sweep in report.get(kind, []):
        pts = sweep.get("points", [])
        if not pts:
            continue
        xs = [p["bytes"] for p in pts]
        sizes.update(xs)
        cross = sweep.get("scope") == "cross-node"
        ax.plot(
            xs,
            [p["busbw_gbps"] for p in pts],
            marker="o",
            linestyle="--" if cross else "-",
            label=f"{'x-node ' if cross else ''}{sweep.get('label')}",
        )
    for name, series in ((extra or {}).get(kind) or {}).items():
        if series:
            sizes.update(b for b, _ in series)
            ax.plot([b for b, _ in series], [v for _, v in series], marker="x", linestyle=":", label=name)
    check_bytes = int(report.get("check_bytes") or 0)
    xmax = max((p["bytes"] for sw in report.get(kind, []) for p in sw.get("points", [])), default=0)
    for tkey, style in ((key, "red"), (f"xnode_{key}", "orange")):
        if th.get(tkey) is not None and report.get(kind) and xmax:
            ax.hlines(
                th[tkey],
                min(check_bytes, xmax) or xmax,
                xmax,
                colors=style,
                linestyles=":",
                linewidth=1.5,
                label=f"{'x-node ' if tkey.startswith('x') else ''}pass mark {th[tkey]:.0f} "
                f"(sizes >= {fmt_bytes(min(check_bytes, xmax) or xmax)})",
            )
    ax.set_xscale("log", base=2)
    ax.set_title(title)
    ax.set_xlabel("message size")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    if sizes:
        ticks = sorted(sizes)
        ax.set_xticks(ticks)
        ax.set_xticklabels([fmt_bytes(t) for t in ticks], rotation=45, fontsize=7)
    return sizes


def write_plot(
    report: Mapping[str, Any], path: str | Path, extra: Mapping[str, Series] | None = None
) -> Path | None:
    """Draw the panels of :func:`layout` and its notes; returns the path, or None without matplotlib.

    ``extra`` adds reference lines per sweep panel, e.g.
    ``{"allreduce": {"nccl-tests": [(bytes, busbw), ...]}}``.
    """
    try:
        # matplotlib is heavy and optional: only when a PNG is asked for
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        return None
    panels, notes = layout(report, extra)
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(6.5 * max(1, len(panels)), 5), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=False):
        for key, title, unit in PER_GPU:
            if panel == key:
                _per_gpu_panel(ax, report, key, title, unit)
        for kind, title, key in SWEEPS:
            if panel == kind:
                _sweep_panel(ax, report, kind, title, key, extra)
    if not panels:
        axes[0][0].axis("off")
    verdict = str(report.get("verdict", ""))
    fig.suptitle(verdict if len(verdict) < 110 else verdict[:107] + "...", fontsize=9)
    if notes:
        fig.text(0.5, 0.01, "\n".join(notes), ha="center", va="bottom", fontsize=8, color="dimgray")
    fig.tight_layout(rect=(0, 0.03 * (len(notes) + 1) if notes else 0, 1, 1))
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
