"""The Ray job driver of the ``verify`` step (runs on the cluster, shipped with ``py_modules``).

Reads its parameters from ``$MILES_VERIFY_PARAMS`` (JSON), runs one task pinned to each worker node
(holding the worker's GPUs when they are free), optionally runs ``miles_hooks.core.gpu.check_node`` in
it, and prints one line ``MILES_VERIFY_RESULT <json>`` for the hook to parse. Standard library + ray.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

from miles_hooks.core.gpu import check_node
from miles_hooks.steps.verify import RESULT_PREFIX


def probe(
    params: dict[str, Any], node_rank: int, master_addr: str | None, master_port: int | None
) -> dict[str, Any]:
    import ray  # noqa: PLC0415 - ray: on the cluster only, never at import

    out: dict[str, Any] = {
        "node_id": ray.get_runtime_context().get_node_id(),
        "hostname": socket.gethostname(),
        "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "ray_version": ray.__version__,
    }
    if params.get("gpuCheck"):
        try:
            out["gpu_check"] = check_node(
                spec=params["spec"],
                num_nodes=int(params["numNodes"]),
                node_rank=node_rank,
                master_addr=master_addr,
                master_port=master_port,
                write=False,
            )
        except Exception as exc:
            out["gpu_check"] = {"ok": False, "verdict": f"gpu_check raised {type(exc).__name__}: {exc}"}
    return out


def main() -> int:
    import ray  # noqa: PLC0415 - ray: on the cluster only, never at import
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415 - as ray above

    params = json.loads(os.environ["MILES_VERIFY_PARAMS"])
    ray.init()
    workers: list[dict[str, Any]] = params["workers"]
    remote_probe = ray.remote(num_cpus=0)(probe)
    master = workers[0]["ip"] if workers else None
    port = int(params.get("masterPort") or 0) or None
    refs = {}
    for rank, w in enumerate(workers):
        opts: dict[str, Any] = {
            "num_gpus": params["gpusPerWorker"] if params["useGpus"] else 0,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(w["node_id"], soft=False),
        }
        refs[w["node_id"]] = remote_probe.options(**opts).remote(params, rank, master, port)
    results: dict[str, Any] = {}
    _, pending = ray.wait(list(refs.values()), num_returns=len(refs), timeout=float(params["timeout"]))
    for node_id, ref in refs.items():
        if ref in pending:
            results[node_id] = {
                "error": f"no answer within {params['timeout']}s (GPUs busy or node unhealthy)"
            }
            ray.cancel(ref, force=True)
            continue
        try:
            results[node_id] = ray.get(ref)
        except Exception as exc:
            results[node_id] = {
                "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            }
    sys.stdout.write(RESULT_PREFIX + json.dumps(results, default=str) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
