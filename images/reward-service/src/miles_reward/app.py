"""The HTTP API as a plain ASGI application (no framework: the per-request overhead is the budget).

POST /score         {"prompt": str | [{"role", "content"}, ...], "response": str, "label": str|null}
                    -> a bare JSON number
POST /score/batch   [sample, ...] -> [number, ...] in order, when every sample scored;
                    otherwise 503 (any sample failed transiently) or 422 (only unusable labels) with
                    {"error", "detail", "results": [number | {"error", "detail"}, ...]}
GET  /health        liveness: 200 while the event loop answers and workers can start
GET  /ready         readiness: 200 while capacity is free and checks are not failing repeatedly
GET  /metrics       Prometheus text format

A failure is answered with a non-2xx status and a JSON object, never with a number.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from miles_reward.config import Config
from miles_reward.metrics import Metrics
from miles_reward.outcome import Failed, Outcome, Prompt, Sample, Scored
from miles_reward.pool import PoolSettings, WorkerPool

log = logging.getLogger("miles_reward.app")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MAX_BODY_BYTES = 16 * 1024 * 1024
JSON_HEADERS = [(b"content-type", b"application/json")]
RETRY_AFTER = (b"retry-after", b"1")


class BadRequest(ValueError):
    pass


def _prompt_from(value: Any, where: str) -> Prompt:
    """miles sends the prompt as text, or as the list of chat messages when it does not apply the
    chat template itself (``--apply-chat-template`` off); both are accepted."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        messages = []
        for i, message in enumerate(value):
            role = message.get("role") if isinstance(message, dict) else None
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(role, str) or not isinstance(content, str):
                raise BadRequest(
                    f"{where}: 'prompt'[{i}]: expected a message "
                    '{"role": str, "content": str}, found ' + json.dumps(message)[:200]
                )
            messages.append((role, content))
        return tuple(messages)
    raise BadRequest(
        f"{where}: 'prompt': expected a string or a list of chat messages, "
        f"found {type(value).__name__}"
    )


def _sample_from(obj: Any, where: str) -> Sample:
    if not isinstance(obj, dict):
        raise BadRequest(f"{where}: expected a JSON object with prompt, response, label")
    response = obj.get("response")
    if not isinstance(response, str):
        raise BadRequest(f"{where}: 'response' must be a string")
    prompt = _prompt_from(obj.get("prompt"), where)
    label = obj.get("label")
    if isinstance(label, bool) or not (label is None or isinstance(label, str | int | float)):
        raise BadRequest(f"{where}: 'label' must be a string or null")
    if isinstance(label, int | float):
        label = str(label)
    return Sample(prompt, response, label)


def _failure_body(kind: str, detail: str, **extra: Any) -> bytes:
    return json.dumps({"error": kind, "detail": detail, **extra}).encode()


def _number(value: float) -> bytes:
    return json.dumps(value).encode()


