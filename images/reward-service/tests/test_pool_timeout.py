"""The worker pool's hard timeout, driven directly (real worker processes, real math-verify)."""

from __future__ import annotations

import asyncio
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


async def _time_outcome(intake_seconds: float) -> tuple[Outcome, float]:
    """Submits a hanging check whose request arrived ``intake_seconds`` ago; returns its outcome
    and how long after submission it came."""
    async with one_worker_pool() as pool:
        t0 = time.monotonic()
        futures = pool.try_submit([HANG], received_at=t0 - intake_seconds)
        assert futures is not None
        outcome = await futures[0]
        return outcome, time.monotonic() - t0


def test_hanging_check_is_killed_at_the_timeout_not_a_tick_later() -> None:
    outcome, took = asyncio.run(_time_outcome(0.0))
    assert isinstance(outcome, Failed) and outcome.kind == "timeout", outcome
    assert TIMEOUT <= took < TIMEOUT + 0.25, took


def test_time_spent_reading_the_request_counts_against_the_timeout() -> None:
    """A request that took 1 s to arrive and decode has 0.5 s left for its check."""
    outcome, took = asyncio.run(_time_outcome(1.0))
    assert isinstance(outcome, Failed) and outcome.kind == "timeout", outcome
    assert TIMEOUT - 1.0 <= took < TIMEOUT - 1.0 + 0.25, took


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
