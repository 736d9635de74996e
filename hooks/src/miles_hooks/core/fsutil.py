"""Small file-system helpers shared by the steps (standard library only)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from miles_hooks.core.errors import BadInput


def atomic_write_text(path: str | Path, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` so a reader sees either the old file or the complete new one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=str(target.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(target.parent)


def atomic_write_json(path: str | Path, value: Any) -> None:
    atomic_write_text(path, json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def fsync_dir(path: str | Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_json(path: str | Path) -> Any | None:
    """The parsed JSON at ``path``, or None when it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError):
        return None


def sha256_file(path: str | Path, chunk: int = 8 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            block = fh.read(chunk)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


def size_mismatch(
    directory: Path, recorded: Iterable[Mapping[str, Any]]
) -> tuple[Path, int | None, Any] | None:
    """The first file a completion marker lists (``{"name", "size"}`` entries under ``directory``) that
    is missing or has another size: ``(path, its size or None when missing, the recorded size)``;
    None when every file matches. Stats only, no hashing."""
    for entry in recorded:
        path = directory / str(entry.get("name"))
        try:
            size = path.stat().st_size
        except OSError:
            return path, None, entry.get("size")
        if size != entry.get("size"):
            return path, size, entry.get("size")
    return None


def existing_dir(path: Path, field: str, expected: str) -> bool:
    """True when ``path`` is a directory, False when it does not exist yet; BadInput when it is a file
    (``field`` names the spec value, ``expected`` what it should hold)."""
    if not path.exists():
        return False
    if not path.is_dir():
        raise BadInput(f"{field} {path}: expected {expected}, found a file")
    return True


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover
