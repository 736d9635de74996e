"""make package: helm package + push/pull round trip through a real OCI registry on loopback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_oci_round_trip(tmp_path: Path) -> None:
    env = {**os.environ, "OUT_DIR": str(tmp_path)}
    done = subprocess.run(
        [str(ROOT / "ci" / "package.sh")], capture_output=True, text=True, check=False, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pushed and pulled back identical" in done.stdout
    pulled = list((tmp_path / "pulled").glob("miles-*.tgz"))
    assert len(pulled) == 1
