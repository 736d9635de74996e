"""Proof that the shared volume takes this process's writes, before anything long starts.

Shared file systems such as FSx for Lustre apply no ``fsGroup``: a directory an admin created as root stays
closed to the hooks' UID. Found at the first write, that costs a download or a conversion first; here a file
is written, synced and removed in each directory a step will write (or, for one still to be made, in the
directory that will hold it).
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from miles_hooks.core.errors import CheckFailed
from miles_hooks.core.runspec_types import RawSpec

PROBE_PREFIX = ".miles-hooks-write-probe-"


@dataclass(frozen=True)
class Refusal:
    directory: Path
    blocked_at: (
        Path  # the directory that refused: ``directory`` itself or the ancestor it could not be made in
    )
    reason: str
    owner_uid: int | None
    mode: str | None


def directories_written(raw: RawSpec) -> list[tuple[str, Path]]:
    """What the hooks write on the shared volume, each with the run spec field that names it."""
    out: list[tuple[str, Path]] = []
    if raw["prepare"]["download"]:
        out.append(("model.hfPath", Path(raw["model"]["hfPath"])))
        out.extend(
            (f"data.datasets[{i}].path", Path(ds["path"])) for i, ds in enumerate(raw["data"]["datasets"])
        )
    if raw["convert"]["enabled"]:
        out.append(("model.torchDistPath (its parent)", Path(raw["model"]["torchDistPath"]).parent))
    out.append(("output.dir", Path(raw["output"]["dir"])))
    return out


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def _refusal(directory: Path, exc: OSError) -> Refusal:
    blocked = _nearest_existing(directory)
    try:
        st = blocked.stat()
        owner, mode = st.st_uid, stat.filemode(st.st_mode)
    except OSError:
        owner, mode = None, None
    return Refusal(directory, blocked, exc.strerror or str(exc), owner, mode)


def probe(directory: Path) -> Refusal | None:
    """None when ``directory`` takes a file write, or, while it does not exist, the nearest directory above it
    that would hold it does (its creator owns it then); else why not. Nothing is left behind."""
    target_dir = _nearest_existing(directory)
    try:
        if not target_dir.is_dir():
            raise NotADirectoryError(20, "Not a directory", str(target_dir))
        target = target_dir / f"{PROBE_PREFIX}{uuid.uuid4().hex[:12]}"
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"ok\n")
            os.fsync(fd)
        finally:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
    except OSError as exc:
        return _refusal(directory, exc)
    return None


def require(named_dirs: Iterable[tuple[str, Path]], uid: int | None = None) -> list[str]:
    """Probes every directory; raises one CheckFailed naming each refusal, the UID and the fix. Returns the
    directories proven writable."""
    who = os.getuid() if uid is None else uid
    proven: list[str] = []
    problems: list[str] = []
    blocked: list[Path] = []
    for field, directory in named_dirs:
        refusal = probe(directory)
        if refusal is None:
            proven.append(str(directory))
            continue
        found = (
            f"owner UID {refusal.owner_uid}, mode {refusal.mode}"
            if refusal.owner_uid is not None
            else "its owner unreadable"
        )
        where = (
            str(refusal.blocked_at)
            if refusal.blocked_at == directory
            else f"{refusal.blocked_at} (to create {directory})"
        )
        problems.append(f"{field} {directory}: {refusal.reason} at {where}; found {found}")
        if refusal.blocked_at not in blocked:
            blocked.append(refusal.blocked_at)
    if problems:
        paths = " ".join(str(p) for p in blocked)
        raise CheckFailed(
            f"the shared volume refuses writes by UID {who} (the hooks' user, "
            "hooks.podSecurityContext.runAsUser); expected every directory the run writes to be writable "
            "by it. Shared file systems such as FSx for Lustre apply no fsGroup. From a pod or host that "
            f"mounts the volume as root, run either `chown -R {who} {paths}` or "
            f"`setfacl -R -m u:{who}:rwX -m d:u:{who}:rwX {paths}` (docs/chart.md, Shared storage "
            "permissions), then `helm upgrade --install` again. Nothing was downloaded or submitted",
            problems,
        )
    return proven
