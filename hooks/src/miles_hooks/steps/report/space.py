"""Free space on the shared volume against the size of the next checkpoint.

The arithmetic is pure (``expected_checkpoint_bytes``, ``next_checkpoint_bytes``, ``assess``) so it can
be tested with parameter counts far larger than any test machine's disk; ``probe`` is the one call that
asks the file system (``os.statvfs``).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# A Megatron checkpoint with optimizer state: bf16 weights (2) + fp32 master weights (4) + Adam's two
# fp32 moments (8) = 14 bytes per parameter (~56 GB for a 4B model).
BYTES_PER_PARAMETER = 14

# Fewer than this many further saves fitting on the volume is reported as "tight".
TIGHT_SAVES = 2


def expected_checkpoint_bytes(parameter_count: int, bytes_per_parameter: float = BYTES_PER_PARAMETER) -> int:
    """Estimated size of one full checkpoint; 0 when the parameter count is unknown (0)."""
    if parameter_count < 0:
        raise ValueError(f"parameter count must be >= 0, found {parameter_count}")
    return int(parameter_count * bytes_per_parameter)


def next_checkpoint_bytes(
    parameter_count: int, last_checkpoint_bytes: int | None, last_checkpoint_name: str | None = None
) -> tuple[int, str]:
    """(bytes, basis) for the next save.

    A checkpoint already on the volume is the best estimate of the next one (it reflects the real
    parallelism, dtype and whether optimizer state is saved); before the first save the estimate is
    ``BYTES_PER_PARAMETER`` x ``model.parameterCount``. (0, reason) when neither is known.
    """
    if last_checkpoint_bytes:
        name = last_checkpoint_name or "the last checkpoint"
        return last_checkpoint_bytes, f"size of {name}"
    estimate = expected_checkpoint_bytes(parameter_count)
    if estimate:
        return (
            estimate,
            f"{BYTES_PER_PARAMETER} bytes x {parameter_count:,} parameters (model.parameterCount)",
        )
    return 0, "unknown: no checkpoint yet and model.parameterCount is 0"


@dataclass(frozen=True)
class SpaceCheck:
    status: str  # ok | tight | insufficient | unknown
    free_bytes: int
    expected_bytes: int
    saves_that_fit: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def assess(free_bytes: int, expected_bytes: int) -> SpaceCheck:
    """Compare free space with the next save: insufficient (< 1 save fits), tight (< TIGHT_SAVES), ok."""
    if expected_bytes <= 0:
        return SpaceCheck("unknown", free_bytes, expected_bytes, None)
    fit = max(free_bytes, 0) // expected_bytes
    if fit < 1:
        status = "insufficient"
    elif fit < TIGHT_SAVES:
        status = "tight"
    else:
        status = "ok"
    return SpaceCheck(status, free_bytes, expected_bytes, int(fit))


def probe(path: str | Path) -> tuple[str, int, int]:
    """(probed path, bytes available to an unprivileged writer, total bytes) for the file system holding
    ``path``, or its nearest existing parent when the directory does not exist yet."""
    p = Path(path)
    while not p.exists() and p.parent != p:
        p = p.parent
    st = os.statvfs(p)
    return str(p), st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
