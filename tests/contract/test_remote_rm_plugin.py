"""The chart's reward plugin (charts/miles/files/k8s_remote_rm.py) through miles' real reward path.

Upstream fact (miles-rl 0.0.2, miles/rollout/rm_hub/__init__.py): ``--rm-type remote_rm`` posts once
per sample and calls ``raise_for_status()``; any exception fails the rollout. Our reward service
answers 503 when overloaded and while a pod drains, so the chart passes ``--custom-rm-path`` to this
plugin, which retries what is transient. Two tiers:

- against the real reward service, through the real ``miles.rollout.rm_hub.async_rm`` in the
  contract venv (remote_rm_driver.py): scoring, overload, a restart mid-load, a 422, the deadline,
  and upstream's own client failing where the plugin does not;
- in this process against a small aiohttp server that answers what the reward service never does
  (429, 502, 504, a hang, a dropped connection, a 200 that is not a number).
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from aiohttp import web
from remote_rm_lib import (
    PLUGIN,
    Driver,
    contract_python,
    corpus_rows,
    refuses_connections,
    reward_http,
    run_driver,
    wait_until,
    with_service_answers,
)

RIGHT = {"prompt": "What is 2 + 2?", "response": "So the answer is $\\boxed{4}$.", "label": "4"}
WRONG = {"prompt": "What is 2 + 2?", "response": "So the answer is $\\boxed{5}$.", "label": "4"}
# miles sends the prompt as chat messages when it does not apply the chat template itself.
CHAT_PROMPT = [
    {"role": "system", "content": "Put the final answer in \\boxed{}."},
    {"role": "user", "content": "What is 2 + 2?"},
]


# ------------------------------------------------------------------ the real path (contract venv)
@pytest.fixture(scope="module")
def miles_python() -> Path:
    return Path(contract_python())  # missing: a failure naming `make tools`


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Callable[..., reward_http.Service]]:
    started: list[reward_http.Service] = []

    def start(env: dict[str, str], port: int | None = None) -> reward_http.Service:
        svc = reward_http.start_service(env, tmp_path / f"service-{len(started)}.log", port=port)
        started.append(svc)
        return svc

    yield start
    for svc in started:
        svc.stop()


def url(svc: reward_http.Service) -> str:
    return f"http://{reward_http.HOST}:{svc.port}/score"


def scored_samples(svc: reward_http.Service, n: int = 16) -> list[dict[str, Any]]:
    """``n`` corpus samples with the service's own answers, right and wrong ones both present."""
    rows = with_service_answers(svc.port, corpus_rows()[:n])
    assert {r["expected"] for r in rows} == {0.0, 1.0}, "the samples must have both answers"
    return rows


def test_scores_what_the_service_answers_same_as_upstream(
    miles_python: Path, services: Callable[..., reward_http.Service]
) -> None:
    svc = services({"REWARD_WORKERS": "2"})
    rows = scored_samples(svc)
    chat = [
        {**RIGHT, "prompt": CHAT_PROMPT, "expected": 1.0},
        {**WRONG, "prompt": CHAT_PROMPT, "expected": 0.0},
    ]
    doc = {"rm_url": url(svc), "samples": rows + chat, "count": len(rows) + 2, "concurrency": 8}
    plugin, _ = run_driver(miles_python, {**doc, "mode": "plugin"})
    assert (plugin["ok"], plugin["failed"], plugin["wrong"]) == (len(rows) + 2, 0, 0), plugin
    assert plugin["plugin"]["attempts"] == len(rows) + 2 and plugin["plugin"]["retries"] == 0
    # The same samples through upstream's own remote_rm: the same payload gives the same rewards.
    upstream, _ = run_driver(miles_python, {**doc, "mode": "builtin"})
    assert upstream["failed"] == 0 and upstream["plugin"] is None, upstream
    assert sorted(plugin["rewards"]) == sorted(upstream["rewards"])
    # With --group-rm, miles' batched path hands the plugin a list per call: a list comes back.
    batched, _ = run_driver(miles_python, {**doc, "mode": "batched", "count": 16})
    assert (batched["ok"], batched["failed"], batched["wrong"]) == (16, 0, 0), batched


