"""One rank of a spawned gpu-check: ``python -m miles_hooks.core.gpu.child WORKDIR``.

The parent (``runner.run_local``) sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
MASTER_ADDR, MASTER_PORT and writes ``WORKDIR/options.json``; local rank 0 writes ``WORKDIR/raw.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from miles_hooks.core.gpu.options import Options
from miles_hooks.core.gpu.ranks import rank_main


def run(workdir: str) -> int:
    opts = Options.from_dict(json.loads((Path(workdir) / "options.json").read_text()))
    raw = rank_main(opts, workdir)
    if raw is not None and os.environ.get("LOCAL_RANK", "0") == "0":
        tmp = Path(workdir) / "raw.json.tmp"
        tmp.write_text(json.dumps(raw))
        tmp.replace(Path(workdir) / "raw.json")
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1]))
