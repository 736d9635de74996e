"""The per-rank body: one process per GPU, NCCL through torch.distributed (env:// rendezvous).

torch is imported inside the functions, so importing this module costs nothing.  Timing: each
sweep point enqueues ``warmup`` operations, records a CUDA start event (which fires once the
warm-ups finished, i.e. when the peers are in step), enqueues ``iters`` timed operations and an
end event; the time of one operation is the event interval / iters, and a collective's time is
the slowest rank's.
"""

from __future__ import annotations

import functools
import os
import socket
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from miles_hooks.core.gpu.nvml import node_health
from miles_hooks.core.gpu.options import Options

if TYPE_CHECKING:  # pragma: no cover - types only
    import torch

CORRECTNESS_ELEMS = 4 << 20  # 16 MiB of float32 checked after each sweep


def round_robin(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs covering every pair of ``range(n)`` once (circle method).

    n GPUs give n-1 rounds (n even) or n rounds (n odd); in each round every index is in at most one pair.
    """
    if n < 2:
        return []
    items: list[int | None] = list(range(n)) + ([None] if n % 2 else [])
    m = len(items)
    rounds = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = items[i], items[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(sorted(pairs))
        items = [items[0], items[-1], *items[1:-1]]
    return rounds


def node_name() -> str:
    return os.environ.get("MILES_NODE_NAME") or os.environ.get("NODE_NAME") or socket.gethostname()


class _Phases:
    def __init__(self, rank: int, workdir: str | None) -> None:
        self.rank = rank
        self.workdir = Path(workdir) if workdir else None
        self.times: dict[str, float] = {}
        self.errors: list[dict[str, Any]] = []
        self.node = ""

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        if self.workdir is not None:
            (self.workdir / f"phase-{self.rank}").write_text(name)
        t0 = time.perf_counter()
        try:
            return fn()
        except Exception as exc:
            self.errors.append(
                {
                    "rank": self.rank,
                    "node": self.node,
                    "phase": name,
                    "error": f"{type(exc).__name__}: {exc}".strip()[:2000],
                    "trace": traceback.format_exc()[-4000:],
                }
            )
            return None
        finally:
            self.times[name] = time.perf_counter() - t0


def _timed(torch_mod: Any, op: Callable[[], Any], warmup: int, iters: int) -> float:
    """Seconds per ``op`` (see module docstring; collectives pass warmup >= 1 so the start event
    fires when the peers are in step)."""
    for _ in range(warmup):
        op()
    start = torch_mod.cuda.Event(enable_timing=True)
    end = torch_mod.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        op()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / 1e3 / iters


MATMUL_WINDOWS = 3


def measure_matmul(opts: Options, device: torch.device) -> list[float]:
    """bf16 ``n x n x n`` matmul TFLOP/s on random data: ``max(warmup, 10)`` warm-up products, then
    MATMUL_WINDOWS event-timed windows of ``matmul_iters`` products each (TFLOP/s per window).

    The check uses the best window: a burst figure, measured the way the reference was (an H200
    at its 700 W cap settles about 10% lower after a few hundred ms of back-to-back products;
    docs/gpu-checks.md has the figures)."""
    import torch  # noqa: PLC0415 - torch is heavy: imported inside a rank only

    n = opts.matmul_n
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=device, dtype=torch.bfloat16)

    def matmul() -> None:
        torch.matmul(a, b, out=c)

    for _ in range(max(opts.warmup, 10)):
        matmul()
    windows = [2.0 * n**3 / _timed(torch, matmul, 0, opts.matmul_iters) / 1e12 for _ in range(MATMUL_WINDOWS)]
    if not bool(torch.isfinite(c).all()):
        raise RuntimeError("matmul produced non-finite values")
    return windows


def measure_copy(opts: Options, device: torch.device) -> float:
    """Device-to-device copy GB/s, counting bytes read plus bytes written."""
    import torch  # noqa: PLC0415 - torch is heavy: imported inside a rank only

    elems = opts.copy_bytes // 4
    src = torch.empty(elems, device=device, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    t = _timed(torch, lambda: dst.copy_(src), 3, max(opts.iters, 10))
    if not bool(torch.equal(src[-1024:], dst[-1024:])):
        raise RuntimeError("device copy produced wrong data")
    return 2.0 * elems * 4 / t / 1e9


def measure_gpu(opts: Options, device: torch.device) -> dict[str, Any]:
    """bf16 matmul TFLOP/s and device copy GB/s of one GPU."""
    import torch  # noqa: PLC0415 - torch is heavy: imported inside a rank only

    windows = measure_matmul(opts, device)
    out = {
        "matmul_tflops": max(windows),
        "matmul_windows_tflops": windows,
        "copy_gbps": measure_copy(opts, device),
    }
    torch.cuda.empty_cache()
    return out


def allreduce_sweep(opts: Options, buf: torch.Tensor, group: Any, rank_value: float) -> dict[str, Any]:
    """Float32 sum all-reduce at every size; then a correctness probe (each rank contributes rank+1)."""
    import torch  # noqa: PLC0415 - torch is heavy: imported inside a rank only
    import torch.distributed as dist  # noqa: PLC0415 - as torch above

    points = []
    for size in opts.sizes:
        t = buf[: size // 4]
        t.uniform_()
        points.append(
            {
                "bytes": size,
                "time_s": _timed(
                    torch, functools.partial(dist.all_reduce, t, group=group), max(1, opts.warmup), opts.iters
                ),
            }
        )
    probe = buf[: min(CORRECTNESS_ELEMS, buf.numel())]
    probe.fill_(rank_value)
    dist.all_reduce(probe, group=group)
    return {
        "points": points,
        "probe_sum": float(probe[0].item()),
        "probe_uniform": bool((probe == probe[0]).all()),
    }


def _exchange(send: torch.Tensor, recv: torch.Tensor, peer: int) -> None:
    import torch.distributed as dist  # noqa: PLC0415 - as torch above

    ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()


def pair_sweep(opts: Options, send: torch.Tensor, recv: torch.Tensor, rank: int, peer: int) -> dict[str, Any]:
    """Both GPUs of a pair send and receive at once (batched P2P); busbw = bytes one way / time."""
    import torch  # noqa: PLC0415 - torch is heavy: imported inside a rank only

    points = []
    for size in opts.sizes:
        s, r = send[: size // 4], recv[: size // 4]
        s.uniform_()
        points.append(
            {
                "bytes": size,
                "time_s": _timed(
                    torch, functools.partial(_exchange, s, r, peer), max(1, opts.warmup), opts.iters
                ),
            }
        )
    k = min(CORRECTNESS_ELEMS, send.numel())
    send[:k].fill_(float(rank + 1))
    recv[:k].fill_(-1.0)
    _exchange(send[:k], recv[:k], peer)
    correct = bool((recv[:k] == float(peer + 1)).all())
    return {"peer": peer, "points": points, "correct": correct}


def rank_main(opts: Options, workdir: str | None = None) -> dict[str, Any] | None:
    """Run every check on this rank; every rank returns the gathered raw measurements (or None
    when the CPU-side gather itself failed).  Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
    GROUP_RANK (optional), MASTER_ADDR, MASTER_PORT."""
    import torch  # noqa: PLC0415 - torch is heavy: imported inside a rank only
    import torch.distributed as dist  # noqa: PLC0415 - as torch above

    t_start = time.perf_counter()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    phases = _Phases(rank, workdir)
    phases.node = node_name()
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    timeout = timedelta(seconds=max(30.0, min(opts.timeout_s, 600.0)))
    dist.init_process_group("nccl", timeout=timeout, device_id=device)
    cpu = dist.new_group(backend="gloo", timeout=timeout)

    props = torch.cuda.get_device_properties(device)
    uuid = str(getattr(props, "uuid", "") or "")
    pci = None
    if hasattr(props, "pci_bus_id"):
        domain, device_id = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
        pci = f"{domain:08X}:{props.pci_bus_id:02X}:{device_id:02X}.0"
    ident = {
        "rank": rank,
        "local_rank": local_rank,
        "node": phases.node,
        "node_key": f"{os.environ.get('GROUP_RANK', '')}/{phases.node}",
        "cuda_index": local_rank,
        "name": props.name,
        "uuid": uuid if not uuid or uuid.startswith("GPU-") else f"GPU-{uuid}",
        "pci_bus_id": pci,
    }
    idents: list[Any] = [None] * world
    dist.all_gather_object(idents, ident, group=cpu)
    keys: list[str] = []
    for i in idents:
        if i["node_key"] not in keys:
            keys.append(i["node_key"])
    node_ranks = [[i["rank"] for i in idents if i["node_key"] == k] for k in keys]
    my_node = keys.index(ident["node_key"])
    my_ranks = node_ranks[my_node]
    local_index = my_ranks.index(rank)

    result: dict[str, Any] = {"ident": ident, "node_index": my_node}
    if local_index == 0:
        result["health"] = phases.run("nvml", node_health)
        result["local_gpus"] = torch.cuda.device_count()
        result["visible_uuids"] = [idents[r]["uuid"] for r in my_ranks]
        result["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
        nccl = torch.cuda.nccl.version()
        result["environment"] = {
            "torch": torch.__version__,
            "cuda_runtime": torch.version.cuda,
            "nccl": ".".join(str(v) for v in nccl) if isinstance(nccl, tuple) else str(nccl),
        }
    dist.barrier(group=cpu)

    result["gpu"] = phases.run("gpu_compute", lambda: measure_gpu(opts, device))
    dist.barrier(group=cpu)

    result.update(
        _collectives(opts, phases=phases, cpu=cpu, device=device, node_ranks=node_ranks, my_node=my_node)
    )
    torch.cuda.empty_cache()
    result["errors"] = phases.errors
    result["phases_s"] = phases.times
    result["elapsed_s"] = time.perf_counter() - t_start

    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, result, group=cpu)
    raw = assemble(gathered, [idents[r[0]]["node"] for r in node_ranks], node_ranks)
    dist.barrier(group=cpu)
    dist.destroy_process_group()
    return raw


def _collectives(
    opts: Options,
    *,
    phases: _Phases,
    cpu: Any,
    device: torch.device,
    node_ranks: list[list[int]],
    my_node: int,
) -> dict[str, Any]:
    """All-reduce and send/recv sweeps, within each node and (several nodes) across nodes."""
    import torch  # noqa: PLC0415 - torch is heavy: imported inside a rank only
    import torch.distributed as dist  # noqa: PLC0415 - as torch above

    rank = dist.get_rank()
    my_ranks = node_ranks[my_node]
    local_index = my_ranks.index(rank)
    result: dict[str, Any] = {}
    send = torch.empty(max(max(opts.sizes) // 4, CORRECTNESS_ELEMS), device=device, dtype=torch.float32)
    recv = torch.empty_like(send)

    # intra-node all-reduce: the world group when there is one node, else one subgroup per node
    node_group: Any = None
    if len(node_ranks) > 1:
        node_group, _ = dist.new_subgroups_by_enumeration(node_ranks)
    if len(my_ranks) > 1:
        result["allreduce_node"] = phases.run(
            "allreduce_node", lambda: allreduce_sweep(opts, send, node_group, float(rank + 1))
        )
    dist.barrier(group=cpu)

    # intra-node send/recv: every pair of local GPUs, disjoint pairs at once
    pairs: list[dict[str, Any]] = []
    for round_pairs in round_robin(max(len(r) for r in node_ranks)):
        for a, b in round_pairs:
            if local_index in (a, b) and max(a, b) < len(my_ranks):
                peer = my_ranks[b if local_index == a else a]
                out = phases.run(
                    f"sendrecv_node {a}-{b}", functools.partial(pair_sweep, opts, send, recv, rank, peer)
                )
                if out is not None:
                    pairs.append({"scope": "node", **out})
        dist.barrier(group=cpu)

    if len(node_ranks) > 1:
        result["allreduce_world"] = phases.run(
            "allreduce_cross_node", lambda: allreduce_sweep(opts, send, None, float(rank + 1))
        )
        dist.barrier(group=cpu)
        # node pairs: GPU i of one node with GPU i of the other, all rails at once
        for round_nodes in round_robin(len(node_ranks)):
            for na, nb in round_nodes:
                other = node_ranks[nb if my_node == na else na]
                if my_node in (na, nb) and local_index < len(other):
                    peer = other[local_index]
                    out = phases.run(
                        f"sendrecv_cross_node {na}-{nb}",
                        functools.partial(pair_sweep, opts, send, recv, rank, peer),
                    )
                    if out is not None:
                        pairs.append({"scope": "cross-node", **out})
            dist.barrier(group=cpu)
    result["pairs"] = pairs
    return result


def _combine(parts: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per size, the slowest rank's time."""
    by_size: dict[int, float] = {}
    for points in parts:
        for p in points:
            by_size[int(p["bytes"])] = max(by_size.get(int(p["bytes"]), 0.0), float(p["time_s"]))
    return [{"bytes": b, "time_s": t} for b, t in sorted(by_size.items())]


def _unique_names(names: Sequence[str]) -> list[str]:
    out: list[str] = []
    for name in names:
        label, k = name, 1
        while label in out:
            k += 1
            label = f"{name}#{k}"
        out.append(label)
    return out


def assemble(
    results: Sequence[dict[str, Any]], names: Sequence[str], node_ranks: Sequence[Sequence[int]]
) -> dict[str, Any]:
    """Turn the per-rank results into the raw measurements ``verdict.evaluate`` reads."""
    names = _unique_names(names)
    by_rank = {r["ident"]["rank"]: r for r in results}
    node_of = {rank: names[i] for i, ranks in enumerate(node_ranks) for rank in ranks}
    local_of = {rank: ranks.index(rank) for ranks in node_ranks for rank in ranks}
    raw: dict[str, Any] = {
        "world_size": len(results),
        "nodes": [],
        "gpus": [],
        "allreduce": [],
        "sendrecv": [],
        "errors": [],
        "phases_s": {},
        "environment": {},
    }
    for i, ranks in enumerate(node_ranks):
        head = by_rank[ranks[0]]
        raw["nodes"].append(
            {
                "name": names[i],
                "node_rank": i,
                "ranks": list(ranks),
                "local_gpus": head.get("local_gpus"),
                "visible_uuids": head.get("visible_uuids"),
                "cuda_visible_devices": head.get("cuda_visible_devices"),
                "health": head.get("health"),
            }
        )
        if not raw["environment"] and head.get("environment"):
            env = dict(head["environment"])
            health = head.get("health") or {}
            env["driver"] = health.get("driver_version")
            env["cuda_driver"] = health.get("cuda_driver_version")
            raw["environment"] = env
    for rank in sorted(by_rank):
        r = by_rank[rank]
        ident, gpu = r["ident"], r.get("gpu") or {}
        raw["gpus"].append(
            {
                "node": node_of[rank],
                "rank": rank,
                "local_rank": local_of[rank],
                "cuda_index": ident["cuda_index"],
                "uuid": ident["uuid"],
                "name": ident["name"],
                "pci_bus_id": ident["pci_bus_id"],
                "matmul_tflops": gpu.get("matmul_tflops"),
                "matmul_windows_tflops": gpu.get("matmul_windows_tflops"),
                "copy_gbps": gpu.get("copy_gbps"),
                "error": next((e["error"] for e in r["errors"] if e["phase"] == "gpu_compute"), None),
            }
        )
        for e in r["errors"]:
            if e["phase"] != "gpu_compute":
                raw["errors"].append({**{k: v for k, v in e.items() if k != "trace"}, "node": node_of[rank]})
    for i, ranks in enumerate(node_ranks):
        if len(ranks) > 1:
            raw["allreduce"].append(
                _ar_entry(
                    "allreduce_node", by_rank, scope="node", label=names[i], nodes=[names[i]], ranks=ranks
                )
            )
    if len(node_ranks) > 1:
        all_ranks = sorted(by_rank)
        raw["allreduce"].append(
            _ar_entry(
                "allreduce_world",
                by_rank,
                scope="cross-node",
                label=f"all {len(node_ranks)} nodes ({len(all_ranks)} GPUs)",
                nodes=list(names),
                ranks=all_ranks,
            )
        )
    # intra-node pairs, keyed by rank pair
    seen: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for rank in sorted(by_rank):
        for p in by_rank[rank].get("pairs", []):
            if p["scope"] == "node":
                seen.setdefault((min(rank, p["peer"]), max(rank, p["peer"])), []).append(p)
    for (a, b), parts in sorted(seen.items()):
        raw["sendrecv"].append(
            {
                "scope": "node",
                "label": f"{node_of[a]} gpu{local_of[a]}<->gpu{local_of[b]}",
                "nodes": [node_of[a], node_of[b]],
                "gpus": [[node_of[a], local_of[a]], [node_of[b], local_of[b]]],
                "ranks": [a, b],
                "points": _combine([p["points"] for p in parts]),
                "correct": all(p["correct"] for p in parts),
                "error": None if len(parts) == 2 else "only one side finished",
            }
        )
    # cross-node pairs, one entry per node pair (slowest GPU pair of the rails at each size)
    xseen: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = {}
    for rank in sorted(by_rank):
        for p in by_rank[rank].get("pairs", []):
            if p["scope"] == "cross-node":
                na, nb = sorted((node_of[rank], node_of[p["peer"]]))
                xseen.setdefault((na, nb), []).append((rank, p))
    for (na, nb), items in sorted(xseen.items()):
        ranks = sorted({rk for rk, _ in items} | {part["peer"] for _, part in items})
        rails = {}
        for rk, part in items:
            if node_of[rk] == na:
                rails[f"gpu{local_of[rk]}"] = _combine(
                    [part["points"]] + [q["points"] for other, q in items if other == part["peer"]]
                )
        raw["sendrecv"].append(
            {
                "scope": "cross-node",
                "label": f"{na}<->{nb}",
                "nodes": [na, nb],
                "gpus": [[node_of[r], local_of[r]] for r in ranks],
                "ranks": ranks,
                "points": _combine([p["points"] for _, p in items]),
                "rails": rails,
                "correct": all(p["correct"] for _, p in items),
                "error": None,
            }
        )
    head = by_rank[min(by_rank)]
    raw["phases_s"] = dict(head.get("phases_s", {}))
    raw["ranks_elapsed_s"] = {str(r): by_rank[r].get("elapsed_s") for r in sorted(by_rank)}
    return raw


def _ar_entry(
    key: str,
    by_rank: dict[int, dict[str, Any]],
    *,
    scope: str,
    label: str,
    nodes: list[str],
    ranks: Sequence[int],
) -> dict[str, Any]:
    parts = [by_rank[r].get(key) for r in ranks]
    done = [p for p in parts if p]
    expected = float(sum(r + 1 for r in ranks))
    correct = bool(done) and all(p["probe_uniform"] and p["probe_sum"] == expected for p in done)
    return {
        "scope": scope,
        "label": label,
        "nodes": nodes,
        "ranks": list(ranks),
        "points": _combine([p["points"] for p in done]),
        "correct": correct if len(done) == len(parts) else None,
        "error": None if len(done) == len(parts) else f"{len(parts) - len(done)} rank(s) did not finish",
    }
