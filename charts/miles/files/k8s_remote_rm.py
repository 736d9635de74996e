"""miles reward function for a reward service on Kubernetes: ``remote_rm`` that survives the service.

miles' built-in ``--rm-type remote_rm`` (miles-rl 0.0.2) sends one POST per sample and has no retry:
any exception or non-2xx answer fails the rollout and with it the training run. A reward service on
Kubernetes answers 503 while it is overloaded or draining for a pod rollout, refuses connections
while a pod restarts, and loses requests when a pod dies; none of that should end a multi-hour run.

Used with ``--custom-rm-path miles_plugins.k8s_remote_rm.remote_rm`` (the chart mounts this file at
``/root/miles/miles_plugins/k8s_remote_rm.py``) and ``--rm-url``. It sends the same JSON as the
built-in (``prompt``, ``response``, ``label``) and retries what is transient until a deadline:

- retried: connection errors (refused, reset, DNS), timeouts, and HTTP 429, 502, 503, 504, with
  capped exponential backoff and jitter, never sooner than the answer's ``Retry-After``;
- never retried: any other status (400, 404, 413, 422 ...), raised at once with the service's body,
  since repeating a request the service rejected cannot change the answer (a 422
  ``unusable_label`` is a data problem the user has to see);
- a 200 whose body is not a finite JSON number raises: a reward is never invented.

Environment (read at each call, so a value set in the job's runtime env applies):
  MILES_RM_RETRY_SECONDS           how long one sample may go without a score before it fails the
                                   rollout (default 900)
  MILES_RM_REQUEST_TIMEOUT_SECONDS one attempt's limit, from sending to the full answer (default 60)
  MILES_RM_MAX_CONNECTIONS         attempts in flight per event loop, read when the loop's session is
                                   made (default 256); further samples wait here, not in the
                                   service's queue

Depends on aiohttp and the standard library only (what miles' own remote_rm uses).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

log = logging.getLogger(__name__)

RETRY_SECONDS_ENV = "MILES_RM_RETRY_SECONDS"
REQUEST_TIMEOUT_ENV = "MILES_RM_REQUEST_TIMEOUT_SECONDS"
MAX_CONNECTIONS_ENV = "MILES_RM_MAX_CONNECTIONS"
DEFAULT_RETRY_SECONDS = 900.0
DEFAULT_REQUEST_TIMEOUT_SECONDS = 60.0
DEFAULT_MAX_CONNECTIONS = 256
CONNECT_TIMEOUT_SECONDS = 10.0
MIN_LAST_ATTEMPT_SECONDS = 1.0

# Statuses that say "not now" rather than "not this request": rate limiting and a gateway or
# service that is overloaded, draining or has lost its backend.
TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})
FIRST_BACKOFF_SECONDS = 0.5
# Low enough that samples resume within seconds of a restarted pod becoming ready (GPUs wait
# meanwhile); 256 samples retrying every 8 s is still only ~30 attempts/s.
MAX_BACKOFF_SECONDS = 8.0
# A crowd of samples told "Retry-After: 1" at once would all come back in the same instant; each
# waits up to this much longer than asked.
RETRY_AFTER_SPREAD = 0.5
# One retry line per this many seconds per process: a pod rollout makes every in-flight sample
# retry at once, and ``ray job logs`` should show that it happened, not hundreds of copies of it.
LOG_EVERY_SECONDS = 1.0
BODY_IN_MESSAGE = 1000  # characters of a service's error body quoted in an exception
LOG_REASON_CHARS = 300


class RemoteRewardError(RuntimeError):
    """The reward service gave no usable score for a sample; the rollout must fail."""


@dataclass
class RetryStats:
    """Counters for this process (all event loops): what a log line summarises, for tests and for a
    person debugging a run from a Python shell."""

    samples: int = 0
    attempts: int = 0
    retries: int = 0
    scored_after_retry: int = 0
    failed: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    _unlogged: int = 0
    _logged_at: float = -math.inf


STATS = RetryStats()


@dataclass
class _LoopClient:
    session: aiohttp.ClientSession
    slots: asyncio.Semaphore


# One session per event loop: an aiohttp session belongs to the loop it was made on, and miles runs
# its rollout on one long-lived loop, so connections are kept alive across samples and steps.
_clients: dict[asyncio.AbstractEventLoop, _LoopClient] = {}


def _env_number(name: str, default: float, low: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= low):
        raise ValueError(f"{name}: expected a number >= {low:g}, found {raw!r}")
    return value


def _client() -> _LoopClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is not None and not client.session.closed:
        return client
    for old in [old for old in _clients if old.is_closed()]:
        del _clients[old]  # its session died with its loop
    limit = int(_env_number(MAX_CONNECTIONS_ENV, DEFAULT_MAX_CONNECTIONS, 1))
    # The semaphore, not the connector, makes samples wait for a free connection, so that the wait
    # is not counted against one attempt's timeout (the connector's wait would be).
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, limit_per_host=limit),
        raise_for_status=False,
    )
    client = _LoopClient(session, asyncio.Semaphore(limit))
    _clients[loop] = client
    return client


async def aclose() -> None:
    """Closes this event loop's session (miles never needs to; a script that ends its loop may)."""
    client = _clients.pop(asyncio.get_running_loop(), None)
    if client is not None:
        await client.session.close()