class RewardApp:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.metrics = Metrics(config.backend, config.workers, config.max_inflight)
        self.pool = WorkerPool(
            PoolSettings(
                backend=config.backend,
                workers=config.workers,
                max_inflight=config.max_inflight,
                timeout_seconds=config.timeout_seconds,
                model_path=config.model_path,
                math_answer=config.math_answer,
            ),
            on_restart=lambda reason: self.metrics.worker_restarts.labels(reason).inc(),
        )
        self.metrics.bind_pool(lambda: self.pool.inflight, lambda: self.pool.ready_workers)
        self.started = False
        self._shutdown_requested = False

    def begin_shutdown(self) -> None:
        """Called on SIGTERM (from the signal handler, on the loop's thread): keeps serving what is
        in flight, and after ``drain_queue_after_seconds`` answers what is still queued with 503,
        so the process ends within ``shutdown_grace_seconds`` with every request answered."""
        if self._shutdown_requested:
            return
        self._shutdown_requested = True
        delay = self.config.drain_queue_after_seconds
        log.info("SIGTERM: draining; queued samples still waiting after %gs get 503", delay)
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().call_later(delay, self.pool.drain_queue)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    # -------------------------------------------------------------- lifespan
    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.pool.start()
                except Exception as exc:
                    log.exception("could not start the %s workers", self.config.backend)
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    await self.pool.close(1.0)
                    return
                self.started = True
                log.info(
                    "ready: backend=%s%s workers=%d max_inflight=%d timeout=%gs",
                    self.config.backend,
                    f" answer={self.config.math_answer}"
                    if self.config.backend == "math_verify"
                    else "",
                    self.config.workers,
                    self.config.max_inflight,
                    self.config.timeout_seconds,
                )
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.pool.close()
                log.info("stopped")
                await send({"type": "lifespan.shutdown.complete"})
                return

    # ------------------------------------------------------------------ http
    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        if path in ("/score", "/score/batch"):
            if method != "POST":
                await _respond(
                    send,
                    405,
                    _failure_body("method_not_allowed", "use POST"),
                    [(b"allow", b"POST")],
                )
                return
            await self._score(path == "/score/batch", receive, send)
        elif method not in ("GET", "HEAD"):
            await _respond(
                send, 405, _failure_body("method_not_allowed", "use GET"), [(b"allow", b"GET")]
            )
        elif path == "/health":
            if self.pool.broken:
                await _respond(send, 503, _failure_body("broken", self.pool.broken))
            else:
                await _respond(send, 200, b'{"status":"ok"}')
        elif path == "/ready":
            ok, why = self.pool.readiness()
            if ok:
                await _respond(send, 200, b'{"status":"ready"}')
            else:
                await _respond(send, 503, _failure_body("not_ready", why))
        elif path == "/metrics":
            await _respond(
                send,
                200,
                self.metrics.render(),
                [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")],
            )
        else:
            await _respond(send, 404, _failure_body("not_found", f"no route {path}"))

    async def _score(self, batch: bool, receive: Receive, send: Send) -> None:
        endpoint = "batch" if batch else "score"
        received_at = time.monotonic()
        self.metrics.inflight_requests.inc()
        try:
            status, body, outcome = await self._score_inner(batch, receive, received_at)
        finally:
            self.metrics.inflight_requests.dec()
        extra = [RETRY_AFTER] if status == 503 else []
        await _respond(send, status, body, extra)
        self.metrics.request_done(endpoint, outcome, time.monotonic() - received_at)
        if status >= 500 and outcome != "overloaded":
            log.warning("%s answered %d: %s", endpoint, status, body[:300].decode(errors="replace"))

    async def _score_inner(
        self, batch: bool, receive: Receive, received_at: float
    ) -> tuple[int, bytes, str]:
        body = await _read_body(receive)
        if body is None:
            return (
                413,
                _failure_body("too_large", f"request body over {MAX_BODY_BYTES} bytes"),
                "too_large",
            )
        try:
            samples = self._parse(body, batch)
        except BadRequest as exc:
            return 400, _failure_body("bad_request", str(exc)), "bad_request"
        if batch and len(samples) > self.config.max_inflight:
            return (
                413,
                _failure_body(
                    "too_large",
                    f"batch of {len(samples)} exceeds "
                    f"REWARD_MAX_INFLIGHT={self.config.max_inflight}",
                ),
                "too_large",
            )
        if not samples:
            return 200, b"[]", "ok"
        futures = self.pool.try_submit(samples, received_at)
        if futures is None:
            if self.pool.broken:
                return 503, _failure_body("internal_error", self.pool.broken), "internal_error"
            reason = (
                f"{self.pool.inflight} samples in flight, REWARD_MAX_INFLIGHT="
                f"{self.config.max_inflight}; retry later"
            )
            return 503, _failure_body("overloaded", reason), "overloaded"
        outcomes: list[Outcome] = list(await asyncio.gather(*futures))
        return self._render(outcomes, batch)

    def _parse(self, body: bytes, batch: bool) -> list[Sample]:
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(f"body is not JSON: {exc}") from None
        if not batch:
            return [_sample_from(data, "body")]
        if isinstance(data, dict) and isinstance(data.get("samples"), list):
            data = data["samples"]
        if not isinstance(data, list):
            raise BadRequest("body: expected a JSON array of samples")
        return [_sample_from(item, f"sample {i}") for i, item in enumerate(data)]

    def _render(self, outcomes: list[Outcome], batch: bool) -> tuple[int, bytes, str]:
        scored = 0
        first_failure: Failed | None = None
        worst: Failed | None = None
        for o in outcomes:
            if isinstance(o, Scored):
                scored += 1
                continue
            self.metrics.sample_done(o.kind)
            first_failure = first_failure or o
            if worst is None or (o.status == 503 and worst.status != 503):
                worst = o
        if scored:
            self.metrics.sample_done("scored", scored)
            self.metrics.scores_given([o.score for o in outcomes if isinstance(o, Scored)])
        if worst is None:
            scores = [o.score for o in outcomes if isinstance(o, Scored)]
            if not all(math.isfinite(s) for s in scores):
                return 503, _failure_body("internal_error", "non-finite score"), "internal_error"
            if not batch:
                return 200, _number(scores[0]), "ok"
            return 200, json.dumps(scores).encode(), "ok"
        if not batch:
            return worst.status, _failure_body(worst.kind, worst.detail), worst.kind
        results = [
            o.score if isinstance(o, Scored) else {"error": o.kind, "detail": o.detail}
            for o in outcomes
        ]
        failed = len(outcomes) - scored
        detail = f"{failed} of {len(outcomes)} samples failed; first: {worst.kind}: {worst.detail}"
        return worst.status, _failure_body(worst.kind, detail, results=results), worst.kind


async def _read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        part: bytes = message.get("body", b"")
        size += len(part)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(part)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _respond(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = list(JSON_HEADERS) if not extra or extra[0][0] != b"content-type" else []
    headers += extra or []
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
