"""The worker pool's hard timeout, driven directly (real worker processes, real math-verify)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from reward_http import HANGING_RESPONSE

from miles_reward.outcome import Failed, Outcome, Sample, Scored
from miles_reward.pool import PoolSettings, WorkerPool

TIMEOUT = 1.5
HANG = Sample("p", HANGING_RESPONSE, "3")


@asynccontextmanager
async def one_worker_pool() -> AsyncIterator[WorkerPool]:
    pool = WorkerPool(
        PoolSettings("math_verify", workers=1, max_inflight=8, timeout_seconds=TIMEOUT)
    )
    await pool.start()
    try:
        yield pool
    finally:
        await pool.close(2.0)


class _TimeoutNoticed(logging.Handler):
    """Notes the moment the pool's watchdog declares a check timed out (it logs that as it acts)."""

    def __init__(self) -> None:
        super().__init__()
        self.at: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "timeout" in record.getMessage():
            self.at.append(time.monotonic())


async def _time_outcome(intake_seconds: float) -> tuple[Outcome, float, float]:
    """Submits a hanging check whose request arrived ``intake_seconds`` ago. Returns its outcome,
    how long after submission it came, and how much later the watchdog acted than a timer due at
    the same deadline in the same event loop: on a machine too busy to run the loop on time both
    are late alike, so only lateness of the watchdog's own (a coarse tick) remains."""
    noticed = _TimeoutNoticed()
    pool_log = logging.getLogger("miles_reward.pool")
    pool_log.addHandler(noticed)
    loop = asyncio.get_running_loop()
    reference: list[float] = []
    try:
        async with one_worker_pool() as pool:
            t0 = time.monotonic()
            futures = pool.try_submit([HANG], received_at=t0 - intake_seconds)
            assert futures is not None
            loop.call_at(t0 - intake_seconds + TIMEOUT, lambda: reference.append(time.monotonic()))
            outcome = await futures[0]
            took = time.monotonic() - t0
    finally:
        pool_log.removeHandler(noticed)
    assert noticed.at and reference, (noticed.at, reference)
    return outcome, took, noticed.at[0] - reference[0]


def test_hanging_check_is_killed_at_the_timeout_not_a_tick_later() -> None:
    outcome, took, late = asyncio.run(_time_outcome(0.0))
    assert isinstance(outcome, Failed) and outcome.kind == "timeout", outcome
    assert took >= TIMEOUT, took
    assert late < 0.25, f"watchdog acted {late:.3f}s after a timer due at the same deadline"


def test_time_spent_reading_the_request_counts_against_the_timeout() -> None:
    """A request that took 1 s to arrive and decode has 0.5 s left for its check."""
    outcome, took, late = asyncio.run(_time_outcome(1.0))
    assert isinstance(outcome, Failed) and outcome.kind == "timeout", outcome
    assert took >= TIMEOUT - 1.0, took
    assert late < 0.25, f"watchdog acted {late:.3f}s after a timer due at the same deadline"


async def _queued_behind_a_hang() -> list[Outcome]:
    """One worker, a hang, and a quick sample queued behind it: waiting for a worker is not
    charged to the quick sample, which is scored after the hang's worker is replaced."""
    async with one_worker_pool() as pool:
        futures = pool.try_submit([HANG, Sample("p", "so $\\boxed{4}$", "4")])
        assert futures is not None
        return list(await asyncio.gather(*futures))


def test_waiting_for_a_worker_does_not_count_against_the_timeout() -> None:
    hung, quick = asyncio.run(_queued_behind_a_hang())
    assert isinstance(hung, Failed) and hung.kind == "timeout"
    assert quick == Scored(1.0)
