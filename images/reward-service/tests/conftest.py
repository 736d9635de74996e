"""Fixtures for the reward-service tests (helpers live in reward_http.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from reward_http import MATH_SERVICE_TIMEOUT_SECONDS, Gate, Service, ServiceFactory, start_service


@pytest.fixture
def service_factory(tmp_path: Path) -> Iterator[ServiceFactory]:
    started: list[Service] = []

    def make(env: Mapping[str, str], wait_ready: bool = True) -> Service:
        svc = start_service(env, tmp_path / f"service-{len(started)}.log", wait_ready)
        started.append(svc)
        return svc

    yield make
    for svc in started:
        svc.stop()


@pytest.fixture
def gate(tmp_path: Path) -> Gate:
    """Holds a worker inside a check until the test releases it; services take ``gate.env()``."""
    directory = tmp_path / "gate"
    directory.mkdir()
    return Gate(directory)


@pytest.fixture(scope="module")
def math_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """Two workers: shared by the tests that leave it as they found it."""
    log = tmp_path_factory.mktemp("math") / "service.log"
    svc = start_service(
        {
            "REWARD_BACKEND": "math_verify",
            "REWARD_WORKERS": "2",
            "REWARD_MAX_INFLIGHT": "256",
            "REWARD_TIMEOUT_SECONDS": str(MATH_SERVICE_TIMEOUT_SECONDS),
        },
        log,
    )
    yield svc
    svc.stop()
