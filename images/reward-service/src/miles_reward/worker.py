"""The body of one scoring worker process.

Protocol over two one-way pipes (work in, results out): the worker sends ``("ready", pid)`` once
its backend is loaded (or ``("load_failed", detail)`` and exits); then it receives lists of samples
and answers each sample with one ``Outcome``, in order, as soon as it is scored, so the parent
always knows which sample is being worked on. ``None`` asks it to exit.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

from miles_reward.config import AnswerMode, Backend
from miles_reward.outcome import Failed, Outcome, Sample

Scorer = Callable[[Sample], Outcome]

# Workers run at a lower CPU priority than the HTTP process, so that under overload the event loop
# still gets the CPU it needs to answer 503s and /health promptly instead of queueing behind
# CPU-bound checks (measured: /health took up to 4.9 s at 2x peak without it).
WORKER_NICE = 5


def load_scorer(backend: Backend, model_path: Path | None, math_answer: AnswerMode) -> Scorer:
    """Imports and warms the backend; the returned function scores one sample in this process."""
    if backend == "math_verify":
        from miles_reward import math_backend

        return math_backend.make_scorer(math_answer)
    from miles_reward import model_backend

    if model_path is None:
        raise ValueError("reward_model backend needs a model path")
    model_backend.load(model_path)
    model_backend.warm_up()
    return model_backend.score


def score_safely(scorer: Scorer, sample: Sample) -> Outcome:
    try:
        return scorer(sample)
    except Exception as exc:  # a backend bug must become a 503, never a score
        return Failed("internal_error", f"{type(exc).__name__}: {exc}"[:500])


def worker_main(
    work: Connection,
    results: Connection,
    backend: Backend,
    model_path: Path | None,
    math_answer: AnswerMode,
) -> None:
    # The parent coordinates shutdown; a terminal's Ctrl-C must not kill workers mid-sample.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICE)
    try:
        scorer = load_scorer(backend, model_path, math_answer)
    except BaseException as exc:
        results.send(("load_failed", f"{type(exc).__name__}: {exc}"[:2000]))
        results.close()
        return
    results.send(("ready", os.getpid()))
    while True:
        try:
            batch: list[Sample] | None = work.recv()
        except (EOFError, OSError):  # parent went away
            return
        if batch is None:
            return
        for sample in batch:
            results.send(score_safely(scorer, sample))
