"""Building the run-health report: read the volume, assess, summarise; and the ``--fail-on`` rule."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from miles_hooks.core import exported, log
from miles_hooks.core.errors import BadInput, CheckFailed
from miles_hooks.core.fsutil import human_bytes
from miles_hooks.core.runspec import RunSpec
from miles_hooks.core.runspec_types import RawSpec
from miles_hooks.steps.report import checkpoints, events, provenance, space
from miles_hooks.steps.report.deadline import Deadline
from miles_hooks.steps.report.output import iso, json_number, plot
from miles_hooks.steps.report.verdict import (
    DEGENERATE,
    FINDING_KINDS,
    SPACE,
    STALLED,
    UNKNOWN,
    Activity,
    Finding,
    Thresholds,
    assess,
    num_rollout,
)

LOG = log.get("report")

DEFAULT_FAIL_ON = f"{DEGENERATE},{STALLED}"
DEFAULT_TIMEOUT = 300.0


def parse_fail_on(text: str | None) -> frozenset[str]:
    """``--fail-on``: a comma-separated subset of the finding kinds, or ``none``."""
    items = [t.strip() for t in (text or "").split(",") if t.strip()]
    if items == ["none"]:
        return frozenset()
    unknown = [t for t in items if t not in FINDING_KINDS]
    if unknown:
        raise BadInput(
            f"--fail-on: expected a comma-separated subset of {', '.join(FINDING_KINDS)} (or none), "
            f"found {', '.join(repr(u) for u in unknown)}"
        )
    return frozenset(items)


def metric_summary(points: Sequence[events.Point], window: int) -> dict[str, Any]:
    finite = [p.value for p in points if math.isfinite(p.value)]
    recent = [p.value for p in points[-window:] if math.isfinite(p.value)]
    return {
        "points": len(points),
        "firstStep": points[0].step if points else None,
        "lastStep": points[-1].step if points else None,
        "last": json_number(points[-1].value) if points else None,
        "lastTime": iso(points[-1].wall_time) if points else None,
        "min": min(finite) if finite else None,
        "max": max(finite) if finite else None,
        "recentMean": statistics.fmean(recent) if recent else None,
        "nonFinite": len(points) - len(finite),
    }


def unjudged(raw: RawSpec, tb: events.EventScan) -> str:
    """Why a run that writes has no reward to be judged by, and what turns it on."""
    where = f"the run spec's output.tensorboardDir {raw['output']['tensorboardDir']}"
    if "--use-tensorboard" not in [str(a) for a in raw["train"]["args"]]:
        why = "TensorBoard tracking is off; set recipe.tracking.tensorboard=true"
    elif not tb.files:
        why = f"no TensorBoard event files under {where}"
    else:
        why = f"the event files under {where} hold no {events.REWARD}"
    return f"nothing to judge the run's health by: {why}; the verdict is unknown, not healthy"


def collect(
    spec: RunSpec,
    timeout: float | None = DEFAULT_TIMEOUT,
    plot_path: str | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    raw = spec.raw
    out_cfg = raw["output"]
    deadline = Deadline(timeout)
    th = Thresholds.from_spec(raw)
    warnings: list[str] = []

    mount = raw["storage"]["mountPath"]
    output_dir = Path(out_cfg["dir"])
    if output_dir.is_relative_to(mount) and not output_dir.exists() and not Path(mount).is_dir():
        raise BadInput(
            f"output.dir {out_cfg['dir']} is not on this machine: the shared volume (storage.mountPath "
            f"{mount}) is not mounted here. Run `helm test {raw['release']['name']} -n "
            f"{raw['release']['namespace']} --logs` (its pod mounts the volume), or copy the run directory "
            "out of a pod that mounts it (`kubectl cp`) and pass it as --output-dir"
        )
    prov = provenance.read(out_cfg["provenanceFile"], spec)
    warnings.extend(prov.pop("warnings"))
    ckpt = checkpoints.scan(out_cfg["checkpointDir"], deadline)
    warnings.extend(ckpt.warnings)
    tb = events.scan(out_cfg["tensorboardDir"], deadline)
    warnings.extend(tb.warnings)
    now = time.time() if now is None else now

    # Free space against the next save.
    latest = ckpt.latest
    expected, basis = space.next_checkpoint_bytes(
        int(raw["model"]["parameterCount"]),
        latest.bytes if latest else None,
        f"iter_{latest.iteration:07d}" if latest else None,
    )
    space_info: dict[str, Any] = {
        "expectedBytes": expected,
        "basis": basis,
        "freeBytes": None,
        "totalBytes": None,
        "probedPath": None,
        "status": "unknown",
        "savesThatFit": None,
        "bytesPerParameter": space.BYTES_PER_PARAMETER,
    }
    extra: list[Finding] = []
    try:
        probed, free, total = space.probe(out_cfg["checkpointDir"])
    except OSError as exc:
        warnings.append(f"free space of {out_cfg['checkpointDir']} cannot be read: {exc.strerror}")
    else:
        check = space.assess(free, expected)
        space_info.update(
            {
                "freeBytes": free,
                "totalBytes": total,
                "probedPath": probed,
                "status": check.status,
                "savesThatFit": check.saves_that_fit,
            }
        )
        if check.status == "insufficient":
            extra.append(
                Finding(
                    SPACE,
                    f"{human_bytes(free)} free on {probed}, the next checkpoint needs "
                    f"~{human_bytes(expected)} ({basis}); expected room for at least one save: free "
                    "space on the volume or remove old iter_* directories",
                )
            )
        elif check.status == "tight":
            warnings.append(
                f"only {check.saves_that_fit} more checkpoint(s) of ~{human_bytes(expected)} fit in "
                f"{human_bytes(free)} free on {probed}"
            )

    # What shows the run moving.
    activity: list[Activity] = []
    if tb.last_scalar is not None:
        wall, tag, step = tb.last_scalar
        activity.append(Activity(wall, f"metric {tag} step {step} at {iso(wall)}"))
    save_time = ckpt.last_save_time
    if save_time is not None:
        name = f"iter_{ckpt.checkpoints[-1].iteration:07d}" if ckpt.checkpoints else checkpoints.TRACKER
        activity.append(Activity(save_time, f"checkpoint {name} at {iso(save_time)}"))
    submitted = prov.get("submittedAtEpoch")
    if isinstance(submitted, float):
        activity.append(Activity(submitted, f"job {prov.get('submissionId')} submitted at {iso(submitted)}"))
    started = tb.scalars > 0 or bool(ckpt.checkpoints)
    if started and not tb.points(events.REWARD):
        extra.append(Finding(UNKNOWN, unjudged(raw, tb)))
    total_rollouts = num_rollout([str(a) for a in raw["train"]["args"]])
    verdict = assess(
        tb.series,
        activity,
        now,
        th,
        started=started,
        tracker_iteration=ckpt.tracker_iteration,
        total_rollouts=total_rollouts,
        extra=extra,
    )

    metrics: dict[str, Any] = {}
    for tag in (*events.TAGS, *tb.eval_tags()):
        if tb.points(tag):
            metrics[tag] = metric_summary(tb.points(tag), th.flat_reward_rollouts)
    missing = [t for t in events.TAGS if t not in metrics]
    notes = list(verdict.notes)
    if started and tb.scalars and missing:
        notes.append(f"not in the event files: {', '.join(missing)}")

    result: dict[str, Any] = {
        "kind": "miles-hooks/report",
        "version": 1,
        "generatedAt": iso(now),
        "generatedAtEpoch": now,
        "release": {"name": spec.release, "namespace": spec.namespace},
        "submissionId": spec.submission_id(),
        "verdict": verdict.verdict,
        "findings": [f.as_dict() for f in verdict.findings],
        "notes": notes,
        "warnings": warnings,
        "thresholds": th.as_dict(),
        "numRollout": total_rollouts,
        "finished": verdict.finished,
        "lastActivity": None if verdict.last_activity is None else verdict.last_activity.what,
        "idleMinutes": None if verdict.idle_seconds is None else round(verdict.idle_seconds / 60.0, 1),
        "provenance": prov,
        "checkpoints": ckpt.as_dict(),
        "exports": {"dir": raw["export"]["dir"], "published": exported.published(raw["export"]["dir"])},
        "space": space_info,
        "tensorboard": {
            "dir": tb.directory,
            "exists": tb.exists,
            "files": len(tb.files),
            "scalars": tb.scalars,
            "lastScalarTime": tb.last_scalar[0] if tb.last_scalar else None,
            "lastScalarTag": tb.last_scalar[1] if tb.last_scalar else None,
            "lastScalarStep": tb.last_scalar[2] if tb.last_scalar else None,
            "unreadable": [f.path for f in tb.files if f.error],
        },
        "metrics": metrics,
        "recent": {
            tag: [[p.step, json_number(p.value)] for p in tb.points(tag)[-th.flat_reward_rollouts :]]
            for tag in (events.REWARD, events.REPETITION)
            if tb.points(tag)
        },
        "plot": None,
    }
    if plot_path:
        deadline.check("drawing the plot")
        result["plot"] = plot(
            plot_path,
            tb.points(events.REWARD),
            tb.points(events.REPETITION),
            th.max_repetition_frac,
            f"{spec.release}: {verdict.verdict}",
        )
    LOG.info(
        "run verdict",
        extra={
            "fields": {
                "verdict": verdict.verdict,
                "findings": len(verdict.findings),
                "event_files": len(tb.files),
                "checkpoints": len(ckpt.complete),
            }
        },
    )
    return result


def check(result: dict[str, Any], fail_on: frozenset[str]) -> None:
    """Raise :class:`CheckFailed` (exit 1) naming every finding whose kind is in ``fail_on``."""
    failing = [f for f in result["findings"] if f["kind"] in fail_on]
    if failing:
        kinds = ", ".join(sorted({f["kind"] for f in failing}))
        raise CheckFailed(
            f"run {result['release']['name']} is {result['verdict']} (failing on {kinds}; "
            f"--fail-on {','.join(sorted(fail_on))}):",
            [f"[{f['kind']}] {f['reason']}" for f in failing],
        )
