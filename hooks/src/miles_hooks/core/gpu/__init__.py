"""GPU node checks: the engine behind ``miles-hooks gpu-check`` and the per-worker check of ``verify``.

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
  a sweep of message sizes (default 1M:2G:4).  Each sweep ends with a correctness probe.  A node
  with one GPU has no peer: it has no intra-node all-reduce or send/recv, and says so.
* Across nodes (more than one node): all-reduce over every GPU, and send/recv between every pair of
  nodes (GPU i of one node with GPU i of the other, all rails at once), reported per node pair.

Thresholds: each pass mark is ``reference x tolerance``, both from the run spec's ``checks.gpu``
(tolerance, matmulTflops, copyGBps, allReduceBusbwGBps, sendRecvBusbwGBps; the chart holds the values)
unless a flag overrides one; there are no built-in figures.  Bandwidth thresholds apply to the best
busbw at sizes >= ``--check-size`` (default 1G).

Modules: ``options`` (options, thresholds, message sizes, the run spec's settings), ``nvml`` (health),
``ranks`` (what each rank measures, torch), ``child`` (one spawned rank), ``runner`` (launching the
ranks, the report), ``verdict`` (pure: thresholds, failures, table) and ``plot`` (the PNG).

``check_node(*, spec=None, overrides=None, num_nodes=1, node_rank=0, master_addr=None,
master_port=None, write=True) -> dict`` is what ``verify`` runs inside a Ray task on each GPU worker
(the task must hold the node's GPUs).  ``overrides`` takes the ``gpu-check`` flag values by name
(e.g. ``{"out_dir": "/tmp/x", "no_plot": True}``); ``spec`` is the parsed run spec.  For the
cross-node checks start one task per node at once with ``num_nodes``, ``node_rank`` = 0..num_nodes-1
and the same ``master_addr`` / free ``master_port``; each task returns the same all-nodes report:
``ok``, ``verdict``, ``failures`` (check, node, gpu, pair, expected, found, message), ``gpus``,
``nodes``, ``allreduce``, ``sendrecv``, ``thresholds``, ``exit_code``.  Bad settings raise
:class:`~miles_hooks.core.errors.BadInput`.

Only the standard library is imported here; torch, pynvml and matplotlib are imported when a check
runs.
"""

from __future__ import annotations

from miles_hooks.core.gpu.options import Options, Thresholds
from miles_hooks.core.gpu.runner import check_node

__all__ = ["Options", "Thresholds", "check_node"]
