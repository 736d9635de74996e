"""gpu-check: the GPU node checks on this node (or on every rank of a torchrun job).

Without a launcher it spawns one process per visible GPU (loopback rendezvous); under ``torchrun``
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK set) each rank measures its part and global
rank 0 writes the report. The checks themselves are :mod:`miles_hooks.core.gpu` (``verify`` runs them
too). The report goes to ``<out-dir>/gpu-check.json`` and ``gpu-check.png``; the table (or one JSON
line with ``--log-format json``) to stdout. A failed check is exit 1, a hung one exit 3.
"""

from __future__ import annotations

import time
from typing import Any

from miles_hooks.core.errors import CheckFailed, HookTimeout
from miles_hooks.core.gpu import runner
from miles_hooks.core.gpu.options import Options


def run(opts: Options) -> dict[str, Any]:
    """Run the checks; returns the report on a pass, raises CheckFailed / HookTimeout otherwise."""
    started = time.perf_counter()
    if not opts.enabled:
        print("gpu-check: disabled by the run spec (checks.gpu.enabled: false); nothing checked", flush=True)
        return {"ok": True, "enabled": False}
    if runner.under_launcher():
        report = runner.run_under_launcher(opts, started)
        if report is None:
            raise CheckFailed("gpu-check: this rank failed before it had a result (its log is above)")
        timed_out = False
    else:
        raw, timed_out = runner.run_local(opts)
        report = runner.finish(raw, opts, time.perf_counter() - started)
    if timed_out:
        raise HookTimeout(str(report["verdict"]))
    if not report["ok"]:
        raise CheckFailed(str(report["verdict"]))
    return report
