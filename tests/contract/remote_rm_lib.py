"""Helpers for the remote_rm plugin tests and load test: the contract interpreter, the driver that runs
miles' real ``async_rm`` in it, and the reward service's own test helpers (images/reward-service/tests).

(A uniquely named module: every test tree of the repository has its own conftest.py.)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().parent / "remote_rm_driver.py"
PLUGIN = REPO / "charts" / "miles" / "files" / "k8s_remote_rm.py"
CORPUS_SHORT = REPO / "tests" / "bench" / "reward" / "corpus-short.jsonl"
sys.path.insert(0, str(REPO / "images" / "reward-service" / "tests"))

import reward_http  # noqa: E402  (the service's subprocess helpers: start_service, wait_until, request)
from contractlib import contract_python  # noqa: E402

__all__ = [
    "CORPUS_SHORT",
    "DRIVER",
    "PLUGIN",
    "REPO",
    "Driver",
    "contract_python",
    "corpus_rows",
    "refuses_connections",
    "reward_http",
    "run_driver",
    "wait_until",
    "with_service_answers",
]

# The driver imports miles (torch, ray, sglang pieces): its start takes seconds; a run's own limit.
DRIVER_SECONDS = 600.0


def driver_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILES_RM_")}
    # The contract venv is a different interpreter: nothing of this one's path may leak into it.
    env.pop("PYTHONPATH", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


class Driver:
    """remote_rm_driver.py running in the contract venv; progress lines are read as they come."""

    def __init__(self, python: Path, doc: dict[str, Any], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [str(python), str(DRIVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=driver_env(env),
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(doc))
        self.proc.stdin.close()
        self.progress: dict[str, Any] = {}
        self.result: dict[str, Any] | None = None
        self.stderr = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(target=self._read_err, daemon=True)
        self._err_reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue  # not the driver's (a library printing to stdout)
            if not isinstance(msg, dict):
                continue
            if "progress" in msg:
                self.progress = msg["progress"]
            elif "result" in msg:
                self.result = msg["result"]

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def done(self) -> int:
        """How many calls have finished (scored or failed), from the last progress line."""
        return int(self.progress.get("done", 0))

    def wait(self, timeout: float = DRIVER_SECONDS) -> dict[str, Any]:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._reader.join(10)
        self._err_reader.join(10)
        if self.result is None:
            hint = (
                "\n(the contract venv lacks a module miles.rollout.rm_hub imports: add it to "
                "ci/miles-contract/requirements.txt)"
                if "ModuleNotFoundError" in self.stderr
                else ""
            )
            raise AssertionError(
                f"the driver exited {self.proc.returncode} without a result:\n{self.stderr}{hint}"
            )
        return self.result

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def run_driver(
    python: Path, doc: dict[str, Any], env: dict[str, str] | None = None
) -> tuple[dict[str, Any], str]:
    """One driver run to its end: (result, stderr)."""
    driver = Driver(python, doc, env)
    try:
        return driver.wait(), driver.stderr
    finally:
        driver.stop()


def corpus_rows(path: Path = CORPUS_SHORT) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def with_service_answers(port: int, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with ``expected`` set to what the service answers for each, asked one at a time."""
    out = []
    for row in rows:
        payload = {"prompt": row["prompt"], "response": row["response"], "label": row["label"]}
        reply = reward_http.request(port, "POST", "/score", payload)
        assert reply.status == 200, (
            f"the service refused a corpus sample: {reply.status} {reply.body[:200]!r}"
        )
        out.append({**payload, "expected": reply.json()})
    return out


def refuses_connections(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((reward_http.HOST, port)) != 0


def wait_until(what: str, ready: Callable[[], bool], timeout: float = reward_http.WAIT_SECONDS) -> None:
    reward_http.wait_until(what, ready, timeout)
