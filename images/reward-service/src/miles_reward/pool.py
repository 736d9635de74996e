"""A process pool for scoring with a hard per-sample timeout and bounded admission.

Why not ``concurrent.futures.ProcessPoolExecutor``: it cannot kill one task that hangs (a sympy
expression such as 9^(9^(9^9)) never returns) without breaking the whole executor. Here each
worker is a process with its own pipe; the parent knows which sample each worker is on and since
when, and a watchdog (woken at the next deadline, not on a coarse tick) kills a worker that runs
past the timeout, answers that one sample with a ``timeout`` failure, puts the worker's
not-yet-started samples back at the head of the queue and starts a replacement.

The time it took to read and decode a sample's request counts against its timeout (so a huge body
still gets its 503 within the timeout of being sent); the time it waited for a free worker does not
(a large batch on a slow backend must not time out in the queue).

Admission is bounded: ``try_submit`` refuses (returns ``None``) when the samples would push the
number admitted-and-unanswered past ``max_inflight``, so the queue can never grow without limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import multiprocessing as mp
import pickle
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from miles_reward.config import AnswerMode, Backend
from miles_reward.outcome import Failed, FailureKind, Outcome, Sample, Scored
from miles_reward.worker import worker_main

log = logging.getLogger("miles_reward.pool")

# Samples go to workers one at a time: sending 16 at once stalled 7 requests for a whole 2 s timeout
# behind one hanging check (measured).
# Label affinity: a sample goes preferably to the worker that last took a sample of the same label
# (a GRPO group's n responses share a label and mostly the same answer, and math-verify's parse
# caches hold only the last 20 answers: measured 1.34 ms CPU per check in corpus order against
# 1.86 ms shuffled). Look this far into the queue for such a sample.
AFFINITY_WINDOW = 32
AFFINITY_LABELS = 4096  # labels remembered, with the worker that last took each
AFFINITY_MAX_WAIT_SECONDS = 0.01  # the head of the queue is never passed over for longer
# While work is queued, each worker also holds the next sample in its pipe, so it never idles
# waiting for the event loop (which matters when the CPUs are contended). If the current check
# runs longer than HEDGE_AFTER_SECONDS, the waiting sample is queued again for another worker.
PREFETCH = 2
# Not shorter: under saturation a hedged copy is duplicate work (measured: at 0.25 s, hedging on
# contended CPUs halved the throughput at 2x peak); real checks rarely run over a second.
HEDGE_AFTER_SECONDS = 1.0
# Larger payloads are written from a thread: the worker reads them while the loop keeps serving.
INLINE_SEND_BYTES = 64 * 1024
START_FAILURES_BEFORE_BROKEN = 3
UNREADY_AFTER_CONSECUTIVE_FAILURES = 5
UNREADY_COOLDOWN_SECONDS = 30.0
WATCH_TICK_SECONDS = 0.05


@dataclass
class _Job:
    sample: Sample
    future: asyncio.Future[Outcome]
    queued_at: float
    budget: float  # seconds the check may run: the timeout less the time spent reading the request
    hedged: bool = False


@dataclass
class _Worker:
    wid: int
    proc: BaseProcess
    conn: Connection  # results from the worker (registered with the event loop)
    tx: Connection  # work to the worker (blocking; never registered with the loop)
    ready: bool = False
    dead: bool = False
    spawned_at: float = field(default_factory=time.monotonic)
    head_started: float = 0.0
    assigned: deque[_Job] = field(default_factory=deque)
    sending: bool = False  # a large payload is being written from a thread: send nothing else


@dataclass(frozen=True)
class PoolSettings:
    backend: Backend
    workers: int
    max_inflight: int
    timeout_seconds: float
    model_path: Path | None = None
    math_answer: AnswerMode = "anchored"
    startup_timeout_seconds: float = 300.0


class PoolStartError(RuntimeError):
    pass


class WorkerPool:
    def __init__(
        self,
        settings: PoolSettings,
        on_restart: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self._on_restart = on_restart or (lambda _reason: None)
        self._ctx = mp.get_context("forkserver")
        if settings.backend == "math_verify":
            # Replacement workers fork from a server that already imported sympy and math-verify.
            self._ctx.set_forkserver_preload(["miles_reward.preload_math", "miles_reward.worker"])
        self._workers: list[_Worker] = []
        self._queue: deque[_Job] = deque()
        self._inflight = 0
        self._next_id = 0
        self._closing = False
        self._broken: str | None = None
        self._start_failures = 0
        self._consecutive_failures = 0
        self._last_failure = 0.0
        self._watchdog: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._spawning = 0
        self._label_owner: OrderedDict[str, int] = OrderedDict()  # label -> worker id

    # ----------------------------------------------------------------- state
    @property
    def inflight(self) -> int:
        """Samples admitted and not yet answered (queued or being scored)."""
        return self._inflight

    @property
    def ready_workers(self) -> int:
        return sum(1 for w in self._workers if w.ready and not w.dead)

    @property
    def broken(self) -> str | None:
        """Why the pool can no longer score (workers fail to start), or None."""
        return self._broken

    def readiness(self) -> tuple[bool, str]:
        if self._closing:
            return False, "shutting down"
        if self._broken:
            return False, f"pool broken: {self._broken}"
        recent = time.monotonic() - self._last_failure < UNREADY_COOLDOWN_SECONDS
        if self._consecutive_failures >= UNREADY_AFTER_CONSECUTIVE_FAILURES and recent:
            return False, (
                f"{self._consecutive_failures} consecutive failed checks, last "
                f"{time.monotonic() - self._last_failure:.1f}s ago"
            )
        if self._inflight >= self.settings.max_inflight:
            return False, f"at capacity ({self._inflight}/{self.settings.max_inflight} in flight)"
        if not self._workers and not self._spawning:
            return False, "no worker running"
        return True, "ok"

    # ------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        for _ in range(self.settings.workers):
            await self._spawn()
        deadline = time.monotonic() + self.settings.startup_timeout_seconds
        while self.ready_workers < self.settings.workers:
            if self._broken:
                raise PoolStartError(self._broken)
            if time.monotonic() > deadline:
                raise PoolStartError(
                    f"workers not ready after {self.settings.startup_timeout_seconds:g}s"
                )
            await asyncio.sleep(0.02)
        self._watchdog = asyncio.create_task(self._watch(), name="reward-pool-watchdog")

    async def close(self, grace_seconds: float = 5.0) -> None:
        self._closing = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        while self._queue:
            self._resolve(self._queue.popleft(), Failed("shutting_down", "service is stopping"))
        for w in list(self._workers):
            with contextlib.suppress(OSError, ValueError):
                w.tx.send(None)
        deadline = time.monotonic() + grace_seconds
        for w in list(self._workers):
            await asyncio.to_thread(w.proc.join, max(0.0, deadline - time.monotonic()))
        for w in list(self._workers):
            self._retire(w, Failed("shutting_down", "service is stopping"), requeue=False)

    def drain_queue(self) -> None:
        """Answers every queued (not started) sample 503 ``shutting_down``; stops admitting."""
        self._closing = True
        answered = 0
        while self._queue:
            job = self._queue.popleft()
            answered += not job.future.done()
            self._resolve(job, Failed("shutting_down", "service is stopping"))
        log.info(
            "drain window over: %d queued sample(s) answered 503; %d already with a worker finish",
            answered,
            sum(len(w.assigned) for w in self._workers if not w.dead),
        )

    # ------------------------------------------------------------ submission
    def try_submit(
        self, samples: Sequence[Sample], received_at: float | None = None
    ) -> list[asyncio.Future[Outcome]] | None:
        """Futures for ``samples``, or None when admitting them would exceed max_inflight.

        ``received_at`` (``time.monotonic()`` when the request arrived; default now): the time
        since then, spent reading and decoding the request, is taken off the samples' timeout."""
        if self._closing or self._broken:
            return None
        if self._inflight + len(samples) > self.settings.max_inflight:
            return None
        loop = self._loop or asyncio.get_running_loop()
        now = time.monotonic()
        intake = 0.0 if received_at is None else max(0.0, now - received_at)
        budget = self.settings.timeout_seconds - intake
        futures: list[asyncio.Future[Outcome]] = []
        for sample in samples:
            fut: asyncio.Future[Outcome] = loop.create_future()
            self._queue.append(_Job(sample, fut, now, budget))
            futures.append(fut)
        self._inflight += len(samples)
        self._dispatch()
        return futures

    # -------------------------------------------------------------- internals
    def _resolve(self, job: _Job, outcome: Outcome) -> None:
        if job.future.done():  # a hedged copy answered first
            return
        self._inflight -= 1
        if isinstance(outcome, Scored):
            self._consecutive_failures = 0
        elif outcome.kind in ("timeout", "worker_died", "internal_error"):
            self._consecutive_failures += 1
            self._last_failure = time.monotonic()
        job.future.set_result(outcome)

    def _dispatch(self) -> None:
        if not self._queue:
            return
        ready = [w for w in self._workers if w.ready and not w.dead]
        now = time.monotonic()
        idle = [w for w in ready if not w.assigned and not w.sending]
        while idle and self._queue:  # idle workers first; the head's label owner before others
            owner = self._label_owner.get(self._queue[0].sample.label or "")
            w = next((w for w in idle if w.wid == owner), idle[0])
            idle.remove(w)
            self._give(w, now)
        for w in ready:  # then, with work still waiting, keep the next sample in each pipe
            if not self._queue:
                return
            if len(w.assigned) < PREFETCH and not w.sending:
                self._give(w, now)

    def _give(self, w: _Worker, now: float) -> None:
        job = self._take_for(w)
        if job is None:
            return
        w.assigned.append(job)
        if len(w.assigned) == 1:
            w.head_started = now
        label = job.sample.label
        if label is not None:
            self._label_owner[label] = w.wid
            self._label_owner.move_to_end(label)
            if len(self._label_owner) > AFFINITY_LABELS:
                self._label_owner.popitem(last=False)
        payload = _dumps([job.sample])
        if len(payload) <= INLINE_SEND_BYTES:
            self._send(w, payload)
        else:
            # Writes to one pipe must not interleave: until this one is done, ``w`` gets nothing.
            assert self._loop is not None
            w.sending = True
            self._loop.create_task(self._send_in_thread(w, payload))

    def _take_for(self, w: _Worker) -> _Job | None:
        """The oldest of the first AFFINITY_WINDOW queued samples whose label ``w`` took last,
        else the head of the queue."""
        while self._queue and self._queue[0].future.done():
            self._queue.popleft()  # answered through a hedged copy
        if not self._queue:
            return None
        head = self._queue[0]
        if time.monotonic() - head.queued_at < AFFINITY_MAX_WAIT_SECONDS:
            owners = self._label_owner
            for i, job in enumerate(itertools.islice(self._queue, AFFINITY_WINDOW)):
                if owners.get(job.sample.label or "") == w.wid and not job.future.done():
                    if i == 0:
                        return self._queue.popleft()
                    del self._queue[i]
                    return job
        return self._queue.popleft()

    def _send(self, w: _Worker, payload: bytes) -> None:
        try:
            w.tx.send_bytes(payload)
        except (OSError, ValueError) as exc:
            self._worker_lost(w, "worker_died", f"could not send work to the worker: {exc!r}")

    async def _send_in_thread(self, w: _Worker, payload: bytes) -> None:
        try:
            await asyncio.to_thread(w.tx.send_bytes, payload)
        except (OSError, ValueError) as exc:
            if not w.dead:
                self._worker_lost(w, "worker_died", f"could not send work to the worker: {exc!r}")
            return
        finally:
            w.sending = False
        self._dispatch()

    async def _spawn(self) -> None:
        # Two one-way pipes: the event loop makes the fd it watches non-blocking, and a large
        # write must not fail half-way on a non-blocking fd.
        work_rx, work_tx = mp.Pipe(duplex=False)
        result_rx, result_tx = mp.Pipe(duplex=False)
        wid = self._next_id
        self._next_id += 1
        proc = self._ctx.Process(
            target=worker_main,
            args=(
                work_rx,
                result_tx,
                self.settings.backend,
                self.settings.model_path,
                self.settings.math_answer,
            ),
            name=f"reward-worker-{wid}",
            daemon=True,
        )
        self._spawning += 1
        try:
            # Starting talks to the fork server (which may be starting itself): keep the loop free.
            await asyncio.to_thread(proc.start)
        finally:
            self._spawning -= 1
        work_rx.close()
        result_tx.close()
        worker = _Worker(wid=wid, proc=proc, conn=result_rx, tx=work_tx)
        self._workers.append(worker)
        assert self._loop is not None
        self._loop.add_reader(result_rx.fileno(), self._on_readable, worker)
        log.debug("started worker %d (pid %s)", wid, proc.pid)

    def _on_readable(self, w: _Worker) -> None:
        try:
            while not w.dead and w.conn.poll():
                self._on_message(w, w.conn.recv())
        except (EOFError, OSError):
            code = w.proc.exitcode
            if code is None:
                w.proc.join(0.5)
                code = w.proc.exitcode
            self._worker_lost(w, "worker_died", f"worker process exited (exit code {code})")

    def _on_message(self, w: _Worker, msg: Any) -> None:
        if isinstance(msg, Scored | Failed):
            job = w.assigned.popleft()
            w.head_started = time.monotonic()
            self._resolve(job, msg)
            self._dispatch()
            return
        tag, value = msg
        if tag == "ready":
            w.ready = True
            self._start_failures = 0
            log.debug("worker %d ready (pid %s)", w.wid, value)
            self._dispatch()
        elif tag == "load_failed":
            log.error(
                "worker %d could not load the %s backend: %s", w.wid, self.settings.backend, value
            )
            self._start_failures += 1
            if self._start_failures >= START_FAILURES_BEFORE_BROKEN:
                self._broken = f"workers fail to load the backend: {value}"
            self._worker_lost(w, "internal_error", f"worker could not load backend: {value}")

    def _worker_lost(self, w: _Worker, kind: FailureKind, detail: str) -> None:
        if w.dead:
            return
        if self._closing and not w.assigned:  # an idle worker leaving as asked at shutdown
            log.debug("worker %d stopped", w.wid)
            self._retire(w, Failed("shutting_down", "service is stopping"), requeue=False)
            return
        if not w.ready and kind == "worker_died":
            self._start_failures += 1
            if self._start_failures >= START_FAILURES_BEFORE_BROKEN:
                self._broken = f"workers exit before becoming ready ({detail})"
        log.warning("worker %d lost: %s: %s", w.wid, kind, detail)
        self._retire(w, Failed(kind, detail), requeue=True)
        self._on_restart(kind)
        if self._broken:
            while self._queue:
                self._resolve(self._queue.popleft(), Failed("internal_error", self._broken))
            return
        if not self._closing and self._loop is not None:
            self._loop.create_task(self._spawn())

    def _retire(self, w: _Worker, head_outcome: Failed, requeue: bool) -> None:
        """Stops ``w`` for good: its current sample gets ``head_outcome``; the rest go back."""
        w.dead = True
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(w.conn.fileno())
        with contextlib.suppress(OSError):
            w.conn.close()
        with contextlib.suppress(OSError):
            w.tx.close()
        if w.proc.is_alive():
            w.proc.kill()
        w.proc.join(1.0)
        if w.assigned:
            self._resolve(w.assigned.popleft(), head_outcome)
        rest = [job for job in w.assigned if not job.future.done()]
        w.assigned.clear()
        if requeue and not self._closing:
            self._queue.extendleft(reversed(rest))
        else:
            for job in rest:
                self._resolve(job, head_outcome)
        if w in self._workers:
            self._workers.remove(w)
        self._dispatch()

    async def _watch(self) -> None:
        limit = self.settings.timeout_seconds
        hedge_after = min(HEDGE_AFTER_SECONDS, limit / 4)
        while True:
            await asyncio.sleep(self._until_next_deadline())
            now = time.monotonic()
            for w in list(self._workers):
                if w.dead:
                    continue
                if w.assigned and now >= _check_deadline(w):
                    self._worker_lost(
                        w,
                        "timeout",
                        f"check ran past REWARD_TIMEOUT_SECONDS={limit:g}s; "
                        "its worker was killed and replaced",
                    )
                elif not w.ready and now - w.spawned_at > self.settings.startup_timeout_seconds:
                    self._worker_lost(w, "worker_died", "worker did not become ready in time")
                elif len(w.assigned) > 1 and now - w.head_started > hedge_after:
                    self._hedge(w)
            if self._queue:
                self._dispatch()

    def _until_next_deadline(self) -> float:
        """Seconds to sleep: until the earliest moment a running check runs out of time, and at
        most WATCH_TICK_SECONDS (hedging and start-up checks need no more precision than that)."""
        now = time.monotonic()
        soonest = now + WATCH_TICK_SECONDS
        for w in self._workers:
            if w.assigned and not w.dead:
                soonest = min(soonest, _check_deadline(w))
        return max(0.0, soonest - now)

    def _hedge(self, w: _Worker) -> None:
        """``w`` is stuck on a slow check with samples waiting in its pipe: queue copies of them
        at the head so another worker scores them now; whichever answer comes first is used."""
        for job in reversed(list(w.assigned)[1:]):
            if not job.hedged and not job.future.done():
                job.hedged = True
                self._queue.appendleft(job)


def _check_deadline(w: _Worker) -> float:
    """When the check ``w`` is running (the head of ``w.assigned``) runs out of time."""
    return w.head_started + w.assigned[0].budget


def _dumps(obj: object) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
