"""Helpers for the hook tests (imported by name; a uniquely named module, unlike conftest)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "run-spec.json"


def base_spec() -> dict[str, Any]:
    raw: dict[str, Any] = json.loads(FIXTURE.read_text())
    return copy.deepcopy(raw)


def ray_token_ref(**changes: Any) -> dict[str, Any]:
    """A run-spec ``secrets[]`` entry for the Ray token Secret (secrets.rayAuth), with ``changes``."""
    ref = {
        "purpose": "rayAuth",
        "name": "rt-ray-auth",
        "key": "token",
        "env": "RAY_AUTH_TOKEN",
        "required": True,
    }
    return {**ref, **changes}


def spec_in(tmp: Path) -> dict[str, Any]:
    raw = base_spec()
    raw["model"]["hfPath"] = str(tmp / "fsx/models/Qwen3-4B")
    raw["model"]["torchDistPath"] = str(tmp / "fsx/models/Qwen3-4B_torch_dist")
    for ds in raw["data"]["datasets"]:
        ds["path"] = str(tmp / "fsx/data" / ds["repoId"].split("/")[1])
    raw["output"].update(
        dir=str(tmp / "run"),
        checkpointDir=str(tmp / "run/ckpt"),
        tensorboardDir=str(tmp / "run/tb"),
        provenanceFile=str(tmp / "run/provenance.json"),
    )
    return raw


def write(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(json.dumps(raw, indent=1))
    return path


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "miles_hooks", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


def read_until(proc: subprocess.Popen[str], needle: str) -> None:
    """Reads a running hook's log (stderr, a child's output included) until a line holds ``needle``."""
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if needle in line:
            return
    raise AssertionError(f"the hook ended without logging {needle!r}:\n{''.join(seen)}")
