"""Overload, worker loss, readiness, startup failure and graceful shutdown of a real service."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from reward_http import (
    HANGING_RESPONSE,
    HOST,
    STARTUP_SECONDS,
    Gate,
    ServiceFactory,
    free_port,
    sample,
    wait_until,
)


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def worker_pids(server_pid: int) -> list[int]:
    """Scoring workers: the children of the server's multiprocessing fork server."""
    pids = []
    for child in children(server_pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"forkserver" in cmdline:
            pids += children(child)
    return pids


def test_overload_answers_503_at_once_and_recovers(
    service_factory: ServiceFactory, gate: Gate
) -> None:
    svc = service_factory(
        {
            **gate.env(),
            "REWARD_WORKERS": "1",
            "REWARD_MAX_INFLIGHT": "2",
            "REWARD_TIMEOUT_SECONDS": "60",
        }
    )
    with ThreadPoolExecutor(max_workers=4) as ex:
        held = ex.submit(svc.post, "/score", gate.sample("held", "$\\boxed{3}$", "3"), 120.0)
        gate.wait_entered("held")
        queued = ex.submit(svc.post, "/score", sample("$\\boxed{4}$", "4"), 120.0)
        wait_until("2 samples admitted", lambda: svc.metric("reward_inflight_samples") == 2)
        t0 = time.monotonic()
        rejected = svc.post("/score", sample("$\\boxed{4}$", "4"))
        rejected_after = time.monotonic() - t0
        not_ready = svc.get("/ready")
        assert rejected.status == 503
        assert rejected.json()["error"] == "overloaded"
        assert rejected.headers["retry-after"] == "1"
        assert rejected_after < 0.5
        assert not_ready.status == 503 and "capacity" in not_ready.json()["detail"]
        assert svc.get("/health").status == 200
        assert not held.done() and not queued.done()
        gate.release("held")
        assert (held.result().status, held.result().body) == (200, b"1.0")
        assert (queued.result().status, queued.result().body) == (200, b"1.0")
    assert svc.get("/ready").status == 200
    assert svc.post("/score", sample("$\\boxed{4}$", "4")).body == b"1.0"
    assert svc.post("/score/batch", [sample("1", "1")] * 3).status == 413
    assert svc.metric("reward_requests_total", {"outcome": "overloaded"}) == 1


def test_killed_worker_fails_its_sample_fast_and_is_replaced(
    service_factory: ServiceFactory, gate: Gate
) -> None:
    svc = service_factory({**gate.env(), "REWARD_WORKERS": "1", "REWARD_TIMEOUT_SECONDS": "60"})
    with ThreadPoolExecutor(max_workers=2) as ex:
        held = ex.submit(svc.post, "/score", gate.sample("held", "$\\boxed{3}$", "3"), 120.0)
        inside = gate.wait_entered("held")
        workers = worker_pids(svc.proc.pid)
        assert workers == [inside], workers
        t0 = time.monotonic()
        os.kill(inside, signal.SIGKILL)
        reply = held.result()
        took = time.monotonic() - t0  # from the kill: far below the 60 s timeout
    assert reply.status == 503
    assert reply.json()["error"] == "worker_died"
    assert took < 5
    assert svc.post("/score", sample("$\\boxed{8}$", "8")).body == b"1.0"
    assert svc.metric("reward_worker_restarts_total", {"reason": "worker_died"}) == 1
    assert worker_pids(svc.proc.pid) != workers


def test_repeated_failures_make_it_unready_until_a_success(
    service_factory: ServiceFactory,
) -> None:
    svc = service_factory({"REWARD_WORKERS": "2", "REWARD_TIMEOUT_SECONDS": "2"})
    for _ in range(5):
        assert svc.post("/score", sample(HANGING_RESPONSE, "3")).status == 503
    ready = svc.get("/ready")
    assert ready.status == 503
    assert "consecutive failed checks" in ready.json()["detail"]
    assert svc.get("/health").status == 200

    def scored() -> bool:
        """One plain check. On a machine kept busy it can run past the timeout (a busy series
        run saw it): that is one more failed check, and the service stays unready until one is
        scored."""
        reply = svc.post("/score", sample("$\\boxed{8}$", "8"))
        if reply.status == 503:
            assert reply.json()["error"] == "timeout", reply.body
            assert svc.get("/ready").status == 503
            return False
        assert reply.body == b"1.0"
        return True

    wait_until("a plain check scored", scored)
    assert svc.get("/ready").status == 200


def test_backend_that_cannot_load_stops_startup(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "no-such-architecture"}')
    env = {k: v for k, v in os.environ.items() if not k.startswith("REWARD_")}
    env.update(
        {
            "REWARD_BACKEND": "reward_model",
            "REWARD_MODEL_PATH": str(tmp_path),
            "REWARD_WORKERS": "1",
            "REWARD_PORT": str(free_port()),
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "miles_reward", "--host", HOST],
        env=env,
        capture_output=True,
        text=True,
        timeout=STARTUP_SECONDS,  # it loads the backend in three workers before it gives up
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "could not load the reward_model backend" in done.stderr


def accepts_connections(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=1).close()
    except OSError:
        return False
    return True


def test_sigterm_finishes_in_flight_work_and_refuses_new(
    service_factory: ServiceFactory, gate: Gate
) -> None:
    svc = service_factory(
        {
            **gate.env(),
            "REWARD_WORKERS": "1",
            "REWARD_MAX_INFLIGHT": "4000",
            "REWARD_TIMEOUT_SECONDS": "20",
        }
    )
    reasoning = "Expanding $(a+b)^2 = a^2 + 2ab + b^2$ and substituting gives the value. " * 30
    items = [gate.sample("first", reasoning + "Hence $\\boxed{0}$.", "0")]
    items += [sample(reasoning + f"Hence $\\boxed{{{i}}}$.", str(i)) for i in range(1, 200)]
    with ThreadPoolExecutor(max_workers=1) as ex:
        batch = ex.submit(svc.post, "/score/batch", items, 60.0)
        gate.wait_entered("first")
        svc.proc.send_signal(signal.SIGTERM)
        svc.wait_log("SIGTERM: draining")
        wait_until("new connections refused", lambda: not accepts_connections(svc.port))
        assert not batch.done(), "the batch was answered while its first check was still held"
        gate.release("first")
        reply = batch.result()
    assert reply.status == 200, reply.body[:300]
    assert reply.json() == [1.0] * len(items)
    code = svc.proc.wait(20)
    assert code in (0, -signal.SIGTERM), svc.log()
    assert not worker_pids(svc.proc.pid)


DRAIN_WINDOW_SECONDS = 4.0


def test_sigterm_answers_work_still_queued_after_the_drain_window_with_503(
    service_factory: ServiceFactory, gate: Gate
) -> None:
    """One worker, REWARD_TIMEOUT_SECONDS=4, so the drain window is 4 s (room for the three plain
    checks on a machine kept busy). Three samples are scored, then every other sample holds its
    check until the test releases them all, after the drain window: the one held when SIGTERM came
    runs past its timeout, and every sample not yet with a worker when the window closed is
    answered 503 shutting_down."""
    svc = service_factory(
        {
            **gate.env(),
            "REWARD_WORKERS": "1",
            "REWARD_MAX_INFLIGHT": "1000",
            "REWARD_TIMEOUT_SECONDS": str(DRAIN_WINDOW_SECONDS),
        }
    )
    scored_first = [sample(f"$\\boxed{{{i}}}$", str(i)) for i in range(3)]
    held = [gate.sample("held", f"$\\boxed{{{i}}}$", str(i)) for i in range(3, 40)]
    with ThreadPoolExecutor(max_workers=1) as ex:
        batch = ex.submit(svc.post, "/score/batch", scored_first + held, 120.0)
        gate.wait_entered("held")
        t0 = time.monotonic()
        svc.proc.send_signal(signal.SIGTERM)
        svc.wait_log("drain window over")
        gate.release("held")
        reply = batch.result()
        answered_after = time.monotonic() - t0
    assert reply.status == 503
    body = reply.json()
    assert body["error"] == "timeout"  # the batch names its first failure
    results = body["results"]
    assert results[:3] == [1.0] * 3
    assert results[3]["error"] == "timeout"  # held since before SIGTERM, past its timeout
    later = results[4:]
    assert all(r == 1.0 or r["error"] == "shutting_down" for r in later), later
    # at most the samples a worker held in its pipe when the window closed are scored after it
    assert sum(isinstance(r, dict) for r in later) >= len(later) - 4, later
    assert DRAIN_WINDOW_SECONDS <= answered_after < DRAIN_WINDOW_SECONDS + 3.0, answered_after
    assert svc.proc.wait(10) in (0, -signal.SIGTERM)


def test_sample_prefetched_behind_a_hang_is_rescored_elsewhere(
    service_factory: ServiceFactory, gate: Gate
) -> None:
    """While work is queued each worker holds one more sample in its pipe; when the current check
    hangs, that sample is handed to another worker instead of waiting for the timeout.

    The hang lasts until the test releases it, after the batch: a sample left behind it could only
    be answered once the watchdog killed the hung worker at the timeout (30 s here), so no worker
    may have been killed. The batch is four checks (one prefetched behind the hang, three for the
    other worker), few enough to be scored well inside 2.5 s on a machine kept busy."""
    timeout = 30.0
    svc = service_factory(
        {**gate.env(), "REWARD_WORKERS": "2", "REWARD_TIMEOUT_SECONDS": str(timeout)}
    )
    items = [sample(f"$\\boxed{{{i}}}$", str(i)) for i in range(4)]
    with ThreadPoolExecutor(max_workers=2) as ex:
        hanging = ex.submit(svc.post, "/score", gate.sample("hang", "$\\boxed{3}$", "3"), 90.0)
        gate.wait_entered("hang")
        t0 = time.monotonic()
        reply = svc.post("/score/batch", items, 90.0)
        took = time.monotonic() - t0
        killed = svc.metric("reward_worker_restarts_total", {"reason": "timeout"})
        assert not hanging.done()
        gate.release("hang")
        assert (hanging.result().status, hanging.result().body) == (200, b"1.0")
    assert reply.status == 200, reply.body[:300]
    assert reply.json() == [1.0] * 4
    assert killed == 0, f"a sample waited behind the hang until it was killed ({took:.2f}s)"
    assert took < 2.5, f"a sample waited behind the hanging check: {took:.2f}s"
