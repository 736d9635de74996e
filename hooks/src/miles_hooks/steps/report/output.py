"""Rendering a report: the text table, JSON-safe values and the PNG plot."""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from miles_hooks.core.errors import BadInput
from miles_hooks.core.fsutil import human_bytes
from miles_hooks.steps.report.events import REPETITION, REWARD, Point


def json_number(value: float) -> float | str:
    """JSON has no NaN/inf: non-finite values become the strings "nan", "inf", "-inf"."""
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def iso(ts: float | None) -> str | None:
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def ago(ts: float | None, now: float) -> str:
    if ts is None:
        return "never"
    minutes = max(0.0, now - ts) / 60.0
    if minutes < 120:
        return f"{minutes:.0f} min ago"
    if minutes < 48 * 60:
        return f"{minutes / 60:.1f} h ago"
    return f"{minutes / 1440:.1f} d ago"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.extend("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)
    return lines


def render(result: dict[str, Any]) -> str:
    now = float(result["generatedAtEpoch"])
    prov = result["provenance"]
    ckpt = result["checkpoints"]
    space = result["space"]
    tb = result["tensorboard"]
    lines = [
        f"run            : {result['release']['name']} (namespace {result['release']['namespace']}), "
        f"submission {result['submissionId']}"
    ]
    if prov.get("present"):
        model = prov.get("model") or {}
        revision = model.get("resolvedRevision") or model.get("revision")
        when = ago(prov.get("submittedAtEpoch"), now)
        lines.append(
            f"provenance     : submitted {prov.get('submittedAt')} ({when}), "
            f"image {prov.get('milesImage')}, model {model.get('repoId')}@{revision}, "
            f"ray {prov.get('rayVersion')}"
        )
    else:
        lines.append(f"provenance     : none at {prov['path']}")
    latest = ckpt.get("latest")
    if latest:
        lines.append(
            f"checkpoints    : {ckpt['count']} complete, latest iter_{latest['iteration']:07d} "
            f"({human_bytes(latest['bytes'])}), {human_bytes(ckpt['totalBytes'])} in all, "
            f"last save {ago(ckpt.get('lastSaveTime'), now)}"
        )
    elif ckpt.get("exists"):
        lines.append(f"checkpoints    : none complete in {ckpt['dir']}")
    else:
        lines.append(f"checkpoints    : {ckpt['dir']} does not exist yet")
    published = result["exports"]["published"]
    if published:
        last = published[-1]
        lines.append(
            f"export         : iter_{last['iteration']:07d} as Hugging Face safetensors at {last['path']} "
            f"({human_bytes(last['bytes'])}, {last['files']} files, exported {last['exportedAt']})"
            + (f"; {len(published)} exports in all" if len(published) > 1 else "")
        )
    else:
        lines.append(f"export         : none yet in {result['exports']['dir']}")
    if space.get("freeBytes") is not None:
        fit = space.get("savesThatFit")
        lines.append(
            f"free space     : {human_bytes(space['freeBytes'])} free on {space['probedPath']}; next save "
            f"~{human_bytes(space['expectedBytes'])} ({space['basis']})"
            + (f": {fit} more save(s) fit [{space['status']}]" if fit is not None else " [unknown]")
        )
    if not tb.get("exists"):
        lines.append(f"tensorboard    : {tb['dir']} does not exist yet")
    else:
        lines.append(
            f"tensorboard    : {tb['files']} event file(s), {tb['scalars']} scalars in {tb['dir']}; last "
            f"metric {ago(tb.get('lastScalarTime'), now)}"
            + (f" ({tb['lastScalarTag']} step {tb['lastScalarStep']})" if tb.get("lastScalarTag") else "")
        )
    rows = []
    for tag, m in result["metrics"].items():
        rows.append(
            [
                tag,
                m["points"],
                m["firstStep"],
                m["lastStep"],
                m["last"],
                m["min"],
                m["max"],
                m["recentMean"],
                m["nonFinite"] or None,
            ]
        )
    if rows:
        window = f"mean of last {result['thresholds']['flatRewardRollouts']}"
        lines.append("")
        lines.extend(
            table(
                ["metric", "points", "first step", "last step", "last", "min", "max", window, "non-finite"],
                rows,
            )
        )
    lines.append("")
    lines.append(f"verdict        : {result['verdict'].upper()}")
    for f in result["findings"]:
        lines.append(f"  - [{f['kind']}] {f['reason']}")
    for note in result["notes"]:
        lines.append(f"  note: {note}")
    for warning in result["warnings"]:
        lines.append(f"  warning: {warning}")
    if result.get("plot"):
        lines.append(f"plot           : {result['plot']}")
    return "\n".join(lines)


def plot(
    path: str | Path, reward: Sequence[Point], repetition: Sequence[Point], max_repetition: float, title: str
) -> str:
    """Write a PNG of raw reward and repetition fraction over rollouts; returns the path written."""
    target = Path(path)
    if target.is_dir():
        raise BadInput(f"--plot {target}: expected a file path for the PNG, found a directory")
    parent = target.parent
    if not parent.is_dir():
        raise BadInput(f"--plot {target}: expected an existing directory {parent}, found none")
    if not os.access(parent, os.W_OK):
        raise BadInput(f"--plot {target}: expected a writable directory {parent}, found it read-only")
    import matplotlib  # noqa: PLC0415 - heavy, only when a plot is asked for

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # noqa: PLC0415 - as matplotlib above

    fig, (ax_reward, ax_rep) = plt.subplots(2, 1, sharex=True, figsize=(8, 5.5))
    try:
        ax_reward.plot([p.step for p in reward], [p.value for p in reward], marker=".", color="tab:blue")
        ax_reward.set_ylabel(REWARD)
        ax_reward.grid(True, alpha=0.3)
        ax_rep.plot([p.step for p in repetition], [p.value for p in repetition], marker=".", color="tab:red")
        ax_rep.axhline(
            max_repetition, linestyle="--", color="gray", label=f"maxRepetitionFrac {max_repetition:g}"
        )
        ax_rep.set_ylabel(REPETITION)
        ax_rep.set_xlabel("rollout")
        ax_rep.set_ylim(0, 1)
        ax_rep.legend(loc="upper right")
        ax_rep.grid(True, alpha=0.3)
        if not reward and not repetition:
            ax_reward.text(0.5, 0.5, "no rollout metrics yet", transform=ax_reward.transAxes, ha="center")
        fig.suptitle(title)
        fig.tight_layout()
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".png", dir=str(parent))
        os.close(fd)
        try:
            fig.savefig(tmp, format="png", dpi=100)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    finally:
        plt.close(fig)
    return str(target)
