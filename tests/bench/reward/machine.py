"""Watches this machine's CPU during the reward load test: stalls (moments when a fixed piece of work
costs many times its usual CPU time) and where the CPU went per request.

A shared virtual machine's host can slow a vCPU down or take it away for tens of milliseconds
without the guest seeing steal time; the thread that was running is charged for the whole gap.
Such a stall delays every request in flight, and at high load the backlog it leaves takes
load/(1 - load) times its length to drain. The load test records the stalls, so that a latency
tail can be told apart from the service's own cost.

A piece is timed in the thread's own CPU time, so waiting for the CPU behind another process
(ordinary contention) does not count as a stall; only a CPU that ran slow while this thread held it
does.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import os
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

STALL_FACTOR = 10  # a piece this many times its median CPU time is a stall
PIECE_ITERATIONS = 300  # about 25 µs of arithmetic on this machine
WINDOW_GAP_SECONDS = 0.02  # stalled pieces closer than this belong to one stall window


def _timed_piece() -> tuple[float, float]:
    """(wall-clock time, CPU ms) of one piece."""
    at = time.time()
    start = time.thread_time_ns()
    acc = 0
    for i in range(PIECE_ITERATIONS):
        acc += i * i
    return at, (time.thread_time_ns() - start) / 1e6


def _stalled(pieces: Sequence[tuple[float, float]]) -> tuple[float, list[tuple[float, float]]]:
    """The median piece's CPU ms, and the pieces that cost over STALL_FACTOR times it."""
    median = statistics.median(cpu for _, cpu in pieces)
    return median, [(at, cpu) for at, cpu in pieces if cpu > STALL_FACTOR * median]


def _windows(stalled: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """(start, end) wall-clock windows from (wall time, cpu ms) of stalled pieces."""
    out: list[tuple[float, float]] = []
    for at, cpu_ms in stalled:
        end = at + cpu_ms / 1e3
        if out and at - out[-1][1] < WINDOW_GAP_SECONDS:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((at, end))
    return out


def probe(seconds: float) -> dict[str, Any]:
    """Keeps one CPU busy with pieces for ``seconds`` and reports how much of that time ran
    stalled. Run it while nothing else runs: it is a property of the machine, not the service."""
    pieces: list[tuple[float, float]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pieces.append(_timed_piece())
    median, stalled = _stalled(pieces)
    windows = _windows(stalled)
    lengths = sorted((b - a) * 1e3 for a, b in windows)
    starts = [a for a, _ in windows]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    return {
        "seconds": seconds,
        "pieces": len(pieces),
        "piece_cpu_us_median": round(median * 1e3, 1),
        "stall_windows": len(windows),
        "stalled_fraction": round(sum(cpu for _, cpu in stalled) / 1e3 / seconds, 4),
        "window_ms_median": round(statistics.median(lengths), 1) if lengths else 0.0,
        "window_ms_max": round(lengths[-1], 1) if lengths else 0.0,
        "seconds_between_windows_median": round(statistics.median(gaps), 2) if gaps else None,
    }


class StallWatch(threading.Thread):
    """Times one piece every ``every`` seconds while a load phase runs (about 0.5% of a CPU)."""

    def __init__(self, every: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.every = every
        self.pieces: list[tuple[float, float]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.every):
            self.pieces.append(_timed_piece())

    def stop(self) -> list[float]:
        """Wall-clock times of the stalled pieces."""
        self._halt.set()
        self.join()
        if not self.pieces:
            return []
        return [at for at, _ in _stalled(self.pieces)[1]]


def near_a_stall(
    requests: Sequence[tuple[float, float]], stalls: Sequence[float], aftermath_s: float
) -> list[bool]:
    """For each request (wall-clock send time, latency ms): whether a stall came while it was in
    flight or in the ``aftermath_s`` before it was sent, when the backlog a stall leaves still
    delays new requests."""
    ordered = sorted(stalls)
    flags = []
    for sent, latency_ms in requests:
        k = bisect.bisect_left(ordered, sent - aftermath_s)
        flags.append(k < len(ordered) and ordered[k] <= sent + latency_ms / 1e3)
    return flags


def _cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            for child in map(int, children.read_text().split()):
                found += [child, *_descendants(child)]
    return found


def _machine_busy_and_idle() -> tuple[float, float]:
    ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK"), idle / os.sysconf("SC_CLK_TCK")


class CpuSplit:
    """Where the CPU went while a phase ran, per request: the service's HTTP process, its worker
    processes, and everything else on the machine (mostly the load generator). Counts from when it
    is made, for the processes alive then."""

    def __init__(self, service_pid: int) -> None:
        self.service_pid = service_pid
        pids = [service_pid, *_descendants(service_pid)]
        self._start = {p: s for p in pids if (s := _cpu_seconds(p)) is not None}
        self._machine = _machine_busy_and_idle()

    def per_request_ms(self, requests: int) -> dict[str, float]:
        used = {p: s - self._start[p] for p in self._start if (s := _cpu_seconds(p)) is not None}
        busy, idle = (b - a for a, b in zip(self._machine, _machine_busy_and_idle(), strict=True))
        http = used.get(self.service_pid, 0.0)
        workers = sum(used.values()) - http
        n = max(requests, 1)
        return {
            "http_process_ms": round(http / n * 1e3, 3),
            "workers_ms": round(workers / n * 1e3, 3),
            "rest_of_machine_ms": round((busy - http - workers) / n * 1e3, 3),
            "machine_idle_share": round(idle / max(busy + idle, 1e-9), 3),
        }
