"""GPU node checks: ``miles-hooks gpu-check`` and the per-worker check of the ``verify`` hook.

What is checked, per node:

* NVML (nvidia-ml-py): visible GPU count equals the expected count; no uncorrectable ECC errors
  (volatile, aggregate); no retired pages pending, no row remapping pending or failed; no clock-event
  (throttle) reason beyond the allowed ones (default: ``GpuIdle``); temperature and power readable;
  driver and CUDA driver versions reported.
* Per GPU (torch): bf16 ``n x n x n`` matmul TFLOP/s (default n = 8192, random data) and device copy
  GB/s (bytes read + written), each against ``reference x tolerance``, so one slow GPU is named.
* Per node (NCCL through torch.distributed): float32 all-reduce bus bandwidth over all local GPUs
  (busbw = algbw x 2(n-1)/n) and batched send/recv (``batch_isend_irecv``, both directions at once;
  busbw = bytes one way / time) between every pair of local GPUs, disjoint pairs run concurrently;
  a sweep of message sizes (default 1M:2G:4).  Each sweep ends with a correctness probe.
* Across nodes (more than one node): all-reduce over every GPU, and send/recv between every pair of
  nodes (GPU i of one node with GPU i of the other, all rails at once), reported per node pair.

Thresholds: the references default to figures measured on an nvidia-h200-x2 machine (two H200 over
NV18): matmul 779 TFLOP/s, copy 4285 GB/s, all-reduce busbw 333 GB/s, send/recv busbw 363 GB/s,
each times the tolerance (default 0.85).  A run spec's ``checks.gpu`` (tolerance, matmulTflops,
copyGBps, allReduceBusbwGBps, sendRecvBusbwGBps, enabled) overrides them, flags override the spec.
Bandwidth thresholds apply to the best busbw at sizes >= ``--check-size`` (default 1G).

Output: ``<out-dir>/gpu-check.json`` (per GPU, per node, per pair, thresholds, failures with the
node/GPU/pair named), ``<out-dir>/gpu-check.png`` (busbw vs message size), and a table (or one JSON
line with ``--log-format json``) on stdout.  Exit codes: 0 pass, 1 a check failed, 2 bad input,
3 timeout.

Entry points
------------
``main(argv: Sequence[str]) -> int``
    The body of ``miles-hooks gpu-check`` (also ``python -m miles_hooks.gpu_check``).  Without a
    launcher it spawns one process per visible GPU (loopback rendezvous); under ``torchrun`` (RANK,
    WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK set) each rank runs its part and rank 0 writes
    the report, across as many nodes as torchrun spans.

``check_node(argv: Sequence[str] = (), *, spec: Mapping[str, Any] | None = None, num_nodes: int = 1,
node_rank: int = 0, master_addr: str | None = None, master_port: int | None = None,
write: bool = True) -> dict[str, Any]``
    For the ``verify`` hook, called inside a Ray task on each GPU worker (the task must hold the
    node's GPUs, e.g. ``num_gpus=<gpusPerWorker>``).  ``argv`` takes the same flags as ``main``;
    ``spec`` is the parsed run spec (``checks.gpu`` and ``topology.gpusPerWorker`` are applied where
    ``argv`` does not set them).  For one node leave the rest at their defaults.  For the cross-node
    checks, start one task per node at once with ``num_nodes`` = the number of nodes, ``node_rank`` =
    0..num_nodes-1, and the same ``master_addr`` (an address of node 0's worker reachable from the
    others) and free ``master_port``; each task then returns the same all-nodes report.  Returns the
    JSON-serialisable report: ``ok`` (bool), ``verdict`` (one line naming failing nodes/GPUs/pairs),
    ``failures`` (list of {check, node, gpu, pair, expected, found, message}), ``gpus``, ``nodes``,
    ``allreduce``, ``sendrecv``, ``thresholds``, ``exit_code``.  Raises ``ConfigError`` on bad flags.

Only the standard library is imported here; torch, pynvml and matplotlib are imported when a
check runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .config import ConfigError, Options, Thresholds

__all__ = ["ConfigError", "Options", "Thresholds", "check_node", "main"]


def main(argv: Sequence[str]) -> int:
    """``miles-hooks gpu-check``: 0 pass, 1 a check failed, 2 bad input, 3 timeout."""
    from .runner import main as _main  # noqa: PLC0415

    return _main(argv)


def check_node(
    argv: Sequence[str] = (),
    *,
    spec: Mapping[str, Any] | None = None,
    num_nodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
    write: bool = True,
) -> dict[str, Any]:
    """Run the checks on this node's GPUs and return the report dict (see the module docstring)."""
    from .runner import check_node as _check_node  # noqa: PLC0415

    return _check_node(
        argv,
        spec=spec,
        num_nodes=num_nodes,
        node_rank=node_rank,
        master_addr=master_addr,
        master_port=master_port,
        write=write,
    )
