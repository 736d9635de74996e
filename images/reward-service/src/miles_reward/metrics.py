"""Prometheus metrics of the service (text exposition format at GET /metrics)."""

from __future__ import annotations

import math
from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

# The *_created series double the exposition for no use here.
disable_created_metrics()  # type: ignore[no-untyped-call]

LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

ENDPOINTS = ("score", "batch")
REQUEST_OUTCOMES = (
    "ok",
    "bad_request",
    "too_large",
    "unusable_label",
    "overloaded",
    "timeout",
    "worker_died",
    "internal_error",
    "shutting_down",
)
SAMPLE_OUTCOMES = (
    "scored",
    "unusable_label",
    "timeout",
    "worker_died",
    "internal_error",
    "shutting_down",
)


class Metrics:
    def __init__(self, backend: str, workers: int, max_inflight: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "reward_requests",
            "HTTP scoring requests by endpoint and outcome",
            ["endpoint", "outcome"],
            registry=r,
        )
        self.samples = Counter(
            "reward_samples",
            "Samples by outcome (a batch counts each of its samples)",
            ["outcome"],
            registry=r,
        )
        # Two monotonic sums, so a mean reward can be taken from rates (a reward model's scores can
        # be negative, which a counter cannot take and a Summary's _sum would show as resets):
        # mean = (rate(positive) - rate(negative)) / rate(reward_samples_total{outcome="scored"}).
        self.score_sum = Counter(
            "reward_score",
            "Sum of the magnitudes of the scores given, by sign",
            ["sign"],
            registry=r,
        )
        self.latency = Histogram(
            "reward_request_duration_seconds",
            "Time from request received to response sent",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.inflight_requests = Gauge(
            "reward_inflight_requests",
            "Scoring requests being handled",
            registry=r,
        )
        self.inflight_samples = Gauge(
            "reward_inflight_samples",
            "Samples admitted and not yet answered",
            registry=r,
        )
        self.max_inflight = Gauge(
            "reward_max_inflight_samples",
            "REWARD_MAX_INFLIGHT",
            registry=r,
        )
        self.workers_ready = Gauge(
            "reward_workers_ready",
            "Worker processes ready to score",
            registry=r,
        )
        self.worker_restarts = Counter(
            "reward_worker_restarts",
            "Worker processes replaced, by reason",
            ["reason"],
            registry=r,
        )
        self.info = Gauge(
            "reward_service_info",
            "Configuration of this service",
            ["backend", "workers"],
            registry=r,
        )
        self.info.labels(backend=backend, workers=str(workers)).set(1)
        self.max_inflight.set(max_inflight)
        # Pre-create every child: absent outcomes export as 0 and the hot path skips label lookups.
        self._req = {
            (e, o): self.requests.labels(e, o) for e in ENDPOINTS for o in REQUEST_OUTCOMES
        }
        self._smp = {o: self.samples.labels(o) for o in SAMPLE_OUTCOMES}
        self._lat = {e: self.latency.labels(e) for e in ENDPOINTS}
        self._positive = self.score_sum.labels("positive")
        self._negative = self.score_sum.labels("negative")
        for reason in ("timeout", "worker_died", "internal_error"):
            self.worker_restarts.labels(reason)

    def bind_pool(self, inflight: Callable[[], float], ready: Callable[[], float]) -> None:
        self.inflight_samples.set_function(inflight)
        self.workers_ready.set_function(ready)

    def request_done(self, endpoint: str, outcome: str, seconds: float) -> None:
        self._req[(endpoint, outcome)].inc()
        self._lat[endpoint].observe(seconds)

    def sample_done(self, outcome: str, count: int = 1) -> None:
        self._smp[outcome].inc(count)

    def scores_given(self, scores: list[float]) -> None:
        """Adds the finite scores to the sums (a non-finite score is answered as an error)."""
        positive = sum(x for x in scores if x > 0 and math.isfinite(x))
        negative = -sum(x for x in scores if x < 0 and math.isfinite(x))
        if positive:
            self._positive.inc(positive)
        if negative:
            self._negative.inc(negative)

    def render(self) -> bytes:
        return generate_latest(self.registry)
