"""Scalars from the run's TensorBoard event files (``events.out.tfevents.*`` anywhere under
``output.tensorboardDir``).

miles logs through torch's ``SummaryWriter`` (``simple_value`` scalars); the TensorBoard v2 writer
stores scalars as 0-d tensors. Both are read, with the ``tensorboard`` package's record reader and
protobufs (no TensorFlow), imported only when a report is made.

A restarted run writes a new event file and repeats the steps after its last checkpoint. Files are
taken in the order their first scalar was written; when a later file starts a tag at step ``s``, the
points of that tag at steps >= ``s`` from earlier files are dropped (what TensorBoard calls purging
orphaned data), so the series shows what the surviving run actually did.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miles_hooks.core import fsutil
from miles_hooks.core.errors import CheckFailed
from miles_hooks.steps.report.deadline import Deadline

REWARD = "rollout/raw_reward"
REPETITION = "rollout/repetition_frac"
TRUNCATED = "rollout/truncated_ratio"
GRAD_NORM = "train/grad_norm"
STEP_TIME = "perf/step_time"
TAGS: tuple[str, ...] = (REWARD, REPETITION, TRUNCATED, GRAD_NORM, STEP_TIME)
EVAL_PREFIX = "eval/"
MAX_EVAL_TAGS = 20
EVENT_FILE_MARK = ".tfevents."


@dataclass(frozen=True)
class Point:
    step: int
    wall_time: float
    value: float


@dataclass
class EventFile:
    path: str
    bytes: int
    scalars: int = 0
    first_wall_time: float | None = None
    error: str | None = None


@dataclass
class EventScan:
    directory: str
    exists: bool = False
    files: list[EventFile] = field(default_factory=list)
    series: dict[str, list[Point]] = field(default_factory=dict)
    last_scalar: tuple[float, str, int] | None = None  # (wall time, tag, step) of the newest scalar, any tag
    warnings: list[str] = field(default_factory=list)

    def points(self, tag: str) -> list[Point]:
        return self.series.get(tag, [])

    @property
    def scalars(self) -> int:
        return sum(f.scalars for f in self.files)

    def eval_tags(self) -> list[str]:
        return sorted(t for t in self.series if t.startswith(EVAL_PREFIX))


def wanted(tag: str) -> bool:
    return tag in TAGS or tag.startswith(EVAL_PREFIX)


def find_event_files(directory: Path, deadline: Deadline, warnings: list[str] | None = None) -> list[Path]:
    """Every ``*.tfevents.*`` file under ``directory``; directories that cannot be listed are named in
    ``warnings`` (the top one is an error: an unreadable directory must not look like an empty run)."""
    found: list[Path] = []

    def unreadable(exc: OSError) -> None:
        where = exc.filename or str(directory)
        if Path(where) == directory:
            raise CheckFailed(
                f"the run spec's output.tensorboardDir {directory} cannot be listed: {exc.strerror}; "
                f"expected it readable by the hooks user (uid {os.getuid()})"
            ) from exc
        if warnings is not None:
            warnings.append(f"{where} cannot be listed ({exc.strerror}); event files in it are not counted")

    for dirpath, dirnames, filenames in os.walk(directory, onerror=unreadable):
        deadline.check(f"listing event files under {directory}")
        dirnames.sort()
        found.extend(Path(dirpath) / n for n in sorted(filenames) if EVENT_FILE_MARK in n)
    return found


def _loader() -> tuple[Any, Any]:
    try:
        # tensorboard is heavy (and optional for the other steps): imported when event files are read
        from tensorboard.backend.event_processing import event_file_loader  # noqa: PLC0415
        from tensorboard.util import tensor_util  # noqa: PLC0415
    except ImportError as exc:
        raise CheckFailed(
            f"reading TensorBoard event files needs the tensorboard package ({exc}); expected "
            "the hooks image, which ships it (ci/requirements.txt pins it)"
        ) from exc
    return event_file_loader, tensor_util


def scalar_value(value: Any, tensor_util: Any) -> float | None:
    """The float in one ``Summary.Value``: ``simple_value`` or a one-element numeric tensor."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor":
        try:
            array = tensor_util.make_ndarray(value.tensor)
        except (ValueError, TypeError):
            return None
        if array.size == 1 and array.dtype.kind in "fiub":
            return float(array.reshape(-1)[0])
    return None


def read_file(
    path: Path, deadline: Deadline
) -> tuple[EventFile, dict[str, list[Point]], tuple[float, str, int] | None]:
    """One file's wanted scalars (in file order), its summary, and its newest scalar of any tag."""
    event_file_loader, tensor_util = _loader()
    info = EventFile(path=str(path), bytes=path.stat().st_size)
    series: dict[str, list[Point]] = {}
    newest: tuple[float, str, int] | None = None
    try:
        for n, event in enumerate(event_file_loader.LegacyEventFileLoader(str(path)).Load()):
            if n % 2000 == 0:
                deadline.check(f"reading {path}")
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                number = scalar_value(value, tensor_util)
                if number is None:
                    continue
                info.scalars += 1
                wall = float(event.wall_time)
                if info.first_wall_time is None:
                    info.first_wall_time = wall
                if newest is None or wall >= newest[0]:
                    newest = (wall, str(value.tag), int(event.step))
                if wanted(value.tag):
                    series.setdefault(str(value.tag), []).append(Point(int(event.step), wall, number))
    except Exception as exc:
        info.error = f"{type(exc).__name__}: {exc}"
    return info, series, newest


def merge(per_file: list[tuple[float, dict[str, list[Point]]]]) -> dict[str, list[Point]]:
    """Merge files (each with the wall time of its first scalar) into one series per tag, sorted by step.

    Later files win: a tag that a later file starts at step ``s`` loses the earlier files' points at
    ``s`` and beyond. Within one file a repeated step keeps its last value.
    """
    merged: dict[str, dict[int, Point]] = {}
    for _, series in sorted(per_file, key=lambda item: item[0]):
        for tag, points in series.items():
            if not points:
                continue
            start = min(p.step for p in points)
            current = {s: p for s, p in merged.get(tag, {}).items() if s < start}
            for p in points:
                current[p.step] = p
            merged[tag] = current
    return {tag: [pts[s] for s in sorted(pts)] for tag, pts in merged.items()}


def scan(directory: str | Path, deadline: Deadline | None = None) -> EventScan:
    deadline = deadline or Deadline(None)
    root = Path(directory)
    out = EventScan(directory=str(root))
    if not fsutil.existing_dir(
        root, "the run spec's output.tensorboardDir", "a directory of TensorBoard event files"
    ):
        return out
    out.exists = True
    per_file: list[tuple[float, dict[str, list[Point]]]] = []
    for path in find_event_files(root, deadline, out.warnings):
        deadline.check(f"reading {path}")
        try:
            info, series, newest = read_file(path, deadline)
        except FileNotFoundError:
            continue
        out.files.append(info)
        if info.error:
            out.warnings.append(
                f"event file {path} could not be read past {info.scalars} scalars "
                f"({info.error}); later data in it is not counted"
            )
        if series:
            per_file.append((info.first_wall_time or 0.0, series))
        if newest is not None and (out.last_scalar is None or newest[0] > out.last_scalar[0]):
            out.last_scalar = newest
    out.series = merge(per_file)
    evals = out.eval_tags()
    if len(evals) > MAX_EVAL_TAGS:
        for tag in evals[MAX_EVAL_TAGS:]:
            del out.series[tag]
        out.warnings.append(f"{len(evals)} eval/ tags found; the report keeps the first {MAX_EVAL_TAGS}")
    return out
