"""PNG of bus bandwidth against message size (matplotlib, imported lazily, Agg backend)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .verdict import fmt_bytes

Series = Mapping[str, Sequence[tuple[int, float]]]


def write_plot(
    report: Mapping[str, Any], path: str | Path, extra: Mapping[str, Series] | None = None
) -> Path | None:
    """Two panels (all-reduce, send/recv): one line per sweep, the pass mark dotted.

    ``extra`` adds reference lines per panel, e.g. ``{"allreduce": {"nccl-tests": [(bytes, busbw), ...]}}``.
    Returns the path, or None when matplotlib is missing.
    """
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        return None
    th = report["thresholds"]["minimum"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), squeeze=False)
    panels = (
        ("allreduce", "all-reduce", "allreduce_busbw_gbps"),
        ("sendrecv", "send/recv (per pair, bidirectional)", "sendrecv_busbw_gbps"),
    )
    sizes: set[int] = set()
    for ax, (kind, title, key) in zip(axes[0], panels, strict=True):
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
        for ax in axes[0]:
            ax.set_xticks(ticks)
            ax.set_xticklabels([fmt_bytes(t) for t in ticks], rotation=45, fontsize=7)
    verdict = str(report.get("verdict", ""))
    fig.suptitle(verdict if len(verdict) < 110 else verdict[:107] + "...", fontsize=9)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
