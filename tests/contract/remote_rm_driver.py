"""Scores samples through miles' real reward entry point; runs inside the contract venv (miles-rl).

Reads one JSON document on stdin:
  rm_url        the reward service's /score URL (``--rm-url``)
  mode          "plugin": ``custom_rm_path`` = the chart's k8s_remote_rm.remote_rm (what the chart
                passes as ``--custom-rm-path``); "builtin": ``custom_rm_path`` None and ``rm_type``
                remote_rm (upstream's own client); "batched": the plugin through
                ``batched_async_rm`` (how miles calls it with ``--group-rm``: a list per call)
  samples       [{"prompt", "response", "label", "expected"?}]: cycled through ``count`` calls
  count         calls in all (closed loop); ignored when ``rate`` > 0
  concurrency   calls in flight at most (a rollout's rollout_batch_size x n_samples_per_prompt)
  rate          > 0: open loop, a call due every 1/rate s for ``duration`` s of wall time (waiting
                for a free slot when ``concurrency`` are in flight, as a rollout with every sample
                out would; what is still due at the end is reported as the backlog, not sent)
  progress_every  seconds between progress lines (0: none)

Writes JSON lines to stdout: ``{"progress": {...}}`` while running, then ``{"result": {...}}`` with
sent, ok, failed, wrong (a reward that differs from ``expected``), the errors, latencies of the
scored calls, and the plugin's retry counters. Warnings (the plugin's retry lines) go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

# The plugin is imported from the chart's files/ directory: no __pycache__ may land in the chart.
sys.dont_write_bytecode = True
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "charts" / "miles" / "files"))

from miles.rollout.rm_hub import async_rm, batched_async_rm  # noqa: E402
from miles.utils.types import Sample  # noqa: E402

PLUGIN_PATH = "k8s_remote_rm.remote_rm"
GROUP = 8  # samples per group_index, as n_samples_per_prompt would make them


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


class Run:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.mode: str = doc["mode"]
        self.args = argparse.Namespace(
            rm_url=doc["rm_url"],
            rm_type="remote_rm",
            custom_rm_path=None if self.mode == "builtin" else PLUGIN_PATH,
            group_rm=self.mode == "batched",
        )
        self.samples: list[dict[str, Any]] = doc["samples"]
        self.concurrency = int(doc.get("concurrency", 1))
        self.sent = self.ok = self.failed = self.wrong = 0
        self.latencies: list[float] = []
        self.failed_after: list[float] = []
        self.errors: Counter[str] = Counter()
        self.examples: list[str] = []
        self.wrong_examples: list[str] = []
        self.rewards: list[Any] = []
        self.max_lag = 0.0

    def sample(self, i: int) -> tuple[Any, Any]:
        row = self.samples[i % len(self.samples)]
        sample = Sample(
            index=i,
            group_index=i // GROUP,
            prompt=row["prompt"],
            response=row["response"],
            label=row["label"],
        )
        return sample, row.get("expected")

    def record(self, i: int, reward: Any, expected: Any, took: float) -> None:
        self.ok += 1
        self.latencies.append(took)
        if len(self.rewards) < 1000:
            self.rewards.append([i, reward])
        if expected is not None and reward != expected:
            self.wrong += 1
            if len(self.wrong_examples) < 5:
                self.wrong_examples.append(f"call {i}: got {reward!r}, expected {expected!r}")

    def record_failure(self, exc: BaseException, took: float) -> None:
        self.failed += 1
        self.failed_after.append(took)
        text = f"{type(exc).__name__}: {exc}"
        self.errors[text[:160]] += 1
        if len(self.examples) < 5:
            self.examples.append(text[:2000])

    async def one(self, i: int) -> None:
        sample, expected = self.sample(i)
        t0 = time.perf_counter()
        try:
            reward = await async_rm(self.args, sample)
        except Exception as exc:  # any exception is what fails a miles rollout
            self.record_failure(exc, time.perf_counter() - t0)
            return
        self.record(i, reward, expected, time.perf_counter() - t0)

    async def group(self, first: int) -> None:
        pairs = [self.sample(first + k) for k in range(GROUP)]
        t0 = time.perf_counter()
        try:
            rewards = await batched_async_rm(self.args, [s for s, _ in pairs])
        except Exception as exc:
            self.record_failure(exc, time.perf_counter() - t0)
            return
        took = time.perf_counter() - t0
        for k, ((_, expected), reward) in enumerate(zip(pairs, rewards, strict=True)):
            self.record(first + k, reward, expected, took)

    def progress(self, started: float) -> dict[str, Any]:
        return {
            "elapsed_s": round(time.perf_counter() - started, 2),
            "sent": self.sent,
            "done": self.ok + self.failed,
            "ok": self.ok,
            "failed": self.failed,
        }


async def drive(doc: dict[str, Any]) -> dict[str, Any]:
    run = Run(doc)
    rate = float(doc.get("rate", 0))
    duration = float(doc.get("duration", 0))
    count = int(doc.get("count", len(run.samples)))
    every = float(doc.get("progress_every", 0))
    slots = asyncio.Semaphore(run.concurrency)
    tasks: set[asyncio.Task[None]] = set()
    started = time.perf_counter()

    async def launch(coro_of: Any, i: int) -> None:
        try:
            await coro_of(i)
        finally:
            slots.release()

    async def reporter() -> None:
        while True:
            await asyncio.sleep(every)
            print(json.dumps({"progress": run.progress(started)}), flush=True)

    report_task = asyncio.create_task(reporter()) if every > 0 else None
    step = GROUP if run.mode == "batched" else 1
    call = run.group if run.mode == "batched" else run.one
    i = 0
    while True:
        if rate > 0:
            due = started + i / rate
            # The offer ends at ``duration`` of wall time: what fell due and waited for a slot until
            # then is the client's backlog (reported), not sent.
            if due - started >= duration or time.perf_counter() - started >= duration:
                break
            now = time.perf_counter()
            if due > now:
                await asyncio.sleep(due - now)
        elif i >= count:
            break
        await slots.acquire()
        if rate > 0:
            run.max_lag = max(run.max_lag, time.perf_counter() - (started + i / rate))
        run.sent += step
        task = asyncio.create_task(launch(call, i))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        i += step
    sending_ended = time.perf_counter() - started
    backlog = max(0, math.ceil(min(sending_ended, duration) * rate) - i) if rate > 0 else 0
    while tasks:
        await asyncio.gather(*list(tasks))
    elapsed = time.perf_counter() - started
    if report_task is not None:
        report_task.cancel()

    plugin = sys.modules.get("k8s_remote_rm")
    stats: dict[str, Any] | None = None
    if plugin is not None:
        s = plugin.STATS
        stats = {
            "samples": s.samples,
            "attempts": s.attempts,
            "retries": s.retries,
            "scored_after_retry": s.scored_after_retry,
            "failed": s.failed,
            "reasons": dict(s.reasons),
        }
        await plugin.aclose()
    lat_ms = [x * 1e3 for x in run.latencies]
    return {
        "mode": run.mode,
        "sent": run.sent,
        "ok": run.ok,
        "failed": run.failed,
        "wrong": run.wrong,
        "wrong_examples": run.wrong_examples,
        "errors": dict(run.errors.most_common(10)),
        "error_examples": run.examples,
        "failed_after_s": {
            "min": round(min(run.failed_after), 3) if run.failed_after else None,
            "max": round(max(run.failed_after), 3) if run.failed_after else None,
        },
        "latency_ms": {
            q: (round(v, 2) if (v := pct(lat_ms, p)) is not None else None)
            for q, p in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))
        },
        "elapsed_s": round(elapsed, 3),
        "sending_s": round(sending_ended, 3),
        "scored_per_s": round(run.ok / elapsed, 1) if elapsed > 0 else None,
        "offered_per_s": rate or None,
        "max_lag_s": round(run.max_lag, 3),
        "backlog_at_end": backlog,
        "concurrency": run.concurrency,
        "plugin": stats,
        "rewards": run.rewards,
    }


def main() -> int:
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    doc = json.load(sys.stdin)
    result = asyncio.run(drive(doc))
    print(json.dumps({"result": result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