OVERLOADED = {"REWARD_WORKERS": "2", "REWARD_MAX_INFLIGHT": "4", "REWARD_TIMEOUT_SECONDS": "10"}


def test_overload_costs_retries_not_samples(
    miles_python: Path, services: Callable[..., reward_http.Service]
) -> None:
    svc = services(OVERLOADED)
    rows = scored_samples(svc)
    doc = {"rm_url": url(svc), "mode": "plugin", "samples": rows, "count": 800, "concurrency": 128}
    result, stderr = run_driver(miles_python, doc)
    assert (result["ok"], result["failed"], result["wrong"]) == (800, 0, 0), result
    overloaded = svc.metric("reward_requests_total", {"outcome": "overloaded"})
    assert overloaded > 0, "the service was never overloaded: the test did not test retries"
    stats = result["plugin"]
    assert stats["retries"] == overloaded and set(stats["reasons"]) == {"HTTP 503"}, stats
    assert stats["attempts"] == 800 + stats["retries"]
    # a person reading `ray job logs` sees the retries, with the attempt count and the reason
    assert re.search(r"WARNING .*attempt \d+ for sample index=\d+ .*failed \(HTTP 503: .*overloaded", stderr)


def test_upstream_remote_rm_fails_samples_under_the_same_overload(
    miles_python: Path, services: Callable[..., reward_http.Service]
) -> None:
    """The contrast: without the plugin the same load fails samples, each of which ends the run."""
    svc = services(OVERLOADED)
    rows = scored_samples(svc)
    doc = {"rm_url": url(svc), "mode": "builtin", "samples": rows, "count": 800, "concurrency": 128}
    result, _ = run_driver(miles_python, doc)
    assert result["failed"] > 0, result
    assert result["wrong"] == 0
    assert all("503" in e for e in result["errors"]), result["errors"]


def test_a_pod_rollout_mid_load_fails_no_sample(
    miles_python: Path, services: Callable[..., reward_http.Service]
) -> None:
    first = services({"REWARD_WORKERS": "2", "REWARD_TIMEOUT_SECONDS": "5"})
    rows = scored_samples(first)
    doc = {
        "rm_url": url(first),
        "mode": "plugin",
        "samples": rows,
        "count": 3000,
        "concurrency": 64,
        "progress_every": 0.1,
    }
    driver = Driver(miles_python, doc)
    try:
        wait_until("300 samples scored before the restart", lambda: driver.done() >= 300)
        first.proc.send_signal(signal.SIGTERM)  # what the kubelet sends a pod being replaced
        wait_until("the old service's listener closed", lambda: refuses_connections(first.port))
        second = services({"REWARD_WORKERS": "2", "REWARD_TIMEOUT_SECONDS": "5"}, port=first.port)
        result = driver.wait()
    finally:
        driver.stop()
    assert (result["ok"], result["failed"], result["wrong"]) == (3000, 0, 0), result
    assert first.proc.wait(30) in (143, -signal.SIGTERM)
    served_after = second.metric("reward_samples_total", {"outcome": "scored"})
    assert served_after > 0, "no sample reached the new service: the restart came after the load"
    assert result["plugin"]["retries"] > 0, result["plugin"]


def test_unusable_label_raises_at_once_with_the_service_body(
    miles_python: Path, services: Callable[..., reward_http.Service]
) -> None:
    svc = services({"REWARD_WORKERS": "1"})
    doc = {"rm_url": url(svc), "mode": "plugin", "samples": [{**RIGHT, "label": None}], "count": 1}
    result, _ = run_driver(miles_python, doc)
    assert result["failed"] == 1, result
    (message,) = result["error_examples"]
    assert "answered 422" in message and '"error": "unusable_label"' in message, message
    assert url(svc) in message and "index=0" in message
    assert result["plugin"]["attempts"] == 1 and result["plugin"]["retries"] == 0


