"""The run's checkpoint tree: ``{checkpointDir}/iter_{rollout_id:07d}/`` and
``latest_checkpointed_iteration.txt`` (written last, after a save completes)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miles_hooks.core import fsutil, resume
from miles_hooks.core.errors import CheckFailed
from miles_hooks.steps.report.deadline import Deadline

ITER_DIR = re.compile(r"^iter_(\d{7,})$")
TRACKER = resume.TRACKER  # one name for the tracker miles writes last after a save


@dataclass(frozen=True)
class Checkpoint:
    iteration: int
    path: str
    bytes: int
    files: int
    mtime: float  # newest mtime of the directory or anything in it

    def as_dict(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "path": self.path,
            "bytes": self.bytes,
            "files": self.files,
            "mtime": self.mtime,
        }


@dataclass
class CheckpointScan:
    directory: str
    exists: bool = False
    tracker: str | None = None  # the tracker file's content, stripped
    tracker_iteration: int | None = None
    tracker_mtime: float | None = None
    checkpoints: list[Checkpoint] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def complete(self) -> list[Checkpoint]:
        """Checkpoints at or below the tracker's iteration (a higher one is a save in progress or one
        that failed part-way). Without a tracker nothing counts as complete."""
        if self.tracker_iteration is None:
            return []
        return [c for c in self.checkpoints if c.iteration <= self.tracker_iteration]

    @property
    def latest(self) -> Checkpoint | None:
        done = self.complete
        return done[-1] if done else None

    @property
    def partial(self) -> list[Checkpoint]:
        cut = -1 if self.tracker_iteration is None else self.tracker_iteration
        return [c for c in self.checkpoints if c.iteration > cut]

    @property
    def total_bytes(self) -> int:
        return sum(c.bytes for c in self.checkpoints)

    @property
    def last_save_time(self) -> float | None:
        """When the last save finished: the tracker's mtime (written last), else the newest iter dir."""
        times = [t for t in [self.tracker_mtime, *(c.mtime for c in self.checkpoints)] if t is not None]
        return max(times) if times else None

    def as_dict(self) -> dict[str, Any]:
        latest = self.latest
        return {
            "dir": self.directory,
            "exists": self.exists,
            "tracker": self.tracker,
            "trackerIteration": self.tracker_iteration,
            "trackerMtime": self.tracker_mtime,
            "count": len(self.complete),
            "latest": latest.as_dict() if latest else None,
            "partial": [c.as_dict() for c in self.partial],
            "totalBytes": self.total_bytes,
            "lastSaveTime": self.last_save_time,
            "iterations": [c.iteration for c in self.checkpoints],
        }


def _tree_size(root: Path, deadline: Deadline) -> tuple[int, int, float]:
    """(bytes, files, newest mtime) under ``root``; symlinks are counted, never followed."""
    total = files = 0
    newest = root.lstat().st_mtime
    for dirpath, dirnames, filenames in os.walk(root):
        deadline.check(f"measuring checkpoint {root}")
        for name in dirnames + filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except FileNotFoundError:  # removed while we walk (checkpoint rotation)
                continue
            newest = max(newest, st.st_mtime)
            if name in filenames:
                total += st.st_size
                files += 1
    return total, files, newest


def scan(directory: str | Path, deadline: Deadline | None = None) -> CheckpointScan:
    deadline = deadline or Deadline(None)
    root = Path(directory)
    out = CheckpointScan(directory=str(root))
    if not fsutil.existing_dir(
        root, "the run spec's output.checkpointDir", "a directory (the --save parent of iter_*)"
    ):
        return out
    out.exists = True
    tracker = root / TRACKER
    try:
        text = tracker.read_text("utf-8", errors="replace").strip()
        out.tracker = text
        out.tracker_mtime = tracker.stat().st_mtime
    except FileNotFoundError:
        pass
    except OSError as exc:
        out.warnings.append(f"{tracker} cannot be read: {exc.strerror}")
    if out.tracker is not None:
        if out.tracker.isdigit():
            out.tracker_iteration = int(out.tracker)
        elif out.tracker == "release":
            out.warnings.append(
                f"{tracker} says 'release': expected an iteration number; this looks like a "
                "converted torch_dist directory, not the run's --save directory "
                "(the run spec's output.checkpointDir)"
            )
        else:
            found = out.tracker if len(out.tracker) <= 40 else out.tracker[:37] + "..."
            out.warnings.append(f"{tracker}: expected an iteration number, found {found!r}")
    found_iters: list[Checkpoint] = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as exc:
        raise CheckFailed(
            f"the run spec's output.checkpointDir {root} cannot be listed: {exc.strerror}; expected it "
            f"readable by the hooks user (uid {os.getuid()})"
        ) from exc
    for entry in entries:
        match = ITER_DIR.match(entry.name)
        if not match or not entry.is_dir(follow_symlinks=False):
            continue
        deadline.check(f"listing checkpoints in {root}")
        try:
            size, files, mtime = _tree_size(Path(entry.path), deadline)
        except FileNotFoundError:
            continue
        found_iters.append(Checkpoint(int(match.group(1)), entry.path, size, files, mtime))
    out.checkpoints = sorted(found_iters, key=lambda c: c.iteration)
    have = {c.iteration for c in out.checkpoints}
    if out.tracker_iteration is not None and out.tracker_iteration not in have:
        out.warnings.append(
            f"{tracker} names iteration {out.tracker_iteration} but "
            f"iter_{out.tracker_iteration:07d}/ is missing; a resume would fail"
        )
    for part in out.partial:
        if out.tracker_iteration is None:
            out.warnings.append(
                f"{Path(part.path).name}/ exists but {TRACKER} does not: the first save is in "
                "progress or failed part-way"
            )
        else:
            out.warnings.append(
                f"{Path(part.path).name}/ is newer than {TRACKER} ({out.tracker_iteration}): a "
                "save in progress or one that failed part-way"
            )
    return out
