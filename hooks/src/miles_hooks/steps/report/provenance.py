"""The provenance record ``submit`` writes (``output.provenanceFile``, kind ``miles-hooks/provenance``):
what produced the run's checkpoints. Only non-secret fields are read back (the record holds Secret
names and keys, never values)."""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path
from typing import Any

from miles_hooks.core.runspec import RunSpec

KIND = "miles-hooks/provenance"


def parse_time(value: Any) -> float | None:
    """Seconds since the epoch for ``YYYY-MM-DDTHH:MM:SSZ`` (the format submit writes), else None."""
    if not isinstance(value, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(value, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def read(path: str | Path, spec: RunSpec) -> dict[str, Any]:
    """A summary of the record at ``path``: ``present`` False when absent; problems in ``warnings``."""
    p = Path(path)
    out: dict[str, Any] = {"path": str(p), "present": False, "warnings": []}
    try:
        text = p.read_text("utf-8")
    except FileNotFoundError:
        out["warnings"].append(
            f"no provenance record at {p} (the run spec's output.provenanceFile): the submit hook has not "
            "run for this output directory"
        )
        return out
    except OSError as exc:
        out["warnings"].append(f"provenance record {p} cannot be read: {exc.strerror}")
        return out
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        out["warnings"].append(
            f"provenance record {p}: expected JSON, found a parse error at line {exc.lineno} "
            f"column {exc.colno} ({exc.msg})"
        )
        return out
    if not isinstance(record, dict) or record.get("kind") != KIND:
        found = record.get("kind") if isinstance(record, dict) else type(record).__name__
        out["warnings"].append(f"provenance record {p}: expected kind {KIND!r}, found {found!r}")
        return out
    out["present"] = True
    images = record.get("images") or {}
    model = record.get("model") or {}
    ray = record.get("ray") or {}
    out.update(
        {
            "submissionId": record.get("submissionId"),
            "submittedAt": record.get("submittedAt"),
            "submittedAtEpoch": parse_time(record.get("submittedAt")),
            "runId": record.get("runId"),
            "release": record.get("release"),
            "milesImage": images.get("miles"),
            "milesDigest": images.get("milesDigest"),
            "milesRollingTag": images.get("milesRollingTag"),
            "hooksImage": images.get("hooks"),
            "model": {
                "repoId": model.get("repoId"),
                "revision": model.get("revision"),
                "resolvedRevision": model.get("resolvedRevision"),
                "profile": model.get("profile"),
            },
            "datasets": [
                {"repoId": d.get("repoId"), "revision": d.get("revision")}
                for d in record.get("datasets") or []
                if isinstance(d, dict)
            ],
            "rayVersion": ray.get("clusterVersion") or ray.get("declaredVersion"),
            "previousSubmissions": len(record.get("previousSubmissions") or []),
        }
    )
    current = spec.submission_id()
    out["matchesSpec"] = out["submissionId"] == current
    if not out["matchesSpec"]:
        out["warnings"].append(
            f"provenance record {p} describes submission {out['submissionId']}, expected "
            f"{current} (this run spec): the spec changed since the last submit, or submit "
            "has not run since the upgrade"
        )
    if out["milesRollingTag"] and not out["milesDigest"]:
        out["warnings"].append(
            f"the job ran image {out['milesImage']} by a rolling tag without a digest: the exact "
            "code that produced these checkpoints cannot be recovered (set image.digest)"
        )
    return out