def test_gives_up_at_the_deadline_naming_the_url(miles_python: Path) -> None:
    port = reward_http.free_port()  # nothing listens: the service is gone for good
    deadline = 3.0
    doc = {
        "rm_url": f"http://{reward_http.HOST}:{port}/score",
        "mode": "plugin",
        "samples": [RIGHT],
        "count": 4,
        "concurrency": 4,
    }
    result, stderr = run_driver(miles_python, doc, {"MILES_RM_RETRY_SECONDS": str(deadline)})
    assert result["failed"] == 4 and result["ok"] == 0, result
    for message in result["error_examples"]:
        assert f"reward service {doc['rm_url']}: no score for sample" in message, message
        assert "MILES_RM_RETRY_SECONDS=3" in message and "last error: ClientConnectorError" in message
        attempts = int(re.search(r"after (\d+) attempts", message).group(1))  # type: ignore[union-attr]
        assert attempts > 1
    # The last attempt is made at the deadline, not before; connection refusals answer at once.
    assert deadline <= result["failed_after_s"]["min"]
    assert result["failed_after_s"]["max"] < deadline + 2.0, result["failed_after_s"]
    assert "retrying in" in stderr


# ---------------------------------------------------------- in this process, against a scripted server
def load_plugin() -> ModuleType:
    """The chart's file as a module, without writing a __pycache__ into the chart."""
    spec = importlib.util.spec_from_file_location("k8s_remote_rm_under_test", PLUGIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = saved
    return module


rm = load_plugin()


@dataclass
class Scripted:
    """A server whose answers are scripted per label: each request for a label takes the next step
    (the last one repeats). A step is (status, body, headers), "hang" or "drop"."""

    script: dict[str, list[Any]]
    seen: list[tuple[str, float, Any]] = field(default_factory=list)
    peers: set[Any] = field(default_factory=set)
    port: int = 0
    released: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        payload = await request.json()
        label = payload["label"]
        self.seen.append((label, time.monotonic(), payload))
        self.peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        steps = self.script[label]
        step = steps.pop(0) if len(steps) > 1 else steps[0]
        if step == "hang":
            await self.released.wait()  # until the test ends: far past the client's timeout
        if step == "drop":
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=200, body=b"1.0")
        status, body, headers = step
        return web.Response(status=status, body=body, headers=headers)

    def times(self, label: str) -> list[float]:
        return [t for lab, t, _ in self.seen if lab == label]


@asynccontextmanager
async def scripted(script: dict[str, list[Any]]) -> AsyncIterator[Scripted]:
    server = Scripted(script)
    app = web.Application()
    app.router.add_post("/score", server.handle)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, reward_http.HOST, 0)
    await site.start()
    server.port = runner.addresses[0][1]
    try:
        yield server
    finally:
        server.released.set()
        await rm.aclose()
        await runner.cleanup()


@dataclass
class Args:
    rm_url: str


@dataclass
class Sample:
    prompt: Any
    response: str
    label: str | None
    index: int = 0
    group_index: int = 0


def args_for(server: Scripted) -> Args:
    return Args(f"http://{reward_http.HOST}:{server.port}/score")


OK: tuple[int, bytes, dict[str, str]] = (200, b"0.5", {})


def test_transient_statuses_are_retried_honouring_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    # Short backoffs, so that only Retry-After can hold an attempt back for a second.
    monkeypatch.setattr(rm, "FIRST_BACKOFF_SECONDS", 0.05)
    script = {
        "flaky": [
            (429, b'{"error": "rate"}', {"Retry-After": "1"}),
            (502, b"bad gateway", {}),
            (504, b"gateway timeout", {}),
            (503, b'{"error": "shutting_down"}', {"Retry-After": "1"}),
            OK,
        ]
    }

    async def scenario() -> tuple[float | list[float], Scripted]:
        async with scripted(script) as server:
            reward = await rm.remote_rm(args_for(server), Sample("p", "r", "flaky"))
            return reward, server

    before = rm.STATS.retries
    reward, server = asyncio.run(scenario())
    assert reward == 0.5
    times = server.times("flaky")
    assert len(times) == 5 and rm.STATS.retries - before == 4
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # Retry-After: 1 answered the first and the fourth attempt: the next came no sooner; the others
    # waited their (short) backoff only.
    assert gaps[0] >= 1.0 and gaps[3] >= 1.0, gaps
    assert gaps[1] < 1.0 and gaps[2] < 1.0, gaps
    assert all(p == {"prompt": "p", "response": "r", "label": "flaky"} for _, _, p in server.seen)