def _retry_after_seconds(value: str | None) -> float | None:
    """Seconds asked for by a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _backoff_seconds(attempt: int, retry_after: float | None) -> float:
    ceiling = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** (attempt - 1))
    delay = random.uniform(ceiling / 2, ceiling)
    if retry_after is not None:
        delay = max(delay, retry_after * random.uniform(1.0, 1.0 + RETRY_AFTER_SPREAD))
    return delay


def _reward_from(body: bytes, url: str, where: str) -> float:
    try:
        value = json.loads(body)
    except ValueError:
        value = None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RemoteRewardError(
            f"reward service {url} answered 200 without a reward for {where}: expected a JSON "
            f"number, got {body[:BODY_IN_MESSAGE].decode(errors='replace')!r}"
        )
    return float(value)


def _describe(sample: Any) -> str:
    index = getattr(sample, "index", None)
    group = getattr(sample, "group_index", None)
    return f"sample index={index} group_index={group}"


def _note_retry(url: str, where: str, *, attempt: int, reason: str, delay: float, left: float) -> None:
    STATS.retries += 1
    STATS.reasons[reason.split(":", 1)[0]] += 1
    STATS._unlogged += 1
    now = time.monotonic()
    if now - STATS._logged_at < LOG_EVERY_SECONDS:
        return
    log.warning(
        "reward service %s: attempt %d for %s failed (%s); retrying in %.1fs, giving up in %.0fs "
        "(%s); %d retries since the last line, %d in all",
        url,
        attempt,
        where,
        reason[:LOG_REASON_CHARS],
        delay,
        left,
        RETRY_SECONDS_ENV,
        STATS._unlogged,
        STATS.retries,
    )
    STATS._unlogged = 0
    STATS._logged_at = now


async def _score_one(args: Any, sample: Any) -> float:
    url = getattr(args, "rm_url", None)
    if not isinstance(url, str) or not url:
        raise RemoteRewardError(f"--rm-url is not set (found {url!r}): the reward service's /score URL")
    payload = {"prompt": sample.prompt, "response": sample.response, "label": sample.label}
    retry_seconds = _env_number(RETRY_SECONDS_ENV, DEFAULT_RETRY_SECONDS, 0)
    request_timeout = _env_number(REQUEST_TIMEOUT_ENV, DEFAULT_REQUEST_TIMEOUT_SECONDS, 0.001)
    client = _client()
    where = _describe(sample)
    STATS.samples += 1
    started = time.monotonic()
    deadline = started + retry_seconds
    attempt = 0
    while True:
        attempt += 1
        retry_after: float | None = None
        async with client.slots:
            STATS.attempts += 1
            # The last attempt ends near the deadline rather than a whole request timeout past it.
            limit = min(request_timeout, max(deadline - time.monotonic(), MIN_LAST_ATTEMPT_SECONDS))
            timeout = aiohttp.ClientTimeout(total=limit, sock_connect=CONNECT_TIMEOUT_SECONDS)
            try:
                async with client.session.post(url, json=payload, timeout=timeout) as resp:
                    body = await resp.read()
                    status = resp.status
                    retry_after = _retry_after_seconds(resp.headers.get("Retry-After"))
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
                # ServerTimeoutError and the connector's errors are ClientConnectionErrors; a
                # total-timeout expiry surfaces as the built-in TimeoutError.
                status, body = 0, b""
                reason = f"{type(exc).__name__}: {exc}".rstrip(": ")
        if 200 <= status < 300:  # upstream's raise_for_status() lets any 2xx through to .json()
            try:
                reward = _reward_from(body, url, where)
            except RemoteRewardError:
                STATS.failed += 1
                raise
            if attempt > 1:
                STATS.scored_after_retry += 1
            return reward
        text = body[:BODY_IN_MESSAGE].decode(errors="replace")
        if status:
            reason = f"HTTP {status}: {text}" if text else f"HTTP {status}"
            if status not in TRANSIENT_STATUSES:
                STATS.failed += 1
                raise RemoteRewardError(
                    f"reward service {url} answered {status} for {where} (not retried: only "
                    f"connection errors, timeouts and 429/502/503/504 are): {text}"
                )
        left = deadline - time.monotonic()
        if left <= 0:
            STATS.failed += 1
            raise RemoteRewardError(
                f"reward service {url}: no score for {where} after {attempt} attempts in "
                f"{time.monotonic() - started:.1f}s ({RETRY_SECONDS_ENV}={retry_seconds:g}); "
                f"last error: {reason}"
            )
        delay = min(_backoff_seconds(attempt, retry_after), left)
        _note_retry(url, where, attempt=attempt, reason=reason, delay=delay, left=left)
        await asyncio.sleep(delay)


async def remote_rm(args: Any, sample: Any, **kwargs: Any) -> float | list[float]:
    """The reward of ``sample`` from the service at ``args.rm_url``.

    ``sample`` is a list when miles runs with ``--group-rm`` (its batched path hands the custom
    function a whole group); the answer is then the list of rewards, in order.
    """
    if isinstance(sample, list):
        return list(await asyncio.gather(*(_score_one(args, s) for s in sample)))
    return await _score_one(args, sample)
