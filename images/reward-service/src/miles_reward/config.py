"""Service configuration, read from environment variables and validated once at start.

Every variable is checked before anything else starts; a bad value stops the process with a message
that names the variable, what was expected and what was found (see ``ConfigError``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Backend = Literal["math_verify", "reward_model"]
LogLevel = Literal["debug", "info", "warning", "error"]
# Which part of a response math_verify checks; see math_backend.py.
AnswerMode = Literal["anchored", "last_expression"]

BACKENDS: tuple[Backend, ...] = ("math_verify", "reward_model")
LOG_LEVELS: tuple[LogLevel, ...] = ("debug", "info", "warning", "error")
ANSWER_MODES: tuple[AnswerMode, ...] = ("anchored", "last_expression")  # the default first

DEFAULT_PORT = 8080
DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_MAX_INFLIGHT = 512


class ConfigError(ValueError):
    """A configuration variable has an unusable value."""

    def __init__(self, name: str, expected: str, found: str | None) -> None:
        shown = "<unset>" if found is None else repr(found)
        super().__init__(f"{name}: expected {expected}, found {shown}")
        self.name = name


@dataclass(frozen=True)
class Config:
    port: int = DEFAULT_PORT
    host: str = "0.0.0.0"  # a service inside a pod listens on all interfaces
    backend: Backend = "math_verify"
    workers: int = 1
    max_inflight: int = DEFAULT_MAX_INFLIGHT
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    model_path: Path | None = None
    log_level: LogLevel = "info"
    math_answer: AnswerMode = "anchored"

    @property
    def drain_queue_after_seconds(self) -> float:
        """After SIGTERM, samples still queued (not started) this long are answered 503."""
        return self.timeout_seconds

    @property
    def shutdown_grace_seconds(self) -> float:
        """After SIGTERM, the longest wait for in-flight requests: the queue drain, then one check
        that started just before it (bounded by the timeout), plus a margin. The pod's
        terminationGracePeriodSeconds must exceed this (2 x REWARD_TIMEOUT_SECONDS + 2)."""
        return self.drain_queue_after_seconds + self.timeout_seconds + 2.0


def _int(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    expected = f"an integer from {low} to {high}"
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        raise ConfigError(name, expected, raw) from None
    if not low <= value <= high:
        raise ConfigError(name, expected, raw)
    return value


def _float(env: Mapping[str, str], name: str, default: float, high: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    expected = f"a number of seconds > 0 and <= {high:g}"
    try:
        value = float(raw.strip())
    except ValueError:
        raise ConfigError(name, expected, raw) from None
    if not math.isfinite(value) or value <= 0 or value > high:
        raise ConfigError(name, expected, raw)
    return value


def cpu_limit(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """CPUs this process may use: the cgroup's CPU quota (a pod's CPU limit) when one is set,
    else the CPU affinity set. A pod on a 96-core node with a 2-CPU limit gets 2, not 96."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count() or 1
    quota: float | None = None
    try:  # cgroup v2: "<quota> <period>" or "max <period>"
        raw_quota, raw_period = (cgroup_root / "cpu.max").read_text().split()[:2]
        if raw_quota != "max":
            quota = int(raw_quota) / int(raw_period)
    except (OSError, ValueError):
        try:  # cgroup v1
            q = int((cgroup_root / "cpu" / "cpu.cfs_quota_us").read_text())
            period = int((cgroup_root / "cpu" / "cpu.cfs_period_us").read_text())
            if q > 0 and period > 0:
                quota = q / period
        except (OSError, ValueError):
            pass
    if quota is not None and quota > 0:
        usable = min(usable, max(1, math.ceil(quota)))
    return max(1, usable)


def default_workers(backend: Backend) -> int:
    """math_verify: two workers per CPU. Check costs are heavy-tailed (most well under a
    millisecond, a few symbolic comparisons tens to hundreds), and with more processes than CPUs
    the kernel time-slices a long check instead of letting short ones queue behind it (measured:
    p99 at 80% load fell from over a second to tens of milliseconds; see docs/reward-service.md).
    reward_model: one per CPU (each worker holds the model and runs single-threaded)."""
    cpus = cpu_limit()
    return 2 * cpus if backend == "math_verify" else cpus


def load(env: Mapping[str, str] | None = None) -> Config:
    """Builds the configuration from ``env`` (default: the process environment)."""
    env = os.environ if env is None else env

    backend_raw = env.get("REWARD_BACKEND", "math_verify").strip()
    if backend_raw not in BACKENDS:
        raise ConfigError("REWARD_BACKEND", " or ".join(BACKENDS), env.get("REWARD_BACKEND"))
    backend: Backend = "math_verify" if backend_raw == "math_verify" else "reward_model"

    level_raw = env.get("REWARD_LOG_LEVEL", "info").strip().lower()
    if level_raw not in LOG_LEVELS:
        raise ConfigError("REWARD_LOG_LEVEL", "|".join(LOG_LEVELS), env.get("REWARD_LOG_LEVEL"))
    log_level: LogLevel = next(level for level in LOG_LEVELS if level == level_raw)

    answer_raw = env.get("REWARD_MATH_ANSWER", ANSWER_MODES[0]).strip()
    if answer_raw not in ANSWER_MODES:
        raise ConfigError(
            "REWARD_MATH_ANSWER", " or ".join(ANSWER_MODES), env.get("REWARD_MATH_ANSWER")
        )
    math_answer = next(mode for mode in ANSWER_MODES if mode == answer_raw)

    port = _int(env, "REWARD_PORT", DEFAULT_PORT, 1, 65535)
    workers = _int(env, "REWARD_WORKERS", default_workers(backend), 1, 256)
    max_inflight = _int(env, "REWARD_MAX_INFLIGHT", DEFAULT_MAX_INFLIGHT, 1, 1_000_000)
    timeout_seconds = _float(env, "REWARD_TIMEOUT_SECONDS", DEFAULT_TIMEOUT_SECONDS, 3600.0)

    model_path: Path | None = None
    raw_path = env.get("REWARD_MODEL_PATH", "").strip()
    if backend == "reward_model":
        expected = "a directory holding a Hugging Face sequence-classification model (config.json)"
        if not raw_path:
            raise ConfigError("REWARD_MODEL_PATH", expected, env.get("REWARD_MODEL_PATH"))
        model_path = Path(raw_path)
        if not (model_path / "config.json").is_file():
            raise ConfigError("REWARD_MODEL_PATH", expected, raw_path)

    return Config(
        port=port,
        backend=backend,
        workers=workers,
        max_inflight=max_inflight,
        timeout_seconds=timeout_seconds,
        model_path=model_path,
        log_level=log_level,
        math_answer=math_answer,
    )