def test_timeouts_and_dropped_connections_are_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MILES_RM_REQUEST_TIMEOUT_SECONDS", "0.5")
    script = {"slow": ["hang", OK], "dropped": ["drop", OK]}

    async def scenario() -> tuple[list[Any], Scripted]:
        async with scripted(script) as server:
            rewards = await asyncio.gather(
                rm.remote_rm(args_for(server), Sample("p", "r", "slow")),
                rm.remote_rm(args_for(server), Sample("p", "r", "dropped")),
            )
            return list(rewards), server

    before = dict(rm.STATS.reasons)
    rewards, server = asyncio.run(scenario())
    assert rewards == [0.5, 0.5]
    assert len(server.times("slow")) == 2 and len(server.times("dropped")) == 2
    new = {k: v - before.get(k, 0) for k, v in rm.STATS.reasons.items()}
    assert new.get("TimeoutError") == 1 and new.get("ServerDisconnectedError") == 1, new


@pytest.mark.parametrize("status", [400, 404, 413, 422, 500])
def test_other_statuses_raise_at_once_with_the_body(status: int) -> None:
    body = json.dumps({"error": f"e{status}", "detail": "the service's reason"}).encode()

    async def scenario() -> tuple[str, Scripted]:
        async with scripted({"x": [(status, body, {"Retry-After": "1"})]}) as server:
            with pytest.raises(rm.RemoteRewardError) as caught:
                await rm.remote_rm(args_for(server), Sample("p", "r", "x", index=7, group_index=3))
            return str(caught.value), server

    message, server = asyncio.run(scenario())
    assert len(server.times("x")) == 1
    assert f"answered {status} for sample index=7 group_index=3" in message
    assert body.decode() in message and args_for(server).rm_url in message


@pytest.mark.parametrize("body", [b"null", b'"1.0"', b'{"score": 1.0}', b"true", b"NaN", b"", b"[1.0]"])
def test_a_200_without_a_number_raises(body: bytes) -> None:
    async def scenario() -> str:
        async with scripted({"x": [(200, body, {})]}) as server:
            with pytest.raises(rm.RemoteRewardError) as caught:
                await rm.remote_rm(args_for(server), Sample("p", "r", "x"))
            return str(caught.value)

    message = asyncio.run(scenario())
    assert "answered 200 without a reward" in message and "expected a JSON number" in message


def test_one_session_per_event_loop_keeps_connections_alive() -> None:
    """Upstream opens a session (a connection) per sample; the plugin reuses its connections."""

    async def scenario() -> Scripted:
        async with scripted({"x": [OK]}) as server:
            for _ in range(50):
                assert await rm.remote_rm(args_for(server), Sample("p", "r", "x")) == 0.5
            await asyncio.gather(*(rm.remote_rm(args_for(server), Sample("p", "r", "x")) for _ in range(20)))
            return server

    server = asyncio.run(scenario())
    assert len(server.seen) == 70
    assert len(server.peers) <= 20, f"{len(server.peers)} connections for 70 requests"


def test_retry_after_forms() -> None:
    assert rm._retry_after_seconds("2") == 2.0
    assert rm._retry_after_seconds(None) is None and rm._retry_after_seconds("soon") is None
    assert rm._retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 < rm._retry_after_seconds(later) <= 30


def test_a_bad_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MILES_RM_RETRY_SECONDS", "forever")

    async def scenario() -> None:
        async with scripted({"x": [OK]}) as server:
            await rm.remote_rm(args_for(server), Sample("p", "r", "x"))

    with pytest.raises(ValueError, match="MILES_RM_RETRY_SECONDS: expected a number >= 0, found 'forever'"):
        asyncio.run(scenario())
