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

from reward_http import HANGING_RESPONSE, HOST, ServiceFactory, free_port, sample


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


def test_overload_answers_503_at_once_and_recovers(service_factory: ServiceFactory) -> None:
    svc = service_factory(
        {"REWARD_WORKERS": "1", "REWARD_MAX_INFLIGHT": "2", "REWARD_TIMEOUT_SECONDS": "2"}
    )
    with ThreadPoolExecutor(max_workers=4) as ex:
        hanging = ex.submit(svc.post, "/score", sample(HANGING_RESPONSE, "3"))
        time.sleep(0.3)
        queued = ex.submit(svc.post, "/score", sample("$\\boxed{4}$", "4"))
        time.sleep(0.2)
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
        assert hanging.result().status == 503
        assert (queued.result().status, queued.result().body) == (200, b"1.0")
    assert svc.get("/ready").status == 200
    assert svc.post("/score", sample("$\\boxed{4}$", "4")).body == b"1.0"
    assert svc.post("/score/batch", [sample("1", "1")] * 3).status == 413
    assert svc.metric("reward_requests_total", {"outcome": "overloaded"}) == 1


def test_killed_worker_fails_its_sample_fast_and_is_replaced(
    service_factory: ServiceFactory,
) -> None:
    svc = service_factory({"REWARD_WORKERS": "1", "REWARD_TIMEOUT_SECONDS": "30"})
    with ThreadPoolExecutor(max_workers=2) as ex:
        t0 = time.monotonic()
        hanging = ex.submit(svc.post, "/score", sample(HANGING_RESPONSE, "3"))
        time.sleep(0.5)
        workers = worker_pids(svc.proc.pid)
        assert len(workers) == 1, workers
        os.kill(workers[0], signal.SIGKILL)
        reply = hanging.result()
        took = time.monotonic() - t0
    assert reply.status == 503
    assert reply.json()["error"] == "worker_died"
    assert took < 5
    assert svc.post("/score", sample("$\\boxed{8}$", "8")).body == b"1.0"
    assert svc.metric("reward_worker_restarts_total", {"reason": "worker_died"}) == 1
    assert worker_pids(svc.proc.pid) != workers


def test_repeated_failures_make_it_unready_until_a_success(
    service_factory: ServiceFactory,
) -> None:
    svc = service_factory({"REWARD_WORKERS": "2", "REWARD_TIMEOUT_SECONDS": "0.5"})
    for _ in range(5):
        assert svc.post("/score", sample(HANGING_RESPONSE, "3")).status == 503
    ready = svc.get("/ready")
    assert ready.status == 503
    assert "consecutive failed checks" in ready.json()["detail"]
    assert svc.get("/health").status == 200
    assert svc.post("/score", sample("$\\boxed{8}$", "8")).body == b"1.0"
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
        timeout=180,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "could not load the reward_model backend" in done.stderr


def test_sigterm_finishes_in_flight_work_and_refuses_new(service_factory: ServiceFactory) -> None:
    svc = service_factory(
        {"REWARD_WORKERS": "1", "REWARD_MAX_INFLIGHT": "4000", "REWARD_TIMEOUT_SECONDS": "20"}
    )
    reasoning = "Expanding $(a+b)^2 = a^2 + 2ab + b^2$ and substituting gives the value. " * 30
    items = [sample(reasoning + f"Hence $\\boxed{{{i}}}$.", str(i)) for i in range(600)]
    with ThreadPoolExecutor(max_workers=1) as ex:
        t0 = time.monotonic()
        batch = ex.submit(svc.post, "/score/batch", items, 60.0)
        time.sleep(0.4)
        svc.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        refused = False
        try:
            socket.create_connection((HOST, svc.port), timeout=1).close()
        except OSError:
            refused = True
        assert not batch.done(), "batch finished before the drain could be observed"
        reply = batch.result()
        took = time.monotonic() - t0
    assert refused, "new connections must be refused once SIGTERM arrived"
    assert reply.status == 200, reply.body[:300]
    assert reply.json() == [1.0] * len(items)
    code = svc.proc.wait(20)
    assert code in (0, -signal.SIGTERM), svc.log()
    assert not worker_pids(svc.proc.pid)
    assert took > 0.7


def test_sigterm_answers_work_still_queued_after_the_drain_window_with_503(
    service_factory: ServiceFactory,
) -> None:
    svc = service_factory(
        {"REWARD_WORKERS": "1", "REWARD_MAX_INFLIGHT": "10000", "REWARD_TIMEOUT_SECONDS": "1"}
    )
    reasoning = "Expanding $(a+b)^2 = a^2 + 2ab + b^2$ and substituting gives the value. " * 10
    items = [sample(reasoning + f"Hence $\\boxed{{{i}}}$.", str(i)) for i in range(8000)]
    with ThreadPoolExecutor(max_workers=1) as ex:
        batch = ex.submit(svc.post, "/score/batch", items, 120.0)
        time.sleep(0.5)
        t0 = time.monotonic()
        svc.proc.send_signal(signal.SIGTERM)
        reply = batch.result()
        answered_after = time.monotonic() - t0
    assert reply.status == 503
    body = reply.json()
    assert body["error"] == "shutting_down"
    results = body["results"]
    scored = [r for r in results if not isinstance(r, dict)]
    assert scored and all(r == 1.0 for r in scored)
    assert all(r["error"] == "shutting_down" for r in results if isinstance(r, dict))
    assert 1.0 <= answered_after < 4.0, answered_after
    assert svc.proc.wait(10) in (0, -signal.SIGTERM)


def test_sample_prefetched_behind_a_hang_is_rescored_elsewhere(
    service_factory: ServiceFactory,
) -> None:
    """While work is queued each worker holds one more sample in its pipe; when the current check
    hangs, that sample is handed to another worker instead of waiting for the timeout."""
    svc = service_factory({"REWARD_WORKERS": "2", "REWARD_TIMEOUT_SECONDS": "12"})
    items = [sample(f"$\\boxed{{{i}}}$", str(i)) for i in range(20)]
    with ThreadPoolExecutor(max_workers=2) as ex:
        hanging = ex.submit(svc.post, "/score", sample(HANGING_RESPONSE, "3"))
        time.sleep(0.3)
        t0 = time.monotonic()
        reply = svc.post("/score/batch", items)
        took = time.monotonic() - t0
        assert hanging.result().status == 503
    assert reply.status == 200, reply.body[:300]
    assert reply.json() == [1.0] * 20
    assert took < 2.5, f"a sample waited behind the hanging check: {took:.2f}s"
