"""Helpers that run the real service as a subprocess on a loopback port and talk HTTP to it.

(A uniquely named module: every test tier of the repository has its own conftest.py.)
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
# How long a service process may take to become ready, or to give up: it imports torch and
# transformers (seconds on a quiet machine, minutes on one kept busy). A bound for a hang, never a
# measurement.
STARTUP_SECONDS = 600.0
# Deadline of every wait for an observed state: generous, since a wait ends as soon as it is seen.
WAIT_SECONDS = 60.0
# REWARD_TIMEOUT_SECONDS of the shared math_service. A plain check must finish well inside it on a
# machine kept busy (a check that runs past it is a timeout, not a score), and the tests that hang a
# check wait for it, so their measured bounds are this plus a fixed margin.
MATH_SERVICE_TIMEOUT_SECONDS = 4.0
GATE_SITE = Path(__file__).resolve().parent / "gate_site"


def wait_until(what: str, ready: Callable[[], bool], timeout: float = WAIT_SECONDS) -> None:
    """Returns once ``ready()`` is true; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {timeout:g}s")
        time.sleep(0.01)


@dataclass
class Gate:
    """Holds a real worker inside a check until released (see gate_site/sitecustomize.py)."""

    directory: Path

    def env(self) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(GATE_SITE), os.environ.get("PYTHONPATH", "")) if p)
        return {"PYTHONPATH": path, "REWARD_TEST_GATE_DIR": str(self.directory)}

    def sample(self, name: str, response: str, label: str) -> dict[str, Any]:
        return sample(f"gate:{name}:{response}", label)

    def entered(self, name: str) -> bool:
        return (self.directory / f"{name}.entered").exists()

    def wait_entered(self, name: str) -> int:
        """Waits until a worker is inside the gated check ``name``; returns that worker's pid."""
        wait_until(f"a worker inside the gated check {name!r}", lambda: self.entered(name))
        return int((self.directory / f"{name}.entered").read_text())

    def release(self, name: str) -> None:
        (self.directory / f"{name}.release").touch()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.body)


def request(
    port: int,
    method: str,
    path: str,
    payload: Any = None,
    *,
    timeout: float = 30.0,
    raw: bytes | None = None,
) -> Reply:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        body = (
            raw if raw is not None else (None if payload is None else json.dumps(payload).encode())
        )
        headers = {"content-type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return Reply(resp.status, resp.read(), {k.lower(): v for k, v in resp.getheaders()})
    finally:
        conn.close()


@dataclass
class Service:
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    def post(
        self, path: str, payload: Any = None, timeout: float = 30.0, raw: bytes | None = None
    ) -> Reply:
        return request(self.port, "POST", path, payload, timeout=timeout, raw=raw)

    def get(self, path: str, timeout: float = 10.0) -> Reply:
        return request(self.port, "GET", path, None, timeout=timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, needle: str) -> None:
        wait_until(f"log line containing {needle!r}", lambda: needle in self.log())

    def metric(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """The value of one sample in /metrics (sum of all matching label sets)."""
        text = self.get("/metrics").body.decode()
        total, found = 0.0, False
        for line in text.splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            series, _, value = line.rpartition(" ")
            metric_name = series.split("{", 1)[0]
            if metric_name != name:
                continue
            if labels and not all(f'{k}="{v}"' in series for k, v in labels.items()):
                continue
            total += float(value)
            found = True
        if not found:
            raise AssertionError(f"metric {name} {labels} not in /metrics")
        return total

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return int(self.proc.returncode)


def start_service(
    env: Mapping[str, str], log_path: Path, wait_ready: bool = True, port: int | None = None
) -> Service:
    """Starts the service on ``port`` (a free one by default: a restart passes the old one's)."""
    port = port or free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("REWARD_")}
    full_env.update({"REWARD_PORT": str(port), "REWARD_LOG_LEVEL": "info", **env})
    log_file = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "miles_reward", "--host", HOST],
        env=full_env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    service = Service(port, proc, log_path)
    if not wait_ready:
        return service
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"service exited with {proc.returncode}:\n{service.log()}")
        try:
            if service.get("/ready", timeout=2).status == 200:
                return service
        except OSError:
            pass
        time.sleep(0.1)
    service.stop()
    raise AssertionError(f"service not ready in {STARTUP_SECONDS}s:\n{service.log()}")


ServiceFactory = Callable[..., Service]


# An expression sympy never finishes comparing: verification of 9^(9^(9^9)) does not return.
HANGING_RESPONSE = "Combining the steps, the answer is $\\boxed{9^{9^{9^{9}}}}$."


def sample(response: str, label: str | None, prompt: str = "Compute the value.") -> dict[str, Any]:
    return {"prompt": prompt, "response": response, "label": label}
