"""The reward load test's CPU stall helpers (tests/bench/reward/machine.py): the attribution of
slow requests to stalls decides what the benchmark report says about a latency tail."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "reward"))

import machine

SENT = 1000.0


def test_a_stall_while_in_flight_counts() -> None:
    # sent at 1000.0, answered after 80 ms; a stall at 1000.05 happened while it waited
    assert machine.near_a_stall([(SENT, 80.0)], [SENT + 0.05], aftermath_s=0.5) == [True]


def test_a_stall_in_the_aftermath_before_sending_counts() -> None:
    assert machine.near_a_stall([(SENT, 5.0)], [SENT - 0.4], aftermath_s=0.5) == [True]


def test_a_stall_too_early_or_after_the_answer_does_not_count() -> None:
    requests = [(SENT, 5.0)]
    assert machine.near_a_stall(requests, [SENT - 0.6], aftermath_s=0.5) == [False]
    assert machine.near_a_stall(requests, [SENT + 0.006], aftermath_s=0.5) == [False]
    assert machine.near_a_stall(requests, [], aftermath_s=0.5) == [False]


def test_each_request_is_judged_on_its_own_window() -> None:
    stalls = [SENT + 2.0, SENT + 0.01]  # unsorted on purpose
    requests = [(SENT, 20.0), (SENT + 1.0, 1.0), (SENT + 2.3, 1.0), (SENT + 3.0, 1.0)]
    assert machine.near_a_stall(requests, stalls, aftermath_s=0.5) == [True, False, True, False]


def test_stalled_pieces_close_together_make_one_window() -> None:
    pieces = [(SENT, 5.0), (SENT + 0.01, 5.0), (SENT + 0.5, 2.0)]
    assert machine._windows(pieces) == [(SENT, SENT + 0.015), (SENT + 0.5, SENT + 0.502)]


def test_probe_and_watch_time_real_work() -> None:
    report = machine.probe(0.3)
    assert report["pieces"] > 100
    assert 0 < report["piece_cpu_us_median"] < 10_000
    assert 0 <= report["stalled_fraction"] < 1
    watch = machine.StallWatch(every=0.002)
    watch.start()
    deadline = time.monotonic() + 60
    while len(watch.pieces) <= 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    stalls = watch.stop()
    assert len(watch.pieces) > 20
    assert all(isinstance(at, float) for at in stalls)
    assert len(stalls) < len(watch.pieces)


def test_cpu_split_charges_a_child_to_the_workers() -> None:
    # The child burns 0.4 s of CPU, says so, and stays alive to be measured (as workers do).
    burn = (
        "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"
        "print('burnt', flush=True)\ntime.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        split = machine.CpuSplit(os.getpid())  # the child is already running: one of the descendants
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "burnt"
        shares = split.per_request_ms(requests=1)
    finally:
        child.kill()
        child.wait()
    assert shares["workers_ms"] >= 250, shares  # about 400 ms, less what it used before start()
    assert shares["http_process_ms"] < shares["workers_ms"]
    assert 0 <= shares["machine_idle_share"] <= 1
