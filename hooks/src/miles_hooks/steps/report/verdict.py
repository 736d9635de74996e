"""The verdict: pure functions over the metric series, the save times and the clock.

healthy      metrics are arriving and none of the degenerate rules fires
degenerate   raw reward exactly 0 for the last ``flatRewardRollouts`` rollouts, repetition fraction
             above ``maxRepetitionFrac`` on average over the recent rollouts, or a non-finite
             (NaN/inf) grad norm or reward in the recent window
stalled      no new metric and no new save for more than ``stallMinutes`` (a finished run never stalls)
not-started  nothing written yet: no metric and no checkpoint (and not submitted longer ago than the
             stall window, which is reported as stalled)
unknown      the run writes (checkpoints) but no reward metric to judge it by: tracking off, no event
             files, or none with the reward; never called healthy without evidence

Thresholds are ``checks.health`` in the run spec. A run can be degenerate and stalled at once: the
verdict is the first of degenerate, stalled, not-started, healthy that has a finding, and every finding
is listed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from miles_hooks.steps.report.events import GRAD_NORM, REPETITION, REWARD, Point

DEGENERATE = "degenerate"
STALLED = "stalled"
NOT_STARTED = "not-started"
HEALTHY = "healthy"
UNKNOWN = "unknown"
SPACE = "space"
VERDICTS = (HEALTHY, DEGENERATE, STALLED, NOT_STARTED, UNKNOWN)
FINDING_KINDS = (DEGENERATE, STALLED, NOT_STARTED, UNKNOWN, SPACE)

ZERO = 1e-9
# The repetition rule averages over the last min(flatRewardRollouts, available) rollouts, and waits for
# at least this many (or flatRewardRollouts when smaller) so one noisy first rollout does not decide.
MIN_REPETITION_POINTS = 3


@dataclass(frozen=True)
class Thresholds:
    flat_reward_rollouts: int
    max_repetition_frac: float
    stall_minutes: float

    @classmethod
    def from_spec(cls, raw: Mapping[str, Any]) -> Thresholds:
        health = raw["checks"]["health"]
        return cls(
            int(health["flatRewardRollouts"]),
            float(health["maxRepetitionFrac"]),
            float(health["stallMinutes"]),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "flatRewardRollouts": self.flat_reward_rollouts,
            "maxRepetitionFrac": self.max_repetition_frac,
            "stallMinutes": self.stall_minutes,
        }


@dataclass(frozen=True)
class Activity:
    """Something that shows the run moving: a metric written, a checkpoint saved, a job submitted."""

    time: float
    what: str


@dataclass(frozen=True)
class Finding:
    kind: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "reason": self.reason}


@dataclass
class Assessment:
    verdict: str
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    finished: bool = False
    last_activity: Activity | None = None
    idle_seconds: float | None = None


def _fmt(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:.3g}"


def _steps(points: Sequence[Point]) -> str:
    if not points:
        return "none"
    first, last = points[0].step, points[-1].step
    return f"step {first}" if first == last else f"steps {first}-{last}"


def num_rollout(train_args: Sequence[str]) -> int | None:
    """``--num-rollout N`` (or ``--num-rollout=N``) from the train argument list, else None."""
    for i, arg in enumerate(train_args):
        value: str | None = None
        if arg == "--num-rollout" and i + 1 < len(train_args):
            value = train_args[i + 1]
        elif arg.startswith("--num-rollout="):
            value = arg.split("=", 1)[1]
        if value is not None and re.fullmatch(r"\d+", value.strip()):
            return int(value)
    return None


def degenerate_findings(
    series: Mapping[str, Sequence[Point]], th: Thresholds
) -> tuple[list[Finding], list[str]]:
    findings: list[Finding] = []
    notes: list[str] = []
    n = th.flat_reward_rollouts
    reward = list(series.get(REWARD, []))
    recent = reward[-n:]
    bad = [p for p in recent if not math.isfinite(p.value)]
    if bad:
        findings.append(
            Finding(
                DEGENERATE,
                f"{REWARD} is not finite ({_fmt(bad[-1].value)}) at "
                f"{len(bad)} of the last {len(recent)} rollouts (latest at step {bad[-1].step})",
            )
        )
    if len(recent) >= n and all(math.isfinite(p.value) and abs(p.value) <= ZERO for p in recent):
        findings.append(
            Finding(
                DEGENERATE,
                f"{REWARD} is 0.0 for the last {n} rollouts ({_steps(recent)}); "
                f"checks.health.flatRewardRollouts is {n}",
            )
        )
    elif recent and len(recent) < n and all(math.isfinite(p.value) and abs(p.value) <= ZERO for p in recent):
        notes.append(
            f"{REWARD} is 0.0 in all {len(recent)} rollouts so far; degenerate if it stays 0.0 for "
            f"{n} (checks.health.flatRewardRollouts)"
        )

    repetition = [p for p in series.get(REPETITION, []) if math.isfinite(p.value)]
    window = repetition[-n:]
    if len(window) >= min(n, MIN_REPETITION_POINTS):
        mean = sum(p.value for p in window) / len(window)
        if mean > th.max_repetition_frac:
            findings.append(
                Finding(
                    DEGENERATE,
                    f"{REPETITION} averages {_fmt(mean)} over the last {len(window)} "
                    f"rollouts ({_steps(window)}, latest {_fmt(window[-1].value)}); expected at "
                    f"most checks.health.maxRepetitionFrac {_fmt(th.max_repetition_frac)}",
                )
            )

    grad = list(series.get(GRAD_NORM, []))
    grad_recent = grad[-n:]
    bad_grad = [p for p in grad_recent if not math.isfinite(p.value)]
    if bad_grad:
        findings.append(
            Finding(
                DEGENERATE,
                f"{GRAD_NORM} is {_fmt(bad_grad[-1].value)} at "
                f"{len(bad_grad)} of the last {len(grad_recent)} train steps (latest at step "
                f"{bad_grad[-1].step}); training is diverging or skipping updates",
            )
        )
    older_bad = [p for p in grad[:-n] if not math.isfinite(p.value)] if len(grad) > n else []
    if older_bad:
        notes.append(
            f"{GRAD_NORM} was not finite at {len(older_bad)} earlier step(s) (first at step "
            f"{older_bad[0].step}) and finite since"
        )
    return findings, notes


def finished(series: Mapping[str, Sequence[Point]], tracker_iteration: int | None, total: int | None) -> bool:
    """True when the run has reached its last rollout (rollout ids run 0 .. num_rollout-1)."""
    if not total:
        return False
    reward = series.get(REWARD, [])
    last_step = reward[-1].step if reward else None
    return any(v is not None and v >= total - 1 for v in (last_step, tracker_iteration))


def assess(
    series: Mapping[str, Sequence[Point]],
    activity: Sequence[Activity],
    now: float,
    th: Thresholds,
    *,
    started: bool,
    tracker_iteration: int | None = None,
    total_rollouts: int | None = None,
    extra: Sequence[Finding] = (),
) -> Assessment:
    """Decide the verdict.

    ``started`` is whether the run has written anything (a scalar or a checkpoint); ``activity`` lists
    the newest metric, the newest save and the submission time (whatever is known).
    """
    out = Assessment(verdict=HEALTHY)
    latest = max(activity, key=lambda a: a.time) if activity else None
    out.last_activity = latest
    out.idle_seconds = None if latest is None else max(0.0, now - latest.time)
    window = th.stall_minutes * 60.0
    if started:
        found, notes = degenerate_findings(series, th)
        out.findings.extend(found)
        out.notes.extend(notes)
        out.finished = finished(series, tracker_iteration, total_rollouts)
        if out.finished:
            out.notes.append(
                f"the run reached its last rollout ({total_rollouts} rollouts, --num-rollout); no stall check"
            )
    if not out.finished and latest is not None and out.idle_seconds is not None and out.idle_seconds > window:
        idle_min = out.idle_seconds / 60.0
        if started:
            reason = (
                f"no new metric or checkpoint for {idle_min:.0f} min (last: {latest.what}); expected "
                f"one within checks.health.stallMinutes {th.stall_minutes:g}"
            )
        else:
            reason = (
                f"nothing written for {idle_min:.0f} min since {latest.what}: no metric and no "
                f"checkpoint; expected the first within checks.health.stallMinutes {th.stall_minutes:g}"
            )
        out.findings.append(Finding(STALLED, reason))
    if not started and not any(f.kind == STALLED for f in out.findings):
        what = f" ({latest.what})" if latest else ""
        out.findings.append(Finding(NOT_STARTED, f"no metric and no checkpoint written yet{what}"))
    out.findings.extend(extra)
    kinds = {f.kind for f in out.findings}
    for verdict in (DEGENERATE, STALLED, NOT_STARTED, UNKNOWN):
        if verdict in kinds:
            out.verdict = verdict
            break
    return out
