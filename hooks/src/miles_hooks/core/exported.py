"""The run's published Hugging Face exports (``<export.dir>/iter_NNNNNNN`` with their completion markers), as
``export`` writes them and ``report`` / ``status`` show them. Reads markers only; never hashes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from miles_hooks.core import fsutil

MARKER = ".miles-hooks-exported.json"
MARKER_KIND = "miles-hooks/exported"


def marker(path: Path) -> dict[str, Any] | None:
    found = fsutil.read_json(path / MARKER)
    return found if isinstance(found, dict) and found.get("kind") == MARKER_KIND else None


def published(export_dir: str | Path) -> list[dict[str, Any]]:
    """Each published export, oldest iteration first: iteration, path, when, files and bytes."""
    out = []
    for path in sorted(Path(export_dir).glob("iter_*")):
        found = marker(path)
        if found is None:
            continue
        files = found.get("files") or []
        out.append(
            {
                "iteration": (found.get("source") or {}).get("iteration"),
                "path": str(path),
                "exportedAt": found.get("exportedAt"),
                "files": len(files),
                "bytes": sum(int(f.get("size") or 0) for f in files),
            }
        )
    return out
